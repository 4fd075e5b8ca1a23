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

from frag_utils import cache, kernel_paths, paths
from frag_utils.records import cpu_description

# name -> (the CPU flag that must be present for the path to be another than the native one, its caps)
KERNEL_PATHS = {
    "avx512_bf16": ("amx_bf16", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}),  # a Zen 4's bf16 kernels, no AMX
    "avx2": ("avx512f", kernel_paths.CAPS["AVX2"]),  # a Zen 3's: the AVX2 caps the runner gives the records' path
}


def test_the_environment_replaces_every_cap_and_names_them_all():
    env = kernel_paths.environment({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"},
                                   {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "HOME": "/h"})
    assert env == {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "HOME": "/h"}
    assert set(cache.KERNEL_CAPS) < set(kernel_paths.ALL_CAPS)  # every cap the cache keys on is replaced


@pytest.mark.parametrize("name", sorted(KERNEL_PATHS))
def test_kernel_sensitive_tests_hold_on_another_kernel_path(name):
    flag, caps = KERNEL_PATHS[name]
    if flag not in cpu_description().get("cpu_flags", []):
        pytest.skip(f"this CPU has no {flag}: the {name} path is its own, and the suite ran it")
    env = kernel_paths.environment({**caps, "FRAG_THREADS": "1"})
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "kernel_paths",
                           "tests/"], cwd=paths.REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    tail = "\n".join(done.stdout.splitlines()[-30:])
    assert done.returncode == 0, f"the kernel_paths tests fail on the {name} path ({caps}):\n{tail}"
    assert " passed" in done.stdout.splitlines()[-1], tail


AVX512_FLAGS = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}


def test_this_cpus_path_is_read_from_its_flags_without_torch():
    assert kernel_paths.native(AVX512_FLAGS, "x86_64") == "AVX512"
    assert kernel_paths.native({"avx2", "fma", "sse4_2"}, "x86_64") == "AVX2"
    assert kernel_paths.native({"sse4_2"}, "x86_64") == "DEFAULT"
    assert kernel_paths.native(set(), "aarch64") == "AARCH64"
    assert kernel_paths.cpu_flags("processor : 0\nflags\t\t: fpu avx2 fma\n") == {"fpu", "avx2", "fma"}


def test_a_job_takes_the_records_path_where_this_cpu_can_and_says_why_where_it_cannot():
    capped = kernel_paths.choose({"AVX2"}, here="AVX512")
    assert capped.path == "AVX2" and capped.caps == kernel_paths.CAPS["AVX2"]
    assert capped.line.startswith("kernels: AVX2, as the records")
    same = kernel_paths.choose({"AVX2"}, here="AVX2")  # a Zen 3: its own path is the records'
    assert (same.path, same.caps, same.line) == ("AVX2", {}, "kernels: AVX2, as the records")
    for wanted, here in (({"AVX512"}, "AVX2"), ({"AVX2"}, "AARCH64")):  # a path this CPU cannot take: its own
        refused = kernel_paths.choose(wanted, here=here)
        (theirs,) = wanted
        assert (refused.path, refused.caps) == (here, {})
        assert f"the {theirs} path of the records is not available here" in refused.line and here in refused.line
    assert kernel_paths.choose({"AVX2"}, "native", here="AVX512").caps == {}  # --kernels native
    assert "several paths: AVX2, AVX512" in kernel_paths.choose({"AVX2", "AVX512"}, here="AVX512").line
    assert kernel_paths.choose(set(), here="AVX512").caps == {}
    with pytest.raises(ValueError, match="--kernels must be one of"):
        kernel_paths.choose({"AVX2"}, "fastest")


def test_the_records_path_is_read_from_their_provenance_on_the_cpu_only():
    def rec(capability, device="cpu"):
        return {"provenance": {"environment": {"cpu_capability": capability, "device": device}}}

    assert kernel_paths.of_records([rec("AVX2"), rec("avx2")]) == {"AVX2"}
    assert kernel_paths.of_records([rec("AVX512", "cuda"), {"provenance": {}}]) == set()


