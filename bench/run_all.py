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
    for r in (es or {}).get("rows", [es] if es else []):  # one model per file before the rows
        which = f"ES {r['es_one_pass']:.2f}"
        rows.append(f"| ES one pass vs generation, identical values ({which}) | "
                    f"{r['per_example_mismatches']} mismatches "
                    f"of {r['n_examples']} | 0 | {'yes' if r['per_example_mismatches'] == 0 else 'no'} |")
        rows.append(f"| ES speed-up over generation ({which}) | {r['speedup_min_over_min']:.1f}x | >= 20x | "
                    f"{'yes' if r['speedup_min_over_min'] >= 20 else 'no'} |")
    ev = load("eval_speed")
    if ev:
        rows.append(f"| full evaluation, grouped scoring / metric by metric ({ev['max_abs_difference']:.0e} apart) | "
                    f"{ev['new_over_old']:.2f}x | <= 0.33x | {'yes' if ev['new_over_old'] <= 1 / 3 else 'no'} |")
    ts = load("train_step")
    if ts:
        o = ts["over_old"]
        rows.append(f"| target fine-tuning step, label-position loss / full logits | {o['label_positions']:.2f}x | "
                    "(reported) | - |")
        rows.append(f"| the same, with length-grouped batches and the short system prompt | {o['short_prompt']:.2f}x | "
                    "(reported) | - |")
        for name, label in (("fused_adamw", "fused AdamW"), ("compiled_layers", "fused AdamW and compiled decoder "
                                                                                "layers")):
            if name in ts.get("over_base", {}):
                diff = ts["max_abs_weight_difference_from_base"][name]
                rows.append(f"| the same step with {label} / without (weights after one epoch up to {diff:.0e} "
                            f"apart) | {ts['over_base'][name]:.2f}x | (reported) | - |")
        if "profile" in ts:
            by = ts["profile"].get("step_rate_over_matmul_rate_by_variant", {"short_prompt": ts["profile"][
                "step_rate_over_matmul_rate"]})
            for name, label in (("short_prompt", "today's"), ("compiled_layers", "compiled layers")):
                if name in by:
                    rows.append(f"| the step's matrix-product FLOPs per second ({label}) / a 2048^3 fp32 product's "
                                f"({ts['matmul_gflops_2048']:.0f} GFLOP/s) | {by[name]:.2f}x | >= 0.70x | "
                                f"{'yes' if by[name] >= 0.7 else 'no'} |")
    fc = load("frag_cost")
    if fc:
        for key, label in (("calibration_over_forward", "calibration / plain forward passes"),
                           ("comparison_over_read", "weight comparison / reading both checkpoints"),
                           ("rss_over_checkpoint", "`frag score` peak RSS / one checkpoint (calibration cached)")):
            target = fc[f"target_{key}"]
            rows.append(f"| {label} | {fc[key]:.2f}x | <= {target}x | {'yes' if fc[key] <= target else 'no'} |")
        if "rss_over_checkpoint_uncached" in fc:  # the first run, which builds and runs the model to calibrate
            v = fc["rss_over_checkpoint_uncached"]
            rows.append(f"| the same on its first run (calibrating) | {v:.2f}x | <= 1.5x | "
                        f"{'yes' if v <= 1.5 else 'no'} |")
    for gj in (load("grid_jobs"), load("grid_jobs_smol_slice")):
        for jobs, ratio in (gj or {}).get("over_first", {}).items():
            if jobs != "1":
                what = (f"a slice of the {gj['profile']} grid ({gj['records_against_first'][jobs]['runs']} runs)"
                        if gj.get("slice") else f"the {gj['profile']} grid from an empty cache")
                rows.append(f"| {what}, {jobs} jobs side by side / one job "
                            f"(wall; {gj['records_against_first'][jobs]['outside_tolerance']} records outside "
                            f"tolerance) | {ratio:.2f}x | (reported) | - |")
    fa = load("frag_vs_attack")
    if fa:
        rows.append(f"| one forget+retain attack / FRAG end to end | {fa['attack_over_frag']:.1f}x | >= 100x | "
                    f"{'yes' if fa['attack_over_frag'] >= 100 else 'no'} |")
        if "attack_over_frag_cached" in fa:
            v = fa["attack_over_frag_cached"]
            rows.append(f"| the same against the comparison alone (calibration made, in-process) | {v:.0f}x | "
                        f">= 100x | {'yes' if v >= 100 else 'no'} |")
    cs = load("collect_speed")
    if cs:
        rows.append(f"| the frontier's within-method interval ({cs['checkpoints']} checkpoints, {cs['n_boot']} "
                    f"resamples), strata scored together / one at a time (identical draws: "
                    f"{'yes' if cs['identical'] else 'NO'}) | {cs['today_over_loop']:.3f}x | <= 0.1x | "
                    f"{'yes' if cs['identical'] and cs['today_over_loop'] <= 0.1 else 'no'} |")
    tt = load("train_throughput")
    if tt:
        rows.append(f"| bare PyTorch loop / attack loop, tokens per second | {tt['bare_over_trainer']:.2f}x | "
                    f"<= 1.2x | "
                    f"{'yes' if tt['bare_over_trainer'] <= 1.2 else 'no'} |")
    fp = load("frp_cost")
    if fp:
        rows.append(f"| FRP ranking and zeroing / its calibration passes | {fp['prune_over_calibration']:.3f}x | "
                    "(reported) | - |")
    sc = load("scaling")
    if sc:
        per_m = [r["seconds_per_million_params"] * 1e3 for r in sc["rows"]]
        sizes = ", ".join(f"{r['size']} {r['n_params'] / 1e6:.0f}M" for r in sc["rows"])
        rows.append(f"| FRAG comparison time per million parameters ({sizes}) | "
                    f"{' / '.join(f'{v:.1f}' for v in per_m)} ms | linear (flat per M) | - |")
        rows.append("| FRAG comparison memory beyond the streamed start, MB (x the largest tensor) | "
                    + " / ".join(f"{(r['rss_peak'] - r['rss_after_load']) / 2**20:.0f} "
                                 f"({r.get('extra_rss_over_largest_tensor', float('nan')):.1f}x)" for r in sc["rows"])
                    + " | flat (one tensor at a time) | - |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    failed = []
    for script in sorted(here.glob("*.py")):
        if script.name == "run_all.py" or script.name.startswith("_"):
            continue
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)]).returncode != 0:
            failed.append(script.name)
    (results / "summary.md").write_text(summary())
    print(summary())
    sys.exit(f"failed: {failed}" if failed else 0)
