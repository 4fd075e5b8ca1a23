"""The records of a profile, read once (:class:`Records`), complete by the runner's one rule
(:meth:`frag_utils.runs.RunSpec.is_complete`); and the parameter files the families of tables read."""
from __future__ import annotations

import functools
from typing import Iterable

import pandas as pd
import yaml

from .. import parameters, paths, records, runs
from .analysis import IMPORTANCE_SCORES

# the faithful grid's parameter files: its models, their attacks, the seed repeats
GRID_05, GRID_06, SEEDS_06 = "05_unlearn.table1.yaml", "06_attacks.table1.yaml", "06_attacks.table1_seeds.yaml"
# the retain and forget attacks behind Table 1's claim rows (FRP (P 0) and GradDiff, bf16) at two more
# seeds; the claims compare the means over the three
MARGIN_SEEDS_06 = "06_attacks.table1_margin_seeds.yaml"
# the pilots that chose its settings (docs/choices.md): unlearning strength in bf16, the attack's recipe
STRENGTH_PILOT, PROTOCOL_PILOT = "05_unlearn.strength_bf16.yaml", "06_attacks.protocol.yaml"
# the FRP ablations (Tables 5-7, retain attack) and the direction-blind noise controls (Appendix A.2)
ABLATIONS_05, ABLATIONS_06 = "05_unlearn.ablations.yaml", "06_attacks.ablations.yaml"
CONTROLS_05, CONTROLS_06 = "05_unlearn.controls.yaml", "06_attacks.controls.yaml"
# the bf16 models under the grid's forget+retain attack with the weights kept in fp32 (forget10; the others)
ATTACK_PRECISION_06 = ("06_attacks.attack_precision.yaml", "06_attacks.attack_precision_splits.yaml")
# the healthy frontier: every method at several strengths, and the forget+retain attacks of those that
# forget and keep their utility, at two seeds (scripts/plan_frontier_attacks.py), one attack file per
# split (so that the runs' names stay the same as the file grows), and their notebook-07 runs
FRONTIER_05 = "05_unlearn.frontier.yaml"
FRONTIER_06 = ("06_attacks.frontier_forget10.yaml", "06_attacks.frontier_forget05.yaml")
FRONTIER_07 = ("07_ablations.frontier_forget10.yaml", "07_ablations.frontier_forget05.yaml")
FRONTIER_10 = "10_sharpness.frontier.yaml"  # notebook 10 on every checkpoint the frontier attacks
# the frontier's notebook-07 settings on the paper's 15 Table 3 checkpoints (bf16), one file per split
TABLE3_07 = tuple(f"07_ablations.table3_{split}.yaml" for split in ("forget10", "forget05", "forget01"))
# the forget10 Table 3 checkpoints unlearned from the target of another training seed, attacked
SECOND_TARGET_05, SECOND_TARGET_06 = "05_unlearn.target_seed43.yaml", "06_attacks.target_seed43.yaml"

METHOD_NAMES = {"ga": "GA", "graddiff": "GradDiff", "npo": "NPO", "rmu": "RMU", "simnpo": "SimNPO",
                "idkdpo": "IdkDPO", "undial": "UNDIAL", "wga": "WGA", "sp": "SP", "frp": "FRP", "gold": "gold"}
DENSE = ("ga", "graddiff", "npo", "rmu", "simnpo", "idkdpo", "undial", "wga")  # the gradient methods
MODEL_COLUMNS = ["model", "method", "weights", "forget_split", "es", "es_retain", "model_utility", "l2_all",
                 "FRAG_x100", "A_f_x100", "A_r_x100", "target_es", "target_model_utility", "run"]


def complete_runs(notebook: str, profile: str) -> list[dict]:
    """Every complete run (by the runner's rule) of ``notebook`` with ``profile``, by name, with its ``run``."""
    nb = parameters.resolve_notebook(notebook)
    found = []
    for file in sorted((paths.RUNS_DIR / notebook).glob("*/" + paths.RESULTS_FILE)):
        rec = records.read_json(file)
        params = rec["provenance"]["params"]
        if params.get("profile") == profile and runs.RunSpec(nb, params, file.parent.name).is_complete():
            found.append({"run": f"{notebook}/{file.parent.name}", **rec})
    return found