def test_a_process_on_a_capped_path_has_its_caps_alone_and_a_cache_of_its_own(monkeypatch, tmp_path):
    env = kernel_paths.on_path("AVX2", {"HOME": "/h", "MKL_CBWR": "AVX2", paths.KERNELS_ENV: "X"})
    assert env == {"HOME": "/h", **kernel_paths.CAPS["AVX2"], paths.KERNELS_ENV: "AVX2"}
    assert kernel_paths.is_on("AVX2", env) and not kernel_paths.is_on("AVX512", env)
    native = kernel_paths.on_path("AVX512", env)  # a CPU's own path: no cap, the cache as it is
    assert native == {"HOME": "/h"} and kernel_paths.is_on("AVX512", native)
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(paths.KERNELS_ENV, "AVX2")
    assert paths.cache_dir() == tmp_path / "kernels-avx2"  # the AVX2 target beside, never over, the AVX-512 one
    monkeypatch.delenv(paths.KERNELS_ENV)
    assert paths.cache_dir() == tmp_path
    assert kernel_paths.check("avx2") == "AVX2"
    with pytest.raises(ValueError, match="--kernels AVX3: not a kernel path"):
        kernel_paths.check("AVX3")


def test_run_one_starts_again_on_its_path_from_a_shell_only(monkeypatch):
    from frag_utils import cli

    started = []
    monkeypatch.setattr(os, "execve", lambda exe, argv, env: started.append((argv, env)))
    for cap in (*kernel_paths.ALL_CAPS, paths.KERNELS_ENV):
        monkeypatch.delenv(cap, raising=False)
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")  # a cap of the shell's, not of the path: removed
    cli._on_kernel_path("AVX2", ["run-one", "06_attacks/x", "--kernels", "AVX2"])
    ((argv, env),) = started
    assert argv[argv.index("-m"):] == ["-m", "frag_utils", "run-one", "06_attacks/x", "--kernels", "AVX2"]
    assert kernel_paths.is_on("AVX2", env) and env["HOME"] == os.environ["HOME"]
    monkeypatch.delenv("MKL_CBWR")
    for name, value in kernel_paths.on_path("AVX2", {}).items():
        monkeypatch.setenv(name, value)
    cli._on_kernel_path("AVX2", ["run-one", "06_attacks/x"])  # already on it: no second start
    assert len(started) == 1
    cli._on_kernel_path(kernel_paths.native(), ["run-one", "06_attacks/x"])  # this CPU's own: the caps go
    assert len(started) == 2 and kernel_paths.is_on(kernel_paths.native(), started[-1][1])
    # main() starts again only when it was started from a shell (a caller's process is never replaced)
    assert cli.main(["run-one", "06_attacks/nothing_recorded", "--kernels", "AVX512"]) == 2
    assert len(started) == 2
    monkeypatch.setattr(sys, "argv", ["frag", "run-one", "06_attacks/x", "--kernels", "AVX3"])
    assert cli.main() == 2  # a name that is no path: one line, no start


def test_the_drift_table_names_the_path_of_the_record_and_of_the_remake():
    from frag_utils import drift

    row = {"metric": "/evaluation/unlearned/es", "recorded": 0.5, "remade": 0.51, "drift": 0.01, "tolerance": 0.04,
           "ok": True}
    report = {"verdict": "within tolerance", "rows": [row], "weights": {}, "kernels": ["AVX2", "AVX512"]}
    header = drift.format_report("05_unlearn/x", report).splitlines()[0]
    assert "kernels: the record's AVX2, this remake's AVX512" in header
    assert drift.rejudge(drift.format_report("05_unlearn/x", report), "05_unlearn/x")["verdict"] == "within tolerance"
    same = drift.format_report("05_unlearn/x", {**report, "kernels": ["AVX2", "AVX2"]})
    assert "kernels: AVX2, as the record;" in same
