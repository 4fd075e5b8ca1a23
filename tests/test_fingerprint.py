"""scripts/numerics_fingerprint.py: which CPU kernels give other bits on another CPU. Its inputs must
be the same numbers every time (else a difference between machines says nothing), and --compare
must name exactly the ops whose hashes differ (checked on the two committed AMD fingerprints:
MKL's COMPATIBLE branch changes the GEMMs, not torch's own kernels)."""
import importlib.util
import json

from frag_utils import paths

SCRIPT = paths.REPO_ROOT / "scripts" / "numerics_fingerprint.py"
RESULTS = paths.REPO_ROOT / "bench" / "results"


def _module():
    spec = importlib.util.spec_from_file_location("numerics_fingerprint", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fingerprint_is_a_function_of_the_kernels_only():
    fp = _module()
    first, second = fp.fingerprint(), fp.fingerprint()
    assert first == second and len(first) >= 20
    assert len(set(first.values())) == len(first)  # every op hashes its own output


def test_compare_names_the_ops_whose_hashes_differ(capsys):
    fp = _module()
    a = RESULTS / "numerics_fingerprint_amd-epyc_mkl-avx2.json"
    b = RESULTS / "numerics_fingerprint_amd-epyc_mkl-compatible.json"
    fp.main(["--compare", str(a), str(b)])
    lines = capsys.readouterr().out.splitlines()
    ops_a, ops_b = (json.loads(f.read_text())["ops"] for f in (a, b))
    differs = {line.split("  ", 1)[1] for line in lines if line.startswith("DIFFERS")}
    assert differs == {k for k in ops_a if ops_a[k] != ops_b[k]}
    assert "linear 256x576 @ 576x1536" in differs and "softmax" not in differs