def row(record: dict) -> dict:
    return record["results"]["row"]


def name(record: dict) -> str:
    return record["run"].split("/", 1)[1]


def params(record: dict) -> dict:
    return record["provenance"]["params"]


def made(record: dict) -> dict:
    return record["results"].get("made", {})


def short_label(record: dict) -> str:
    """The paper's name of a 05 record's method (FRP with its veto P); its parameter file fixes the rest."""
    method, p = row(record)["method"], params(record)
    if method == "noise":
        return f"noise ({p['noise_scale']:g}x FRP's L2)"
    if method == "sp" and p.get("match_l2_run"):
        return "SP (at an FRP run's L2)"
    if method == "frp":
        return f"FRP (P {float(made(record).get('veto') or 0):g})"
    return METHOD_NAMES.get(method, method)


def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The frames one below the other (a fresh index), or an empty table when there are none."""
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def seed_deltas(attacks: Iterable[dict]) -> dict[str, list[float]]:
    """05 run name -> the ΔES of each of ``attacks`` (attack records) on it, in their order."""
    seeds: dict[str, list[float]] = {}
    for r in attacks:
        seeds.setdefault(row(r)["unlearned_run"], []).append(row(r)["delta_es"])
    return seeds


class Records:
    """The complete records of ``profile`` (``method_by_run``: notebook 05's by run name; ``all_attacks``: notebook
    06's by :meth:`key`, a run two files list read once, less the ``stale`` ones, whose 05 run was redone or removed
    since: its FRAG or L2 moved), and its grid's files (models, attacks, seed repeats)."""

    def __init__(self, profile: str, grid_05: str = GRID_05, grid_06: str = GRID_06, seeds_06: str = SEEDS_06) -> None:
        self.profile, self.grid_05, self.grid_06, self.seeds_06 = profile, grid_05, grid_06, seeds_06
        self.params_dir = paths.PARAMS_DIR / profile
        self.attack_runs = complete_runs("06_attacks", profile)
        self.method_runs = complete_runs("05_unlearn", profile)
        self.method_by_run = {name(r): r for r in self.method_runs}
        self.defaults_06 = parameters.notebook_defaults("06_attacks")
        self.stale = [r["run"] for r in self.attack_runs if self._attacked_other_weights(r)]
        self.all_attacks: dict[str, dict] = {}
        for r in self.attack_runs:  # a run recorded twice under two names (two files list it) is read once
            if r["run"] not in self.stale:
                key = self.key(params(r))
                if key in self.all_attacks:
                    print(f"{r['run']} repeats {self.all_attacks[key]['run']} (the same parameters): read once")
                self.all_attacks.setdefault(key, r)

    def _attacked_other_weights(self, r: dict) -> bool:
        u = r["results"]["unlearned_run"]
        return bool(u) and (u not in self.method_by_run or any(
            row(r)[k] != row(self.method_by_run[u])[k] for k in ("FRAG_x100", "l2_all")))

    def key(self, attack_params: dict) -> str:
        """An attack's identity: its parameters less the notebook's defaults."""
        return parameters.params_key(attack_params, self.defaults_06)

    def planned(self, notebook: str, file: str) -> list:
        """The runs one parameter file of the profile plans (none when the file is absent)."""
        path = self.params_dir / file
        return runs.plan_run(notebook, path) if path.is_file() else []

    def attacks_of_file(self, file: str) -> list[dict]:
        """The recorded runs of one notebook-06 file, in file order, found by their parameters (another
        file may have recorded them), else by name (the paper dry run's smaller sizes)."""
        by_name = {name(r): r for r in self.all_attacks.values()}
        found = [self.all_attacks.get(self.key(s.params)) or by_name.get(s.name)
                 for s in self.planned("06_attacks", file)]
        return [r for r in found if r is not None]

    def methods_of_file(self, file: str) -> list[dict]:
        """The recorded runs of one notebook-05 file, in file order."""
        return [self.method_by_run[s.name] for s in self.planned("05_unlearn", file) if s.name in self.method_by_run]

    def label(self, run: str) -> str:
        """A 05 run's :func:`short_label`, or its name where it is not a record of the profile."""
        return short_label(self.method_by_run[run]) if run in self.method_by_run else run

    def model_frame(self, recs: list[dict], settings: tuple[str, ...] = ()) -> pd.DataFrame:
        """One row per notebook-05 record: label, row, weights, ``settings``, run."""
        return pd.DataFrame([{"model": short_label(r), **row(r), "weights": params(r).get("weights", "fp32"),
                              **{k: params(r)[k] for k in settings}, "run": r["run"]}
                             for r in recs], columns=[*MODEL_COLUMNS[:4], *settings, *MODEL_COLUMNS[4:]])

    def forget10_bf16(self, *methods: str) -> list[dict]:
        """The grid's models of ``methods`` on forget10 with the weights in bf16, in file order."""
        return [r for r in self.methods_of_file(self.grid_05) if row(r)["method"] in methods
                and row(r)["forget_split"] == "forget10" and params(r).get("weights") == "bf16"]

    def centre(self) -> dict | None:
        """The grid's FRP (P 0) on forget10 in bf16: the ablations' centre, the noise controls' scale."""
        return next((r for r in self.forget10_bf16("frp") if not made(r).get("veto")), None)

    def attacked(self, models: list[dict], attack_data: str, files: tuple[str, ...]) -> pd.DataFrame:
        """One row per model: before and after its ``attack_data`` attack in ``files`` (blank until attacked)."""
        attacks = {row(r)["unlearned_run"]: r for f in files for r in self.attacks_of_file(f)
                   if row(r)["attack_data"] == attack_data}
        rows = []
        for r in models:
            a = attacks.get(name(r))
            after = row(a) if a else {}
            rows.append({"model": short_label(r), "variant": made(r).get("variant", ""), "lambda": made(r).get("lam"),
                         "sparsity": made(r).get("sparsity"), **row(r), "es_after": after.get("es_after"),
                         "delta_es": after.get("delta_es"), "model_utility_after": after.get("model_utility_after"),
                         "run": r["run"], "attack_run": a["run"] if a else ""})
        return pd.DataFrame(rows)

    def forget_retain_repeats(self, checkpoints: set[str] | None = None) -> list[dict]:
        """The forget+retain attacks of the seed-repeat file (on ``checkpoints`` only, 05 run names, if given)."""
        return [r for r in self.attacks_of_file(self.seeds_06) if row(r)["attack_data"] == "forget_retain"
                and (checkpoints is None or row(r)["unlearned_run"] in checkpoints)]

    @functools.cached_property
    def protocol(self) -> dict:
        """The grid's forget+retain attack (its attack file's first entry), less what names the model."""
        protocol = yaml.safe_load((self.params_dir / self.grid_06).read_text())[0]
        return {k: v for k, v in protocol.items() if k not in ("unlearned_run", "forget_split", "attack_data")}


def scored_by_07(rec: Records, files: tuple[str, ...], chosen: pd.DataFrame,
                 names: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """``chosen`` (checkpoints, their 05 runs ``names``) with the barrier and each ``<score>:<term>`` of the
    complete notebook-07 runs of ``files``, less the checkpoints none scored; and those runs."""
    specs = [s for f in files for s in rec.planned("07_ablations", f) if s.is_complete()]
    ablation_runs = [f"07_ablations/{s.name}" for s in specs]
    found: dict[str, dict] = {}
    for spec in specs:
        result = records.read_json(spec.out_dir / paths.RESULTS_FILE)["results"]
        for r in result["barrier"]:
            found.setdefault(r["unlearned_run"], {})["barrier"] = r["barrier"]
        for r in result["scores"]:
            found.setdefault(r["unlearned_run"], {}).update(
                {f"{score}:{r['importance']}": r[score] for score in IMPORTANCE_SCORES if score in r})
    scored = chosen.assign(**{k: [found.get(n, {}).get(k, float("nan")) for n in names]
                              for k in sorted({k for v in found.values() for k in v})})
    if "barrier" not in scored:
        return chosen.iloc[:0], ablation_runs
    return scored.dropna(subset=["barrier"]), ablation_runs
