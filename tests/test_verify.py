"""make verify: a recorded run remade from an empty cache in a clone of HEAD reproduces its record
bit for bit (deterministic mode). The tiny target's record is committed as the fixture; it was
recorded on the machine its provenance names, and this test runs wherever the suite runs.

With MKL_CBWR=AVX2 it does not hold across CPU vendors (measured 2026-11-25: the Intel-made record
remade on an AMD EPYC differs; that MKL branch exists on Intel CPUs only), so deterministic mode
now uses COMPATIBLE. Until a record is measured to reproduce on the other vendor, the test is an
expected failure there that still runs and reports (an XPASS is the measurement); on a CPU of the
record's vendor it must pass."""
import json

import pytest

from frag_utils import paths, records, runs

TINY = json.loads((paths.RUNS_DIR / "02_target_and_gold" / "tiny" / runs.RESULTS_FILE).read_text())
RECORD_VENDOR = records.cpu_vendor(TINY["provenance"]["environment"].get("cpu_model"))
RECORD_MKL = TINY["provenance"]["environment"]["numerics"].get("mkl_cbwr")
THIS_VENDOR = records.cpu_vendor(records.cpu_description().get("cpu_model"))
# MKL branches measured to give the same bits on an Intel and an AMD CPU: none yet. AVX2 does not
# (measured); COMPATIBLE is MKL's documented single path for both, to be measured on the other
# vendor (then listed here, and the test is strict everywhere).
MEASURED_ACROSS_VENDORS: set[str] = set()


@pytest.mark.xfail(RECORD_VENDOR != THIS_VENDOR and RECORD_MKL not in MEASURED_ACROSS_VENDORS, strict=False,
                   raises=AssertionError,  # only other bits are expected there: a crash still fails
                   reason=f"record made on an {RECORD_VENDOR} CPU (MKL_CBWR={RECORD_MKL}), this one is {THIS_VENDOR}: "
                          "not yet measured to reproduce across CPU vendors (docs/reproducibility.md, 'Across CPU "
                          "vendors'); an XPASS here is that measurement")
def test_the_tiny_target_remade_from_an_empty_cache_is_identical_to_its_record(tmp_path):
    recorded = TINY
    assert recorded["results"]["checkpoint_sha256"]["target"]  # the record names its weights
    assert recorded["provenance"]["environment"]["numerics"]["deterministic"]
    report = runs.verify("02_target_and_gold/tiny", workdir=tmp_path)
    assert [e["run"] for e in report] == ["02_target_and_gold/tiny"]
    assert report[0]["checkpoints"] == {"gold": "identical", "target": "identical"}
    assert report[0]["identical"], report[0]["differences"]


def test_verify_refuses_unknown_runs():
    with pytest.raises(runs.RunError, match="No run"):
        runs.verify("02_target_and_gold/nonexistent")


def test_upstream_lists_what_an_attack_reads_before_it():
    """A smol attack reads its unlearned model, which reads the profile's target."""
    attack = next(s for s in runs.grid("smol") if s.notebook.stem == "06_attacks")
    spec, specs = runs.find_run(f"06_attacks/{attack.name}")
    chain = [f"{s.notebook.stem}/{s.name}" for s in runs.upstream(spec, specs)]
    assert chain == ["02_target_and_gold/smol", f"05_unlearn/{attack.params['unlearned_run']}"]


def test_a_remade_run_that_differs_says_when_the_record_came_from_another_cpu_vendor_or_mode(monkeypatch):
    monkeypatch.setattr(records, "cpu_description", lambda: {"cpu_model": "AMD EPYC"})
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    note = runs._mode_note("Intel(R) Xeon(R) Processor", {"mkl_cbwr": "AVX2", "aten_cpu_capability": "AVX2"})
    assert "made on an Intel CPU with MKL_CBWR=AVX2 and this one is AMD" in note
    assert "MKL_CBWR=AVX2 then, COMPATIBLE now" in note and "ATEN_CPU_CAPABILITY" not in note
    same = {"mkl_cbwr": "COMPATIBLE", "aten_cpu_capability": "AVX2"}
    assert runs._mode_note("Intel(R) Xeon(R) Processor", same) == ""  # COMPATIBLE: not known to be vendor-bound
    assert runs._mode_note("AMD EPYC 7763 64-Core Processor", same) == ""
    assert runs._mode_note(None, {}) == ""
    monkeypatch.delenv("MKL_CBWR")  # FRAG_DETERMINISTIC=0: no MKL setting
    assert "MKL_CBWR=COMPATIBLE then, (unset) now" in runs._mode_note(None, same)
