"""The tests whose outcome rests on the CPU's kernels (marked ``kernel_paths``) hold on every kernel path
this CPU can take, not only its own: each other path runs them in a fresh Python with the caps that force
it (the caps act when torch loads), so one machine checks what an AMD and an Intel CPU compute.

The records were made on AMD CPUs: Zen 4 and 5 (AVX-512 with AVX512-BF16, no AMX) and Zen 3 (AVX2, no
native bf16). An Intel Xeon with AMX computes bf16 products on AMX tiles, which round differently; capped,
it runs the Zen 4's bf16 kernels (oneDNN's) or the AVX2 path. Its fp32 products stay MKL's Intel code
either way: no cap makes them bit for bit an AMD CPU's (docs/reproducibility.md, "One machine, and another").
"""
import os
import subprocess
import sys

import pytest

from frag_utils import cache, paths
from frag_utils.records import cpu_description

# name -> (the CPU flag that must be present for the path to be another than the native one, its caps)
KERNEL_PATHS = {
    "avx512_bf16": ("amx_bf16", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}),  # a Zen 4's bf16 kernels, no AMX
    "avx2": ("avx512f", {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                         "MKL_ENABLE_INSTRUCTIONS": "AVX2"}),  # a Zen 3's: the AVX2 caps of the records
}


def path_environment(caps: dict[str, str], environ: dict | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) with every kernel cap it sets replaced by ``caps``."""
    environ = dict(os.environ if environ is None else environ)
    for name in (*cache.KERNEL_CAPS, "ATEN_CPU_CAPABILITY"):
        environ.pop(name, None)
    return {**environ, **caps}


def test_path_environment_replaces_every_cap():
    env = path_environment({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
                           {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "HOME": "/h"})
    assert env == {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "HOME": "/h"}


@pytest.mark.parametrize("name", sorted(KERNEL_PATHS))
def test_kernel_sensitive_tests_hold_on_another_kernel_path(name):
    flag, caps = KERNEL_PATHS[name]
    if flag not in cpu_description().get("cpu_flags", []):
        pytest.skip(f"this CPU has no {flag}: the {name} path is its own, and the suite ran it")
    env = path_environment({**caps, "FRAG_THREADS": "1"})
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "kernel_paths",
                           "tests/"], cwd=paths.REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    tail = "\n".join(done.stdout.splitlines()[-30:])
    assert done.returncode == 0, f"the kernel_paths tests fail on the {name} path ({caps}):\n{tail}"
    assert " passed" in done.stdout.splitlines()[-1], tail
