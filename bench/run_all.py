"""Run every benchmark script in bench/ (`make bench`), then write bench/results/summary.md
from their JSON (the README's benchmark block is filled from it by `python -m frag_utils.readme`)."""
import json
import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
results = here / "results"


def summary() -> str:
    rows = ["| benchmark | measured | target | met |", "|---|---|---|---|"]

    def load(name):
        f = results / f"{name}.json"
        return json.loads(f.read_text())["results"] if f.is_file() else None

    es = load("es_speed")
    if es:
        rows.append(f"| ES one pass vs generation: identical values | {es['per_example_mismatches']} mismatches of "
                    f"{es['n_examples']} | 0 | {'yes' if es['per_example_mismatches'] == 0 else 'no'} |")
        rows.append(f"| ES speed-up over generation | {es['speedup_min_over_min']:.1f}x | >= 20x | "
                    f"{'yes' if es['speedup_min_over_min'] >= 20 else 'no'} |")
    fc = load("frag_cost")
    if fc:
        for key, label in (("calibration_over_forward", "calibration / plain forward passes"),
                           ("comparison_over_read", "weight comparison / reading both checkpoints"),
                           ("rss_over_checkpoint", "`frag score` peak RSS / one checkpoint")):
            target = fc[f"target_{key}"]
            rows.append(f"| {label} | {fc[key]:.2f}x | <= {target}x | {'yes' if fc[key] <= target else 'no'} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    failed = []
    for script in sorted(here.glob("*.py")):
        if script.name == "run_all.py":
            continue
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)]).returncode != 0:
            failed.append(script.name)
    (results / "summary.md").write_text(summary())
    print(summary())
    sys.exit(f"failed: {failed}" if failed else 0)
