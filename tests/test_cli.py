import json
import subprocess
import sys

from frag_utils import paths


def _frag(*args):
    return subprocess.run([sys.executable, "-m", "frag_utils", *args], capture_output=True, text=True,
                          cwd=paths.REPO_ROOT, timeout=600, env={**__import__("os").environ, "FRAG_PROGRESS": "0"})


def test_eval_prints_es_and_utility_as_json():
    out = _frag("eval", "--model", "tiny", "--data", "synthetic", "--split", "forget10", "--limit", "2",
                "--utility-limit", "2", "--max-new-tokens", "4", "--json")
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["n_forget"] == 2 and 0 <= res["es"] <= 1 and 0 <= res["model_utility"] <= 1
    assert len([k for k in res if "/" in k]) == 9


def test_eval_bad_input_is_one_clear_line():
    out = _frag("eval", "--model", "tiny", "--split", "retain90")
    assert out.returncode == 2 and "must be a forget split" in out.stderr and "Traceback" not in out.stderr
    out = _frag("eval", "--model", "./missing_dir", "--split", "forget10")
    assert out.returncode == 2 and "does not exist" in out.stderr and "Traceback" not in out.stderr


def test_run_refuses_unknown_parameter():
    out = _frag("run", "01_data", "-p", "data_sauce", "synthetic")
    assert out.returncode == 2 and "Unknown parameter(s) ['data_sauce']" in out.stderr
