"""The recorded runs of one profile, collected into notebook 09's tables (tested in
``tests/test_collect.py``; ``tests/test_regenerate.py`` checks that they rebuild the committed
tables byte for byte).

:class:`Collection` reads every complete ``results.json`` of a profile under ``papermill_runs/``
once; each method returns one table (a ``DataFrame``) and notes the runs it came from in
``sources``, which :meth:`Collection.write` puts in each table's provenance. The pure functions
of rows (the paper's Table 1 layout) live in :mod:`frag_utils.report.tables`, the statistics in
:mod:`frag_utils.report.analysis`, the figures in :mod:`frag_utils.report.plots`.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import drift, parameters, paths, records, runs
from . import analysis, tables

# the faithful grid's parameter files (issue 29): its models, their attacks, the seed repeats
GRID_05, GRID_06, SEEDS_06 = "05_unlearn.table1.yaml", "06_attacks.table1.yaml", "06_attacks.table1_seeds.yaml"
# issue 39: the retain and forget attacks behind Table 1's claim rows (FRP (P 0) and GradDiff, bf16)
# at two more seeds; the claims compare the means over the three
MARGIN_SEEDS_06 = "06_attacks.table1_margin_seeds.yaml"
# the pilots that chose its settings (docs/choices.md): unlearning strength in bf16, the attack's recipe
STRENGTH_PILOT, PROTOCOL_PILOT = "05_unlearn.strength_bf16.yaml", "06_attacks.protocol.yaml"
# the FRP ablations (Tables 5-7, retain attack) and the direction-blind noise controls (Appendix A.2)
ABLATIONS_05, ABLATIONS_06 = "05_unlearn.ablations.yaml", "06_attacks.ablations.yaml"
CONTROLS_05, CONTROLS_06 = "05_unlearn.controls.yaml", "06_attacks.controls.yaml"
# the bf16 models under the grid's forget+retain attack with the weights kept in fp32 (forget10; the others)
ATTACK_PRECISION_06 = ("06_attacks.attack_precision.yaml", "06_attacks.attack_precision_splits.yaml")
# the healthy frontier (issue 39): every method at several strengths, and the forget+retain attacks
# of those that forget and keep their utility, at two seeds (scripts/plan_frontier_attacks.py)
# (one attack file per split, so that the runs' names stay the same as the file grows)
FRONTIER_05 = "05_unlearn.frontier.yaml"
FRONTIER_06 = ("06_attacks.frontier_forget10.yaml", "06_attacks.frontier_forget05.yaml")
FRONTIER_07 = ("07_ablations.frontier_forget10.yaml", "07_ablations.frontier_forget05.yaml")  # one per split
# their settings: the paper profile's (papermill_runs/params/paper/07_ablations.yaml) on the smol target
FRONTIER_ABLATION = {"original": "profile-target", "prompt_template": "openunlearning", "n_calib": 128, "ig_steps": 4,
                     "lmc_stride": 0.05}
# issue 42: the same notebook-07 settings on the paper's 15 Table 3 checkpoints (bf16), one file per split
TABLE3_07 = tuple(f"07_ablations.table3_{split}.yaml" for split in ("forget10", "forget05", "forget01"))
FRONTIER_SEEDS = (42, 1)  # the attack seeds of each healthy checkpoint: attack.sh's, then one more
# issue 42: the attack variants, on one healthy frontier checkpoint per method at matched utility and
# the split's gold model (scripts/plan_attack_variants.py), one file per family and split
# (variants_file); each variant is one change of the grid's forget+retain attack (06_attacks.table1.yaml's
# first entry)
VARIANT_SPLITS = ("forget10",)
ATTACK_VARIANTS = {
    "attack_lr": ({"lr": 5e-5}, {"lr": 1e-4}, {"lr": 4e-4}),  # the protocol's 2e-4 x 1/4, 1/2, 2
    "attack_optim": ({"optimizer": "sgd_momentum"}, {"optimizer": "adagrad"}, {"weight_decay": 0.0}),
    "attack_data": ({"attack_data": "forget"}, {"attack_data": "retain"}, {"attack_data": "mix50"}),
    "attack_horizon": ({"epochs": 10, "eval_epochs": "1,2,3,5,10"},),
    "attack_lora": ({"lora_rank": 16, "lr": 1e-3},),  # LoRA at 5x the protocol's rate, as LoRA is usually run
    # not a variant: the protocol's attack again with lm-eval's multiple choice before and after it
    "multiple_choice": ({"eval_mc": True},),
}
MC_CHANCE = 0.25  # four options (frag_utils.multiple_choice)
# the target's own protocol attack with multiple choice (its file apart: the reference row of the
# multiple-choice table, a model no 05 run made)
MC_TARGET = "multiple_choice_target"
VARIANT_SEEDS = (42, 1)
UTILITY_BOUND = 0.5  # the worst attack counts only attacks that keep this fraction of the target's Model Utility
# issue 43: the forget10 Table 3 checkpoints unlearned from the target of another training seed, attacked
SECOND_TARGET_05, SECOND_TARGET_06 = "05_unlearn.target_seed43.yaml", "06_attacks.target_seed43.yaml"
SECOND_TARGET_PREDICTORS = ("es_before", "l2_all", "FRAG_x100", "A_f_x100", "A_r_x100")
FRONTIER_COLUMNS = ["model", "method", "forget_split", "strength", "es", "target_es", "model_utility",
                    "target_model_utility", "utility_wo_fragile", "target_utility_wo_fragile", "forgets",
                    "healthy_paper", "healthy_parts", "l2_all", "FRAG_x100", "A_f_x100", "A_r_x100", "run"]
# the paper's Table 5 order: |W|, |W| x_f, |W| x_f / x_r, then Eq. 6 as printed (not in the paper's
# table) and FRP as released
SCORING_ORDER = ("magnitude", "magnitude_xf", "magnitude_ratio", "eq6", "released")
ABLATION_COLUMNS = ["es", "model_utility", "es_after", "delta_es", "model_utility_after", "l2_all", "FRAG_x100",
                    "A_f_x100", "A_r_x100", "run", "attack_run"]
MODEL_COLUMNS = ["model", "method", "weights", "forget_split", "es", "es_retain", "model_utility", "l2_all",
                 "FRAG_x100", "A_f_x100", "A_r_x100", "target_es", "target_model_utility", "run"]
PILOT_SETTINGS = {STRENGTH_PILOT: ("lr", "rmu_coeff"), PROTOCOL_PILOT: ("lr", "batch_size", "grad_accum")}
DENSE = ("ga", "graddiff", "npo", "rmu")
OTHER_ATTACK_KEYS = ("attack_data", "lr", "optimizer", "epochs", "lora_rank", "forget_split")
# how each table is written (:meth:`Collection.write`): formats per column (of those the table
# has), a complete sort key, more provenance
WRITE_OPTIONS: dict[str, dict] = {
    **{name: {"formats": {"lambda": "g", "sparsity": "g", "frp_sparsity": "g", "sp_sparsity": "g"}}
       for name in ("ablation_lambda", "ablation_sparsity", "ablation_scoring", "matched_controls")},
    **{name: {"formats": {"lr": "g", "rmu_coeff": "g", "model_lr": "g"}}
       for name in ("strength_pilot", "protocol_pilot", "other_runs_attacks", "other_runs_unlearning")},
    "grid_times": {"formats": {"hours": ".2f", "median_minutes": ".1f", "estimated_hours": ".2f"},
                   "provenance": {"source_runs": "every run the profile's parameter files list; hours from the "
                                                 "recorded ones, estimated_hours adds the others at the median "
                                                 "recorded run of their kind (frag_utils.costs)"}},
    **{name: {"formats": {k: "+.2f" for k in ("paper_1B", "authors_recomputed_1B", f"ours_{weights}", "low", "high")}}
       for name, weights in (("claims", "bf16"), ("claims_fp32", "fp32"))},
    "headline": {"formats": {"paper_1B": "+.2f", "authors_1B": "+.2f"}},
    **{name: {"formats": {"strength": "g"}} for name in ("frontier_models", "frontier_utility_parts")},
}


def recorded_runs(notebook: str, profile: str) -> list[dict]:
    """Every complete run of ``notebook`` made with ``profile`` (a ``results.json`` beside its
    executed notebook), in name order, each with its ``run`` (``<notebook>/<run folder>``)."""
    found = []
    for file in sorted((paths.RUNS_DIR / notebook).glob("*/" + paths.RESULTS_FILE)):
        rec = records.read_json(file)
        if rec["provenance"]["params"].get("profile") == profile and (file.parent / f"{notebook}.ipynb").is_file():
            found.append({"run": f"{notebook}/{file.parent.name}", **rec})
    return found


METHOD_NAMES = {"ga": "GA", "graddiff": "GradDiff", "npo": "NPO", "rmu": "RMU", "sp": "SP", "frp": "FRP",
                "gold": "gold"}


def short_label(record: dict) -> str:
    """The paper's name of a notebook-05 record's method (FRP with its veto P), for tables and
    figures whose parameter file fixes every other setting (the file and the notebook say which)."""
    method = _row(record)["method"]
    params = record["provenance"]["params"]
    if method == "noise":
        return f"noise ({params['noise_scale']:g}x FRP's L2)"
    if method == "sp" and params.get("match_l2_run"):
        return "SP (at an FRP run's L2)"
    if method == "frp":
        return f"FRP (P {float(record['results'].get('made', {}).get('veto') or 0):g})"
    return METHOD_NAMES.get(method, method)


def _keyed_in(df: pd.DataFrame, other: pd.DataFrame) -> list[bool]:
    """Which attacks of ``df`` (rows of :func:`tables.attack_rows`) are also attacks of ``other``: the
    same model and attack data, whatever the seed."""
    keys = set(zip(other.unlearned_run, other.attack_data))
    return [k in keys for k in zip(df.unlearned_run, df.attack_data)]


# what the importance table ranks per importance term: the FRAG gap (Eq. 5) and cos(F, ΔW²) alone,
# which the paper's printed "activation" value is (its Table 3 FRAG column: the authors' REPRODUCE.md)
IMPORTANCE_SCORES = {"FRAG_x100": "FRAG gap (Eq. 5)", "A_f_x100": "cos(F, ΔW²)"}


def _importance_columns(scored: pd.DataFrame) -> list[str]:
    """The ``<score>:<term>`` columns of ``scored`` (:data:`IMPORTANCE_SCORES`), in
    :data:`analysis.IMPORTANCE_REQUIRES`' order."""
    return [f"{s}:{k}" for s in IMPORTANCE_SCORES for k in analysis.IMPORTANCE_REQUIRES if f"{s}:{k}" in scored]


def _importance_rows(table: pd.DataFrame) -> pd.DataFrame:
    """A ρ table over ``<score>:<term>`` predictors, with the score, the term, what the term needs and
    the paper's 1B ρ for the term (beside both scores: the paper calls it FRAG's, and its activation
    value is the printed Table 3 FRAG, which the authors' recomputation finds to be cos(F, ΔW²))."""
    score, kind = table.predictor.str.split(":").str[0], table.predictor.str.split(":").str[1]
    return table.assign(score=score.map(IMPORTANCE_SCORES), importance=kind, requires=kind.map(
        analysis.IMPORTANCE_REQUIRES), paper_1B=kind.map(analysis.PAPER_IMPORTANCE_RHO))


def _train_seed(run: str) -> int:
    """The training seed of a notebook-02 run of :data:`drift.SEED_RUNS` (``smol``: the first)."""
    return int(run.rsplit("=", 1)[1]) if "seed=" in run else paths.TARGET_SEED


def _name(record: dict) -> str:
    return record["run"].split("/", 1)[1]


def _row(record: dict) -> dict:
    return record["results"]["row"]


def _same_attack_but_the_seed(repeats: list[dict], attacks: list[dict]) -> None:
    """Refuse a seed repeat whose attack differs from the one it repeats in anything but the seed
    (an edit to one parameter file and not the other), or that repeats a seed already run."""
    def settings(r):
        return {k: v for k, v in r["provenance"]["params"].items() if k not in ("seed", "run_name")}

    by_attack = {}
    for r in attacks:
        s = settings(r)
        by_attack[(s["unlearned_run"], s["attack_data"])] = (r, s)
    seen = {(k, r["provenance"]["params"]["seed"]) for k, (r, _) in by_attack.items()}
    for r in repeats:
        s = settings(r)
        key = (s["unlearned_run"], s["attack_data"])
        first, first_settings = by_attack.get(key, (None, None))
        if first is not None and first_settings != s:
            differ = sorted(k for k in s.keys() | first_settings.keys() if s.get(k) != first_settings.get(k))
            raise ValueError(f"{r['run']} repeats {first['run']} at another seed but differs in {differ}: make the "
                             f"parameter files agree ({GRID_06} and {SEEDS_06} or {MARGIN_SEEDS_06}).")
        seed = (key, r["provenance"]["params"]["seed"])
        if seed in seen:
            raise ValueError(f"{r['run']} repeats an attack at a seed it was already run with ({seed[1]}).")
        seen.add(seed)


def variants_file(family: str, forget_split: str) -> str:
    """The attack file of one family of :data:`ATTACK_VARIANTS` on one split (one per family, so
    that only the family's own settings vary in it and name its runs)."""
    return f"06_attacks.{family}_{forget_split}.yaml"


def _variant_label(change: dict) -> str:
    """How an attack variant is named in its table: its changes of the protocol, ``key value``."""
    return ", ".join(f"{k} {parameters._fmt(v)}" for k, v in change.items() if k != "eval_epochs")


def _by_epoch(recs: list[dict], horizon: bool) -> list[tuple[int | None, list[dict]]]:
    """The attack numbers of ``recs`` (one per seed): per evaluated epoch of a horizon run (its
    ``epochs`` record, ΔES from the ES before), else its end (``row``); ``[]`` without records."""
    if not recs:
        return []
    if not horizon:
        return [(None, [{"es": _row(r)["es_after"], "delta_es": _row(r)["delta_es"],
                         "model_utility": _row(r)["model_utility_after"]} for r in recs])]
    epochs = sorted({int(e) for r in recs for e in r["results"]["epochs"]})
    return [(e, [{"es": r["results"]["epochs"][str(e)]["es"],
                  "delta_es": r["results"]["epochs"][str(e)]["es"] - _row(r)["es_before"],
                  "model_utility": r["results"]["epochs"][str(e)]["model_utility"]}
                 for r in recs if str(e) in r["results"]["epochs"]]) for e in epochs]


class Collection:
    """The complete records of ``profile`` and the parameter files that name its grid: its models
    (``grid_05``), their attacks (``grid_06``) and the seed repeats (``seeds_06``), by default the
    smol profile's faithful grid; the pilots, ablations and controls are read from their own files.

    Attributes:
        method_runs: every notebook-05 record of the profile; ``method_by_run`` by run name.
        all_attacks: every notebook-06 record by its parameters (a run two files list is run once,
            under the first name; defaults left out of the key, as the runner does), less the stale
            ones (``stale``: the 05 run they attacked was redone or removed since: its FRAG or L2
            are no longer what the attack recorded).
        sources: table name -> the runs it was built from (filled as tables are built);
            ``provenance``: table name -> the rules that chose its rows, where a parameter did.
    """

    def __init__(self, profile: str, grid_05: str = GRID_05, grid_06: str = GRID_06, seeds_06: str = SEEDS_06) -> None:
        self.profile, self.grid_05, self.grid_06, self.seeds_06 = profile, grid_05, grid_06, seeds_06
        self.params_dir = paths.PARAMS_DIR / profile
        found_06 = recorded_runs("06_attacks", profile)
        self.method_runs = recorded_runs("05_unlearn", profile)
        self.method_by_run = {_name(r): r for r in self.method_runs}
        self.defaults_06 = parameters.notebook_defaults("06_attacks")

        # stale: the copied pre-attack properties of the unlearned weights no longer match its 05 run
        def attacked_other_weights(r):
            u = r["results"]["unlearned_run"]
            return bool(u) and (u not in self.method_by_run or any(
                _row(r)[k] != _row(self.method_by_run[u])[k] for k in ("FRAG_x100", "l2_all")))

        self.stale = [r["run"] for r in found_06 if attacked_other_weights(r)]
        self.all_attacks: dict[str, dict] = {}
        for r in found_06:  # a run recorded twice under two names (two files list it) is read once
            if r["run"] not in self.stale:
                key = parameters.params_key(r["provenance"]["params"], self.defaults_06)
                if key in self.all_attacks:
                    print(f"{r['run']} repeats {self.all_attacks[key]['run']} (the same parameters): read once")
                self.all_attacks.setdefault(key, r)
        self.sources: dict[str, list[str]] = {}
        self.provenance: dict[str, dict] = {}  # table name -> more provenance (the rules that chose its rows)

    # -- the records of one parameter file -------------------------------------------------------
    def planned(self, notebook: str, name: str) -> list:
        """The runs one parameter file of the profile plans (none when the file is absent)."""
        file = self.params_dir / name
        return runs.plan_run(notebook, file) if file.is_file() else []

    def attacks_of_file(self, name: str) -> list[dict]:
        """The recorded runs of one notebook-06 file, in file order, found by their parameters (a run
        another file lists too is recorded under that file's name), else by name (the paper dry run
        records the grid's names at smaller sizes); runs not recorded yet are left out."""
        by_name = {_name(r): r for r in self.all_attacks.values()}
        found = [self.all_attacks.get(parameters.params_key(s.params, self.defaults_06)) or by_name.get(s.name)
                 for s in self.planned("06_attacks", name)]
        return [r for r in found if r is not None]

    def methods_of_file(self, name: str) -> list[dict]:
        """The recorded runs of one notebook-05 file, in file order."""
        return [self.method_by_run[s.name] for s in self.planned("05_unlearn", name) if s.name in self.method_by_run]

    def _model_frame(self, recs: list[dict], settings: tuple[str, ...] = ()) -> pd.DataFrame:
        return pd.DataFrame([{"model": short_label(r), **_row(r),
                              "weights": r["provenance"]["params"].get("weights", "fp32"),
                              **{k: r["provenance"]["params"][k] for k in settings}, "run": r["run"]}
                             for r in recs], columns=[*MODEL_COLUMNS[:4], *settings, *MODEL_COLUMNS[4:]])

    # -- notebook 05: the unlearned models before any attack -------------------------------------
    def models(self) -> pd.DataFrame:
        """One row per model of the faithful grid (``05_unlearn.table1.yaml``, file order): forget
        ES, ES on retain questions and Model Utility before any attack, the global L2 of the update,
        and FRAG, ``A_f``, ``A_r`` (x100) against the target."""
        found = self.methods_of_file(self.grid_05)
        self.sources["unlearned_models"] = [r["run"] for r in found]
        print(f"{len(found)} of {len(self.planned('05_unlearn', self.grid_05))} runs of {self.grid_05} recorded")
        return self._model_frame(found)

    def pilots(self) -> dict[str, pd.DataFrame]:
        """The two pilots that chose the grid's settings (``docs/choices.md``): ``strength_pilot``
        (each dense method in bf16 at several learning rates; the grid's own forget10 bf16 runs are
        its rows at the chosen rate) and ``protocol_pilot`` (the forget+retain attack at the
        reference recipe and at the profile's; the grid's own attack of GA on forget10 in bf16 is
        the latter's first row)."""
        strength = self.methods_of_file(STRENGTH_PILOT) + self._forget10_bf16(*DENSE)
        ga = {_name(r) for r in self._forget10_bf16("ga")}
        protocol = self.attacks_of_file(PROTOCOL_PILOT) + [  # the grid's own attack is the scaled recipe on GA
            r for r in self.attacks_of_file(self.grid_06)
            if _row(r)["attack_data"] == "forget_retain" and _row(r)["unlearned_run"] in ga]
        settings = PILOT_SETTINGS[PROTOCOL_PILOT]
        attack_rows = pd.DataFrame([
            {"model": short_label(self.method_by_run[_row(r)["unlearned_run"]]),
             "model_lr": self.method_by_run[_row(r)["unlearned_run"]]["provenance"]["params"]["lr"],
             **{k: r["provenance"]["params"][k] for k in settings},
             **{k: _row(r)[k] for k in ("optimizer_steps", "es_before", "es_after", "delta_es")}, "run": r["run"]}
            for r in protocol if _row(r)["unlearned_run"] in self.method_by_run])
        self.sources["strength_pilot"] = [r["run"] for r in strength]
        self.sources["protocol_pilot"] = list(attack_rows.run) if len(attack_rows) else []
        table = self._model_frame(strength, PILOT_SETTINGS[STRENGTH_PILOT])
        if len(table):
            table = table.assign(rmu_coeff=table.rmu_coeff.where(table.method.eq("rmu"))).sort_values(
                ["method", "lr"], kind="stable").reset_index(drop=True)
        return {"strength_pilot": table, "protocol_pilot": attack_rows}

    # -- notebook 06: Table 1 and Table 3 --------------------------------------------------------
    def table1(self, n_boot: int, min_utility_fraction: float = 0.5) -> dict[str, pd.DataFrame]:
        """The faithful grid (``06_attacks.table1.yaml``): the paper's Table 1 layout averaged over
        splits and per split, Table 3 in the paper's protocol per weight precision (FRP's main
        setting is plain FRP, veto P 0; computed once four checkpoints of a precision exist), and
        the extended set: every healthy checkpoint of the grid (not gold, Model Utility before the
        attack at least ``min_utility_fraction`` of the target's; GA and FRP with veto P 0.15
        included). The forget+retain attacks that ``06_attacks.table1_seeds.yaml`` repeats at other
        seeds enter Table 3 and the extended set as lists of ΔES, so that their intervals carry the
        seed noise (:func:`frag_utils.report.analysis.bootstrap_spearman`); Table 1 stays at the reference
        seed 42. Its claims (:func:`frag_utils.report.analysis.table1_claims`) take each attack's mean over
        its seeds where :data:`MARGIN_SEEDS_06` repeats it, and say how many seeds FRP's rows have."""
        specs = self.planned("06_attacks", self.grid_06)
        found = self.attacks_of_file(self.grid_06)
        rows = tables.attack_rows(found, self.method_by_run, short_label)
        repeat_records = self.attacks_of_file(self.seeds_06)
        margin_records = self.attacks_of_file(MARGIN_SEEDS_06)
        _same_attack_but_the_seed([*repeat_records, *margin_records], found)
        repeats = tables.attack_rows(repeat_records, self.method_by_run, short_label)
        margin = tables.attack_rows(margin_records, self.method_by_run, short_label)
        rows = rows.assign(**{k: [_row(self.method_by_run[u])[k] for u in rows.unlearned_run]
                              for k in ("target_es", "target_model_utility")})
        fr = rows[rows.attack_data.eq("forget_retain")]
        main = {u for u in fr.unlearned_run if not (_row(self.method_by_run[u])["method"] == "frp"
                                                    and self.method_by_run[u]["results"].get("made", {}).get("veto"))}
        by_precision, checkpoints, recovered, extended, listing = [], [], [], [], []
        table3_runs, extended_runs = [], []
        seeds = repeats[repeats.attack_data.eq("forget_retain")].groupby("unlearned_run").size()

        def with_repeats(chosen: pd.DataFrame, runs_: list[str]) -> pd.DataFrame:
            matched = repeats[repeats.unlearned_run.isin(chosen.unlearned_run)
                              & repeats.attack_data.eq("forget_retain")]
            runs_ += [*chosen.run, *matched.run]
            return tables.recovery(tables.with_seed_repeats(chosen, matched))

        for weights, g in fr.groupby("weights"):
            chosen = analysis.paper_table3_checkpoints(g, main)
            if len(chosen) >= 4:
                chosen = with_repeats(chosen, table3_runs)
                table = analysis.table3_beside_authors(analysis.paper_table3(chosen, n_boot=n_boot))
                by_precision.append(table.assign(weights=weights, checkpoints=len(chosen)))
                checkpoints.append(chosen)
                # the same analysis with the share of the forgotten ES recovered in place of ΔES (post hoc)
                recovered.append(analysis.paper_table3(chosen.assign(delta_es=chosen.recovered_seeds),
                                                       n_boot=n_boot).assign(weights=weights))
            ok, excluded = analysis.healthy(g[g.method.ne("gold")], min_utility_fraction)
            listed = pd.concat([ok.assign(reason="included"), excluded])
            listing.append(listed.assign(attack_seeds=1 + listed.unlearned_run.map(seeds).fillna(0).astype(int)))
            if len(ok) >= 4:
                extended.append(analysis.paper_table3(with_repeats(ok, extended_runs), n_boot=n_boot).assign(
                    weights=weights))
        self.sources["table1"] = self.sources["table1_per_split"] = list(rows.run)
        self.sources["table1_claims"] = [*rows.run, *repeats.run, *margin.run]
        self.sources["frontier_table1"] = list(fr.run)
        for name in ("table3_by_precision", "table3_by_precision_checkpoints", "table3_recovered", "claims",
                     "claims_fp32", "table3_panels"):
            self.sources[name] = table3_runs
        self.sources["table3_extended"] = extended_runs
        self.sources["table3_extended_checkpoints"] = list(fr[fr.method.ne("gold")].run)
        self.provenance["table3_extended"] = self.provenance["table3_extended_checkpoints"] = {
            "exclusion_rule": "gold model; Model Utility before the attack below "
                              f"{min_utility_fraction:g} x the target's"}
        print(f"{len(found)} of {len(specs)} runs of {self.grid_06} recorded, "
              f"{len(repeats)} of {len(self.planned('06_attacks', self.seeds_06))} seed repeats of {self.seeds_06}, "
              f"{len(margin)} of {len(self.planned('06_attacks', MARGIN_SEEDS_06))} of {MARGIN_SEEDS_06}")
        table1 = tables.table1(rows) if len(rows) else pd.DataFrame()
        target_mu = set(rows.target_model_utility)
        if len(target_mu) > 1:
            raise ValueError(f"the grid's models were made from targets of different Model Utility {sorted(target_mu)}")
        mu = target_mu.pop() if target_mu else float("nan")
        # the bf16 claims, and those of the precision study for the attacks it has recorded (forget+retain)
        in_fp32 = set(rows[rows.weights.eq("fp32")].attack_data)
        # the claims: each attack at the mean over its seeds (the forget+retain repeats of Table 3's
        # checkpoints, the claim rows' own); a margin inside the largest range of ΔES over one
        # checkpoint's seeds is not resolved (conservative: a mean of several seeds moves less than one)
        every = pd.concat([repeats, margin], ignore_index=True)
        every = every[_keyed_in(every, rows)] if len(every) else every  # a repeat whose seed 42 is not recorded
        seeded = tables.seed_means(rows, every)
        repeated = rows[_keyed_in(rows, every)] if len(every) else rows.iloc[:0]
        spread = drift.attack_seed_range(list(tables.with_seed_repeats(repeated, every).delta_es)) if len(every) \
            else float("nan")
        table1_seeded = tables.table1(seeded) if len(seeded) else pd.DataFrame()
        claims = pd.concat([analysis.table1_claims(table1_seeded, mu, seed_spread=spread),
                            analysis.table1_claims(table1_seeded, mu, weights="fp32", seed_spread=spread).pipe(
                                lambda c: c[c.attack.isin(in_fp32)])], ignore_index=True)
        frp = seeded[seeded.model.map(analysis.TABLE1_KEYS).eq("frp_p0")]
        frp = frp.groupby(["weights", "attack_data"]).attack_seeds.min()
        claims = claims.assign(frp_attack_seeds=[frp.get(k, float("nan")) for k in zip(claims.weights, claims.attack)])
        return {"rows": rows, "table1": table1,
                "table1_claims": claims,
                "per_split": tables.table1_per_split(rows),
                "table3_by_precision": pd.concat(by_precision, ignore_index=True) if by_precision else pd.DataFrame(),
                "table3_checkpoints": pd.concat(checkpoints, ignore_index=True) if checkpoints else pd.DataFrame(),
                "table3_recovered": pd.concat(recovered, ignore_index=True) if recovered else pd.DataFrame(),
                "table3_extended": pd.concat(extended, ignore_index=True) if extended else pd.DataFrame(),
                "table3_extended_checkpoints": pd.concat(listing, ignore_index=True) if listing else pd.DataFrame()}

    # -- step 5: the FRP ablations and the noise controls ----------------------------------------
    def _forget10_bf16(self, *methods: str) -> list[dict]:
        """The grid's models of ``methods`` on forget10 with the weights in bf16, in file order."""
        return [r for r in self.methods_of_file(self.grid_05) if _row(r)["method"] in methods
                and _row(r)["forget_split"] == "forget10" and r["provenance"]["params"].get("weights") == "bf16"]

    def _centre(self) -> dict | None:
        """The grid's FRP (P 0) on forget10 in bf16: the centre of the ablations, the run the noise
        controls are scaled to."""
        return next((r for r in self._forget10_bf16("frp") if not r["results"].get("made", {}).get("veto")), None)

    def _attacked(self, models: list[dict], attack_data: str, files: tuple[str, ...]) -> pd.DataFrame:
        """One row per model: its state before and after its ``attack_data`` attack (blank until
        attacked) in ``files``."""
        attacks = {_row(r)["unlearned_run"]: r for f in files for r in self.attacks_of_file(f)
                   if _row(r)["attack_data"] == attack_data}
        rows = []
        for r in models:
            a = attacks.get(_name(r))
            made, after = r["results"].get("made", {}), _row(a) if a else {}
            rows.append({"model": short_label(r), "variant": made.get("variant", ""), "lambda": made.get("lam"),
                         "sparsity": made.get("sparsity"), **_row(r), "es_after": after.get("es_after"),
                         "delta_es": after.get("delta_es"), "model_utility_after": after.get("model_utility_after"),
                         "run": r["run"], "attack_run": a["run"] if a else ""})
        return pd.DataFrame(rows)

    def ablations(self) -> dict[str, pd.DataFrame]:
        """The paper's Tables 5-7 (Appendix B.3) on forget10 in bf16: FRP with one setting varied
        around the grid's FRP (P 0), under the retain attack: ``ablation_lambda`` (the weight of the
        |W| rank; the paper's beta), ``ablation_sparsity`` (rho) and ``ablation_scoring`` (the
        scoring rule). Each holds the centre, and stays empty until one run of its own is recorded."""
        centre = self._centre()
        found = self.methods_of_file(ABLATIONS_05)
        if centre is None or not found:
            return {"ablation_lambda": pd.DataFrame(), "ablation_sparsity": pd.DataFrame(),
                    "ablation_scoring": pd.DataFrame()}
        rows = self._attacked([centre, *found], "retain", (ABLATIONS_06, self.grid_06))
        released, default_sparsity = rows.variant.eq("released"), rows.sparsity.eq(0.03)
        out = {"ablation_lambda": (rows[released & default_sparsity], ["lambda"]),
               "ablation_sparsity": (rows[released & rows["lambda"].eq(0.05)], ["sparsity"]),
               "ablation_scoring": (rows[default_sparsity & (~released | rows["lambda"].eq(0.05))], ["variant"])}
        tables = {}
        order = {v: i for i, v in enumerate(SCORING_ORDER)}
        rows = rows.assign(variant=pd.Categorical(rows.variant, categories=sorted(set(rows.variant), key=order.get)))
        for name, (t, key) in out.items():
            t = t.sort_values(key, kind="stable").reset_index(drop=True) if len(t) > 1 else t.iloc[0:0]
            tables[name] = t[[*key, *ABLATION_COLUMNS]]
            self.sources[name] = [*t.run, *[r for r in t.attack_run if r]]
        return tables

    def controls(self) -> dict[str, pd.DataFrame]:
        """The controls of ``05_unlearn.controls.yaml`` (blank where not attacked yet):

        * ``noise_controls`` (Appendix A.2): the grid's FRP (P 0) on forget10 in bf16 and the noise
          scaled to its L2, under the retain and the forget+retain attacks;
        * ``matched_controls`` (Appendix C.4): FRP against SP at the same budget (the sweep's FRP at
          2.5 % and 5 % against SP at 2.5 % and the grid's 5 %) and at the same update norm (SP
          pruned to the L2 of FRP at 1.5 % and 4 %), one row per pair, under forget+retain.
        """
        centre, found = self._centre(), self.methods_of_file(CONTROLS_05)
        out = {"noise_controls": pd.DataFrame(), "matched_controls": pd.DataFrame()}
        if centre is None or not found:
            return out
        files = (CONTROLS_06, self.grid_06)
        noise = [r for r in found if _row(r)["method"] == "noise"
                 and r["provenance"]["params"]["match_l2_run"] == _name(centre)]  # scaled to this FRP run
        fr = self._attacked([centre, *noise], "forget_retain", files)
        retain = self._attacked([centre, *noise], "retain", (*files, ABLATIONS_06))
        columns = ["model", "es", "model_utility", "l2_all", "A_f_x100", "A_r_x100", "FRAG_x100"]
        out["noise_controls"] = fr[columns].assign(retain_delta_es=retain.delta_es, forget_retain_delta_es=fr.delta_es,
                                                   run=fr.run)
        self.sources["noise_controls"] = [*fr.run, *[r for r in (*fr.attack_run, *retain.attack_run) if r]]

        frp = {_name(r): r for r in self.methods_of_file(ABLATIONS_05) if r["results"].get("made", {}).get(
            "variant") == "released" and r["provenance"]["params"]["frp_lam"] == 0.05}
        pairs = []
        for sp in [r for r in found if _row(r)["method"] == "sp"] + self._forget10_bf16("sp"):
            matched = sp["provenance"]["params"]["match_l2_run"]
            budget = sp["results"].get("made", {}).get("sparsity")
            partner = frp.get(matched) if matched else next(
                (r for r in frp.values() if r["results"]["made"].get("sparsity") == budget), None)
            if partner is not None:
                pairs.append(("update norm" if matched else "sparsity", partner, sp))
        if pairs:
            attacked = self._attacked([r for _, f, s in pairs for r in (f, s)], "forget_retain", (*files, ABLATIONS_06))
            rows = []
            for i, kind in enumerate(kind for kind, _, _ in pairs):
                a, b = attacked.iloc[2 * i], attacked.iloc[2 * i + 1]
                rows.append({"matched": kind, "frp_sparsity": a.sparsity, "sp_sparsity": b.sparsity,
                             "l2_gap_pct": 100 * (b.l2_all / a.l2_all - 1),
                             **{f"{k}_{m}": r[k] for k in ("l2_all", "es", "model_utility", "delta_es", "FRAG_x100")
                                for m, r in (("frp", a), ("sp", b))}, "runs": f"{a.run} | {b.run}"})
                self.sources.setdefault("matched_controls", []).extend(
                    [a.run, b.run, *[r for r in (a.attack_run, b.attack_run) if r]])
            out["matched_controls"] = pd.DataFrame(rows).sort_values(["matched", "frp_sparsity"]).reset_index(drop=True)
        return out

    def attack_precision(self) -> pd.DataFrame:
        """The bf16 set's models under the grid's forget+retain attack with the weights stored in
        bf16 while attacking, as unlearned (``06_attacks.table1.yaml``: seed 42, and
        ``delta_es_bf16_seeds``, every seed of its Table 3 repeats), and kept in fp32
        (:data:`ATTACK_PRECISION_06`, seed 42), per split and method (the grid's file order), then
        each method's mean over the three splits (``forget_split`` ``mean``; blank until all three
        are recorded). ``fp32_set_delta_es`` is the fp32 set's model of the same split and method
        under its own attack (fp32 unlearning and attack). Empty until one fp32 attack of a bf16
        model is recorded."""
        models = [r for r in self.methods_of_file(self.grid_05) if _row(r)["method"] in (*DENSE, "sp", "frp")
                  and r["provenance"]["params"].get("weights") == "bf16"]
        in_fp32 = self._attacked(models, "forget_retain", ATTACK_PRECISION_06)
        if not len(in_fp32) or not in_fp32.attack_run.astype(bool).any():
            return pd.DataFrame()
        in_bf16 = self._attacked(models, "forget_retain", (self.grid_06,))
        seeds: dict[str, list[float]] = {}
        repeats = [r for r in self.attacks_of_file(self.seeds_06) if _row(r)["attack_data"] == "forget_retain"
                   and _row(r)["unlearned_run"] in {_name(m) for m in models}]
        for r in repeats:
            seeds.setdefault(_row(r)["unlearned_run"], []).append(_row(r)["delta_es"])

        def identity(r):  # split, method and FRP's veto: what a model of the fp32 set shares with its bf16 twin
            return _row(r)["forget_split"], _row(r)["method"], r["provenance"]["params"].get("frp_veto", 0.0)

        twins = [r for r in self.methods_of_file(self.grid_05) if r["provenance"]["params"].get("weights") == "fp32"]
        twin_attacks = self._attacked(twins, "forget_retain", (self.grid_06,)) if twins else pd.DataFrame(
            columns=["run", "attack_run", "delta_es"])
        twin_delta = dict(zip(map(identity, twins), twin_attacks.delta_es))
        table = pd.DataFrame({
            "forget_split": in_bf16.forget_split, "model": in_bf16.model, "es": in_bf16.es,
            "model_utility": in_bf16.model_utility, "l2_all": in_bf16.l2_all, "delta_es_bf16": in_bf16.delta_es,
            "delta_es_bf16_seeds": [[round(d, 3) for d in ([b] if pd.notna(b) else []) + seeds.get(_name(r), [])]
                                    for r, b in zip(models, in_bf16.delta_es)],
            "delta_es_fp32": in_fp32.delta_es,
            "model_utility_after_bf16": in_bf16.model_utility_after,
            "model_utility_after_fp32": in_fp32.model_utility_after,
            "fp32_set_delta_es": [twin_delta.get(identity(r), float("nan")) for r in models],
            "run": in_bf16.run, "attack_run_bf16": in_bf16.attack_run, "attack_run_fp32": in_fp32.attack_run})
        numbers = ["es", "model_utility", "l2_all", "delta_es_bf16", "delta_es_fp32", "model_utility_after_bf16",
                   "model_utility_after_fp32", "fp32_set_delta_es"]
        means = table.groupby("model", sort=False)[numbers].agg(
            lambda v: tables._mean_if_complete(v, len(tables.SPLITS))).reset_index()
        self.sources["attack_precision"] = [*table.run, *[r for r in (*table.attack_run_bf16, *table.attack_run_fp32,
                                                                *twin_attacks.attack_run) if r],
                                            *(r["run"] for r in repeats), *twin_attacks.run]
        return pd.concat([table, means.assign(forget_split="mean")], ignore_index=True)[table.columns]

    # -- the healthy frontier (issue 39) ---------------------------------------------------------
    def frontier_models(self) -> pd.DataFrame:
        """One row per recorded run of ``05_unlearn.frontier.yaml`` (file order): its method and
        strength (the learning rate of a dense method, the sparsity of a pruner), forget ES and
        Model Utility with and without its fragile part (:data:`analysis.FRAGILE_PART`) beside the
        target's, whether it forgets and is healthy by each rule
        (:func:`analysis.healthy_by_rule`), and its predictors. Decided from the unlearning
        records alone: what the attacks of these checkpoints show enters nothing here."""
        found = self.methods_of_file(FRONTIER_05)
        rows = []
        for r in found:
            ev, params, made = r["results"]["evaluation"], r["provenance"]["params"], r["results"].get("made", {})
            row = _row(r)
            rows.append({"model": short_label(r), **row,
                         "strength": made.get("sparsity") if row["method"] in analysis.PRUNING else params["lr"],
                         "utility_wo_fragile": analysis.utility_without(ev["unlearned"]),
                         "target_utility_wo_fragile": analysis.utility_without(ev["target"]), "run": r["run"],
                         **{f"part:{k}": ev["unlearned"][k] for k in analysis.UTILITY_PARTS},
                         **{f"target:{k}": ev["target"][k] for k in analysis.UTILITY_PARTS}})
        self.sources["frontier_models"] = self.sources["frontier_utility_parts"] = [r["run"] for r in found]
        self.provenance["frontier_models"] = {"healthy_rules": analysis.HEALTHY_RULES,
                                              "forgets": f"forget ES at least {analysis.MIN_FORGETTING:g} below "
                                                         "the target's"}
        print(f"{len(found)} of {len(self.planned('05_unlearn', FRONTIER_05))} runs of {FRONTIER_05} recorded")
        if not rows:
            return pd.DataFrame(columns=FRONTIER_COLUMNS)
        return analysis.healthy_by_rule(pd.DataFrame(rows))

    def frontier(self, n_boot: int) -> dict[str, pd.DataFrame]:
        """The healthy frontier's tables: ``frontier_models`` (every candidate, healthy or not, with
        its attacks' ES after, ΔES and recovered share where attacked), ``frontier_utility_parts``
        (Model Utility's nine parts per checkpoint, the target's first), ``frontier_table3`` (per
        healthy rule, :func:`analysis.frontier_table3` beside the paper's and the authors' values;
        empty until four healthy checkpoints are attacked), ``frontier_recovered`` (the same with
        the share of the forgotten ES that came back in place of ΔES, post hoc: ΔES is capped by what
        was forgotten) and ``frontier_matched_utility``
        (:func:`analysis.utility_bands` over the checkpoints healthy by either rule)."""
        models = self.frontier_models()
        attacks = [r for f in FRONTIER_06 for r in self.attacks_of_file(f) if _row(r)["attack_data"] == "forget_retain"]
        seeds: dict[str, list[float]] = {}
        for r in attacks:
            seeds.setdefault(_row(r)["unlearned_run"], []).append(_row(r)["delta_es"])
        models = models.assign(delta_es=[seeds.get(run.split("/", 1)[1], []) for run in models.run],
                               es_before=models.es)
        models = models.assign(attack_seeds=models.delta_es.map(len))
        attacked = models[models.attack_seeds.gt(0)]
        attacked = tables.recovery(attacked) if len(attacked) else attacked.assign(es_after=[], recovered=[])
        models = models.join(attacked[["es_after", "recovered"]])
        parts = [c for c in models.columns if c.startswith("part:")]
        utility_parts = pd.concat([
            models.drop_duplicates("target_model_utility")[[c.replace("part:", "target:") for c in parts]].rename(
                columns=lambda c: c.replace("target:", "")).assign(model="target", forget_split="", strength=None),
            models[["model", "forget_split", "strength", *parts]].rename(columns=lambda c: c.replace("part:", ""))],
            ignore_index=True) if len(models) else pd.DataFrame()
        if len(utility_parts):
            utility_parts = utility_parts[["model", "forget_split", "strength", *analysis.UTILITY_PARTS]]
        table3, recovered = [], []
        for rule in analysis.HEALTHY_RULES:
            chosen = attacked[attacked[f"healthy_{rule}"]] if len(attacked) else attacked
            if len(chosen) >= 4:
                t = analysis.table3_beside_authors(analysis.frontier_table3(chosen, n_boot=n_boot))
                table3.append(t.assign(rule=rule, detectable_rho=t.n.map(analysis.detectable_rho)))
                # post hoc: the share of what was forgotten that came back, in place of ΔES (the ceiling)
                recovered.append(analysis.frontier_table3(chosen.assign(delta_es=chosen.recovered_seeds),
                                                          n_boot=n_boot).assign(rule=rule))
        either = attacked[attacked.healthy_paper | attacked.healthy_parts] if len(attacked) else attacked
        read = [*either.run, *(r["run"] for r in attacks if _row(r)["unlearned_run"] in
                               {u.split("/", 1)[1] for u in either.run})]
        for name in ("frontier_table3", "frontier_recovered", "frontier_matched_utility"):
            self.sources[name] = read
        self.sources["frontier_models"] = [*self.sources["frontier_models"], *(r["run"] for r in attacks)]
        listing = models[[*FRONTIER_COLUMNS[:-1], "attack_seeds", "es_after", "recovered", "run"]]
        return {"frontier_models": listing.assign(delta_es=models.delta_es.map(lambda v: [round(d, 3) for d in v])),
                "frontier_utility_parts": utility_parts,
                "frontier_table3": pd.concat(table3, ignore_index=True) if table3 else pd.DataFrame(),
                "frontier_recovered": pd.concat(recovered, ignore_index=True) if recovered else pd.DataFrame(),
                "frontier_matched_utility": analysis.utility_bands(either) if len(either) else pd.DataFrame(),
                **self.frontier_ablations(either, n_boot)}

    def frontier_ablations(self, attacked: pd.DataFrame, n_boot: int) -> dict[str, pd.DataFrame]:
        """The healthy frontier's notebook-07 runs (:data:`FRONTIER_07`, planned with the attacks by
        ``scripts/plan_frontier_attacks.py``) over ``attacked`` (the attacked checkpoints healthy by
        either rule, from :meth:`frontier`):

        * ``frontier_lmc``: the paper's ``tab:lmc``, per family (dense: GA, GradDiff, NPO, RMU; FRP;
          SP) the checkpoints, the forget-loss barrier's least and largest value along the line from
          the target, how many show a bump (a barrier above :data:`analysis.BARRIER_BUMP`), and the
          paper's 1B values;
        * ``frontier_importance``: the paper's ``importance_variants`` on this set, FRAG with each
          importance term in place of the activation norms, with Table 3's intervals per healthy
          rule (:func:`analysis.frontier_table3`), beside the paper's 1B ρ.

        A checkpoint enters once a 07 run whose parameters equal its file's has scored it; both
        tables are empty until one has."""
        scored, ablation_runs = self._ablation_scored(FRONTIER_07, attacked, [r.split("/", 1)[1] for r in attacked.run])
        if not len(scored):
            return {"frontier_lmc": pd.DataFrame(), "frontier_importance": pd.DataFrame()}
        self.sources["frontier_importance"] = self.sources["frontier_lmc"] = [*ablation_runs, *scored.run]
        importance = []
        for rule in analysis.HEALTHY_RULES:
            chosen = scored[scored[f"healthy_{rule}"]]
            if len(chosen) >= 4:
                t = analysis.frontier_table3(chosen, _importance_columns(chosen), n_boot=n_boot)
                importance.append(_importance_rows(t.assign(rule=rule)))
        return {"frontier_lmc": analysis.lmc_table(scored),
                "frontier_importance": pd.concat(importance, ignore_index=True) if importance else pd.DataFrame()}

    def table3_ablations(self, checkpoints: pd.DataFrame, n_boot: int) -> dict[str, pd.DataFrame]:
        """The loss barrier and FRAG's importance terms on the paper's Table 3 checkpoints in bf16
        (``checkpoints``: :meth:`table1`'s ``table3_checkpoints``), from the notebook-07 runs of
        :data:`TABLE3_07` (one file per split, the frontier's settings, the grid's native kernels):

        * ``table3_lmc``: the paper's ``tab:lmc`` on them (:func:`analysis.lmc_table`);
        * ``table3_importance``: the paper's ``importance_variants`` on the set it was printed for,
          FRAG with each importance term, with Table 3's intervals (:func:`analysis.paper_table3`:
          all and without FRP; methods, then checkpoints, then seeds), beside the paper's 1B ρ.

        Empty until a split's run is recorded; the ρ once four checkpoints are scored."""
        chosen = checkpoints[checkpoints.weights.eq("bf16")] if len(checkpoints) else checkpoints
        names = list(chosen.unlearned_run) if len(chosen) else []
        scored, ablation_runs = self._ablation_scored(TABLE3_07, chosen, names)
        if not len(scored):
            return {"table3_lmc": pd.DataFrame(), "table3_importance": pd.DataFrame()}
        wanted = set(scored.unlearned_run)  # the ρ's ΔES: each checkpoint's attack at seed 42 and its repeats
        repeats = [r["run"] for r in self.attacks_of_file(self.seeds_06)
                   if _row(r)["unlearned_run"] in wanted and _row(r)["attack_data"] == "forget_retain"]
        self.sources["table3_lmc"] = self.sources["table3_importance"] = [
            *ablation_runs, *(f"05_unlearn/{u}" for u in scored.unlearned_run), *scored.run, *repeats]
        importance = (_importance_rows(analysis.paper_table3(scored, _importance_columns(scored), n_boot=n_boot))
                      if len(scored) >= 4 else pd.DataFrame())
        return {"table3_lmc": analysis.lmc_table(scored), "table3_importance": importance}

    def _ablation_scored(self, files: tuple[str, ...], chosen: pd.DataFrame,
                         names: list[str]) -> tuple[pd.DataFrame, list[str]]:
        """``chosen`` (checkpoints whose notebook-05 run names are ``names``) with the forget-loss
        barrier and, per importance term, FRAG and cos(F, ΔW²) x100 (``FRAG_x100:<term>``,
        ``A_f_x100:<term>``) that the complete notebook-07 runs of ``files`` give each, less the
        checkpoints none has scored; and those runs."""
        found, ablation_runs = {}, []
        for spec in (s for f in files for s in self.planned("07_ablations", f)):
            if spec.is_complete():
                rec = records.read_json(spec.out_dir / paths.RESULTS_FILE)
                ablation_runs.append(f"07_ablations/{spec.name}")
                for row in rec["results"]["barrier"]:
                    found.setdefault(row["unlearned_run"], {})["barrier"] = row["barrier"]
                for row in rec["results"]["scores"]:
                    for score in IMPORTANCE_SCORES:
                        if score in row:
                            found.setdefault(row["unlearned_run"], {})[f"{score}:{row['importance']}"] = row[score]
        scored = chosen.assign(**{k: [found.get(name, {}).get(k, np.nan) for name in names]
                                  for k in sorted({k for v in found.values() for k in v})})
        if "barrier" not in scored:
            return chosen.iloc[:0], ablation_runs
        return scored.dropna(subset=["barrier"]), ablation_runs

    def frontier_attack_plan(self, forget_split: str, seeds: tuple[int, ...] = FRONTIER_SEEDS) -> list[dict]:
        """The forget+retain attacks of the frontier's checkpoints on ``forget_split`` that forget and
        are healthy by either rule (:meth:`frontier_models`), each at every seed of ``seeds`` (the
        first seed for every checkpoint before the next), with the faithful grid's attack settings
        (the first entry of ``06_attacks.table1.yaml``): the entries of its attack file."""
        models = self.frontier_models()
        chosen = models[(models.healthy_paper | models.healthy_parts) & models.forget_split.eq(forget_split)]
        return [{**self.protocol, "unlearned_run": run.split("/", 1)[1], "forget_split": forget_split,
                 "attack_data": "forget_retain", "seed": seed} for seed in seeds for run in chosen.run]

    @functools.cached_property
    def protocol(self) -> dict:
        """The grid's forget+retain attack (the first entry of its attack file), less what names the
        model: read once, for the frontier's attacks and every variant entry."""
        import yaml

        protocol = yaml.safe_load((self.params_dir / self.grid_06).read_text())[0]
        return {k: v for k, v in protocol.items() if k not in ("unlearned_run", "forget_split", "attack_data")}

    # -- issue 42: the attack variants -----------------------------------------------------------
    def variant_checkpoints(self, forget_split: str) -> dict[str, str]:
        """The checkpoints the attack variants run on (model label -> 05 run name): the split's gold
        model of the faithful grid, then, per method (FRP per veto P), the frontier checkpoint that
        forgets and is healthy by the paper's rule whose Model Utility, as a fraction of the target's,
        is nearest the median of all such checkpoints of the split (the first in file order on a
        tie). Read from the unlearning records alone, as the frontier's healthy rule is."""
        gold = [r for r in self.methods_of_file(self.grid_05)
                if _row(r)["method"] == "gold" and _row(r)["forget_split"] == forget_split]
        models = self.frontier_models()
        healthy = models[models.healthy_paper & models.forget_split.eq(forget_split)]
        chosen = {"gold": _name(gold[0])} if gold else {}
        if len(healthy):
            frac = healthy.model_utility / healthy.target_model_utility
            off = (frac - frac.median()).abs()
            for label in dict.fromkeys(healthy.model):
                chosen[label] = healthy.run[off[healthy.model.eq(label)].idxmin()].split("/", 1)[1]
        return chosen

    def _variant_base(self, run: str, forget_split: str) -> dict:
        """The protocol's attack of one variant checkpoint: the grid's forget+retain attack, trained
        with the weights in fp32 (a model stored in bf16, the grid's gold, is attacked in fp32 too, as
        the frontier's checkpoints are: in bf16 storage small steps round away)."""
        weights = self.method_by_run[run]["provenance"]["params"].get("weights") if run in self.method_by_run else None
        return {**self.protocol, "unlearned_run": run, "forget_split": forget_split, "attack_data": "forget_retain",
                **({"weights": "fp32"} if weights == "bf16" else {})}

    def attack_variants_plan(self, forget_split: str, seeds: tuple[int, ...] = VARIANT_SEEDS) -> dict[str, list]:
        """Per family of :data:`ATTACK_VARIANTS`, the entries of its file on the split
        (:func:`variants_file`): each change on every checkpoint of :meth:`variant_checkpoints`, at
        each seed (the first seed for all before the next); the first family's file also holds the
        protocol's own attack of each checkpoint and seed. An entry another parameter file of the
        profile already plans (the frontier's protocol attacks) is left to that file. :data:`MC_TARGET`
        (a file of its own) attacks the target itself with multiple choice, at each seed: the table's
        reference row."""
        elsewhere = {parameters.params_key(s.params, self.defaults_06)
                     for f in sorted(self.params_dir.glob("06_attacks.*.yaml"))
                     if not any(f.name == variants_file(family, forget_split) for family in ATTACK_VARIANTS)
                     for s in self.planned("06_attacks", f.name)}
        chosen = self.variant_checkpoints(forget_split).values()
        first = next(iter(ATTACK_VARIANTS))
        plans = {}
        for family, changes in ATTACK_VARIANTS.items():
            entries = [{**self._variant_base(run, forget_split), "seed": seed, **change}
                       for seed in seeds for run in chosen for change in ({},) * (family == first) + changes]
            plans[family] = [e for e in entries if parameters.params_key(e, self.defaults_06) not in elsewhere]
        plans[MC_TARGET] = [{**self.protocol, "model": "profile-target", "forget_split": forget_split,
                             "attack_data": "forget_retain", "weights": "fp32", "seed": seed, **change}
                            for seed in seeds for change in ATTACK_VARIANTS["multiple_choice"]]
        return plans

    def attack_variants(self) -> dict[str, pd.DataFrame]:
        """The paper's attack tables (``attack_lr``, ``attack_optim``, ``attack_mixture``,
        ``attack_horizon``) and a LoRA row, on the checkpoints of each split's variants file, in one
        long table ``attack_variants``: per family, variant and model, the attack seeds recorded, the
        mean ES after the attack with the seeds' range, ΔES, and Model Utility after; each family's
        first rows are the model before the attack and the protocol's attack (the frontier's and the
        grid's records at the same seeds), a horizon's rows are its run's evaluations after each
        epoch (the seeds' range is NaN where one seed is recorded). And ``attack_worst``: per split and
        model, the attack (the protocol's, a variant, a horizon's epoch) with the highest mean ES after
        among those keeping Model Utility at least :data:`UTILITY_BOUND` of the target's (TamperBench's
        strongest attack within a utility bound; none where every attack costs more), with how many
        attacks qualified of how many. Empty until a variant is recorded."""
        rows, used = [], []

        def found(params):
            return self.all_attacks.get(parameters.params_key(params, self.defaults_06))

        mc = []
        for split in VARIANT_SPLITS:
            target_runs = self.planned("06_attacks", variants_file(MC_TARGET, split))
            mc += [(split, r) for r in (found(s.params) for s in target_runs) if r is not None]
            for family, changes in ATTACK_VARIANTS.items():
                planned = self.planned("06_attacks", variants_file(family, split))
                if family == "multiple_choice":
                    mc += [(split, r) for r in (found(s.params) for s in planned) if r is not None]
                    continue
                runs_of = list(dict.fromkeys(s.params["unlearned_run"] for s in planned))
                labels = {r: short_label(self.method_by_run[r]) if r in self.method_by_run else r for r in runs_of}
                seeds = sorted({s.params["seed"] for s in planned})
                for run in runs_of:
                    base = self._variant_base(run, split)
                    first = [r for r in (found({**base, "seed": seed}) for seed in seeds) if r is not None]
                    model = _row(self.method_by_run[run]) if run in self.method_by_run else None
                    target_mu = model["target_model_utility"] if model else float("nan")
                    before = _row(first[0]) if first else model
                    if before is not None:
                        rows.append({"split": split, "family": family, "variant": "before the attack",
                                     "model": labels[run], "seeds": 0,
                                     "es_after": before.get("es_before", before.get("es")), "es_after_range": 0.0,
                                     "delta_es": 0.0, "model_utility_after": before.get(
                                         "model_utility_before", before.get("model_utility"))})
                    cases = [("protocol", first)] + [
                        (_variant_label(change), [r for r in (found({**base, "seed": seed, **change}) for seed in seeds)
                                                  if r is not None]) for change in changes]
                    for label, recs in cases:
                        used += [r["run"] for r in recs]
                        for epoch, epoch_rows in _by_epoch(recs, family == "attack_horizon" and label != "protocol"):
                            es = [e["es"] for e in epoch_rows]
                            rows.append({"split": split, "family": family,
                                         "variant": f"{label}, after epoch {epoch}" if epoch else label,
                                         "model": labels[run], "seeds": len(es), "es_after": float(np.mean(es)),
                                         "es_after_range": float(np.ptp(es)) if len(es) > 1 else np.nan,
                                         "delta_es": float(np.mean([e["delta_es"] for e in epoch_rows])),
                                         "model_utility_after": float(np.mean([e["model_utility"]
                                                                               for e in epoch_rows])),
                                         "target_model_utility": target_mu})
        table = pd.DataFrame(rows)
        choice = self._multiple_choice(mc)
        if not len(table) or not (table.seeds.gt(0) & ~table.variant.isin(["before the attack", "protocol"])).any():
            return {"attack_variants": pd.DataFrame(), "attack_worst": pd.DataFrame(), "multiple_choice": choice}
        self.sources["attack_variants"] = self.sources["attack_worst"] = list(dict.fromkeys(used))
        attacked = table[table.seeds.gt(0)].drop_duplicates(["split", "variant", "model"])
        attacked = attacked.assign(within=attacked.model_utility_after >= UTILITY_BOUND * attacked.target_model_utility)
        worst = []
        for (split, model), part in attacked.groupby(["split", "model"], sort=False):
            within = part[part.within]
            top = (within.loc[within.es_after.idxmax(), ["variant", "seeds", "es_after", "delta_es",
                                                         "model_utility_after"]].to_dict() if len(within) else
                   {"variant": None})  # every attack costs more utility than the bound allows
            worst.append({"split": split, "model": model, **top, "attacks_within_bound": len(within),
                          "attacks": len(part)})
        self.provenance["attack_worst"] = {
            "utility_bound": f"Model Utility after the attack at least {UTILITY_BOUND:g} of the target's"}
        return {"attack_variants": table.drop(columns="target_model_utility"), "attack_worst": pd.DataFrame(worst),
                "multiple_choice": choice}

    def _multiple_choice(self, found: list[tuple[str, dict]]) -> pd.DataFrame:
        """The paper's multiple-choice family on the target (:data:`MC_TARGET`) and the variants'
        checkpoints: per split and model, the mean over attack seeds of lm-eval's 4-way accuracy on
        the forget set and on the utility sets (real authors, world facts) before and after the
        forget+retain attack, with chance."""
        if not found:
            return pd.DataFrame()
        self.sources["multiple_choice"] = [r["run"] for _, r in found]
        rows = [{"split": split, "model": short_label(self.method_by_run[_row(r)["unlearned_run"]])
                 if _row(r)["unlearned_run"] else "target",
                 **{k: _row(r)[k] for k in ("mc_forget_acc_before", "mc_forget_acc_after", "mc_delta_forget_acc",
                                            "mc_utility_acc_before", "mc_utility_acc_after")}} for split, r in found]
        table = pd.DataFrame(rows).groupby(["split", "model"], sort=False)
        return table.mean().join(table.size().rename("seeds")).reset_index().assign(chance=MC_CHANCE)

    # -- issue 43: the target's training seed ---------------------------------------------------
    def targets(self, table3_checkpoints: pd.DataFrame) -> dict[str, pd.DataFrame]:
        """How far the target's own training seed moves what the grid measures.

        * ``target_seeds``: each evaluation number of notebook 02 that the tolerance file judges
          (:data:`drift.SEED_METRICS`; target and forget10 gold) at each training seed recorded
          (:data:`drift.SEED_RUNS`), with its mean, standard deviation and range;
        * ``second_target``: per forget10 Table 3 checkpoint in bf16 (``table3_checkpoints``, from
          :meth:`table1`), the same method unlearned from the seed-43 target
          (:data:`SECOND_TARGET_05`) and attacked at seed 42 (:data:`SECOND_TARGET_06`): the
          target's forget ES, ΔES and the predictors on each target, the difference, and the range of
          ΔES over the attack seeds of the seed-42 checkpoint beside it. Empty until one is attacked.
        """
        evaluations = drift.recorded_seed_evaluations() if self.profile == "smol" else {}  # the seeds are smol's
        evaluations = evaluations if len(evaluations) > 1 else {}  # one seed has no spread
        rows = []
        for path, values in drift.seed_numbers(list(evaluations.values())).items():
            values = pd.Series(values, index=list(evaluations))
            rows.append({"number": path, **{f"seed_{_train_seed(run)}": v for run, v in values.items()},
                         "mean": values.mean(), "sd": values.std(ddof=1), "range": values.max() - values.min()})
        self.sources["target_seeds"] = [f"02_target_and_gold/{run}" for run in evaluations]
        out = {"target_seeds": pd.DataFrame(rows), "second_target": pd.DataFrame()}

        attacks = tables.attack_rows(self.attacks_of_file(SECOND_TARGET_06), self.method_by_run, short_label)
        t3 = table3_checkpoints
        first = t3[t3.weights.eq("bf16") & t3.forget_split.eq("forget10")] if len(t3) else None
        if first is None or not len(attacks):
            return out
        attacks = attacks.assign(target_es=[_row(self.method_by_run[u])["target_es"] for u in attacks.unlearned_run])
        repeats = [(_row(r)["unlearned_run"], r["run"]) for r in self.attacks_of_file(self.seeds_06)
                   if _row(r)["attack_data"] == "forget_retain"] if self.seeds_06 else []
        compared, sources = [], []
        for _, b in attacks.iterrows():
            a = first[first.model.eq(b.model)]
            if not len(a):
                continue
            a = a.iloc[0]
            seeds = list(a.delta_es)  # the seed-42 attack first (tables.with_seed_repeats)
            row = {"model": b.model, "target_es_42": a.target_es, "target_es_43": b.target_es,
                   "delta_es_42": seeds[0], "delta_es_43": b.delta_es, "delta_es_shift": b.delta_es - seeds[0],
                   "attack_seed_range_42": drift.attack_seed_range([seeds]), "attack_seeds_42": len(seeds)}
            for k in SECOND_TARGET_PREDICTORS:
                row |= {f"{k}_42": a[k], f"{k}_43": b[k]}
            compared.append(row)
            sources += [f"05_unlearn/{a.unlearned_run}", a.run, *[r for u, r in repeats if u == a.unlearned_run],
                        f"05_unlearn/{b.unlearned_run}", b.run]
        self.sources["second_target"] = sources
        out["second_target"] = pd.DataFrame(compared)
        return out

    # -- runs outside the grid, and the figures' data --------------------------------------------
    def other_runs(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Every complete record of the profile that no parameter file of it lists, by name or by
        parameters (a user's rerun or own file): the attacks beside the grid's ΔES for the same
        model and attack data (``grid_delta_es``, seed 42), and the notebook-05 runs."""
        specs = runs.grid(self.profile) if self.profile in runs.profiles() else []
        defaults = {nb: parameters.notebook_defaults(nb) for nb in ("05_unlearn", "06_attacks")}

        def identity(notebook, params):  # a record the grid holds under another name is the grid's
            return notebook, parameters.params_key(params, defaults[notebook], notebook=notebook)

        in_grid = ({f"{s.notebook.stem}/{s.name}" for s in specs}
                   | {identity(s.notebook.stem, s.params) for s in specs if s.notebook.stem in defaults})

        def user_run(notebook, r):
            return r["run"] not in in_grid and identity(notebook, r["provenance"]["params"]) not in in_grid

        other_05 = [r for r in self.method_runs if user_run("05_unlearn", r)]
        other_06 = [r for r in recorded_runs("06_attacks", self.profile) if r["run"] not in self.stale
                    and user_run("06_attacks", r)]
        grid_delta = {(_row(r)["unlearned_run"], _row(r)["attack_data"]): _row(r)["delta_es"]
                      for r in self.attacks_of_file(self.grid_06)}
        attacks_ = pd.DataFrame([
            {"model": short_label(self.method_by_run[_row(r)["unlearned_run"]])
             if _row(r)["unlearned_run"] in self.method_by_run else _row(r)["unlearned_run"],
             **{k: _row(r)[k] for k in OTHER_ATTACK_KEYS},
             "seed": r["provenance"]["params"].get("seed"), "es_before": _row(r)["es_before"],
             "es_after": _row(r)["es_after"], "delta_es": _row(r)["delta_es"],
             "model_utility_after": _row(r)["model_utility_after"],
             "grid_delta_es": grid_delta.get((_row(r)["unlearned_run"], _row(r)["attack_data"]), float("nan")),
             "run": r["run"]} for r in other_06])
        methods = self._model_frame(other_05, ("lr",))
        self.sources["other_runs_attacks"] = list(attacks_.run) if len(attacks_) else []
        self.sources["other_runs_unlearning"] = list(methods.run)
        print(f"runs outside the profile's parameter files: {len(methods)} of notebook 05, "
              f"{len(attacks_)} of notebook 06")
        return attacks_, methods

    def per_layer_frag(self, forget_split: str = "forget10") -> pd.DataFrame:
        """Per model of the grid on one split in one precision (bf16 where the grid has it), and
        decoder block: its contribution to FRAG (``A_f`` share − gamma · ``A_r`` share, x100, summed
        over the block's projections)."""
        rows, found = [], self.methods_of_file(self.grid_05)
        weights = "bf16" if any(r["provenance"]["params"].get("weights") == "bf16" for r in found) else "fp32"
        for r in found:
            p = r["provenance"]["params"]
            if p.get("weights", "fp32") != weights or p["forget_split"] != forget_split:
                continue
            gamma = r["results"]["frag"]["gamma"]
            for m in r["results"]["frag"]["per_layer"]:
                block = int(m["module"].split("layers.")[1].split(".")[0]) if "layers." in m["module"] else -1
                rows.append({"model": short_label(r), "block": block,
                             "contribution_x100": 100 * (m["a_f_share"] - gamma * m["a_r_share"])})
        self.sources["per_layer_frag"] = [r["run"] for r in found if r["provenance"]["params"].get("weights", "fp32")
                                          == weights and r["provenance"]["params"]["forget_split"] == forget_split]
        if not rows:
            return pd.DataFrame()
        return pd.DataFrame(rows).groupby(["model", "block"], sort=False, as_index=False).sum()

    # -- writing ---------------------------------------------------------------------------------
    def write(self, out_dir: Path, prov: dict, tables_: dict[str, pd.DataFrame], figures: dict[str, Any]) -> list[str]:
        """Write each non-empty table (Markdown, LaTeX, CSV, and provenance naming its source runs,
        with :data:`WRITE_OPTIONS`) and each figure (PNG, provenance) to ``out_dir``, and remove every
        other table or figure there (no stale file: a table that came out empty, a figure not drawn,
        one this code no longer makes). Returns the names written."""
        written = []
        for name, table in tables_.items():
            if not len(table):
                continue
            options = WRITE_OPTIONS.get(name, {})
            formats = {k: f for k, f in options.get("formats", {}).items() if k in table}
            records.write_table(table, out_dir / name, {**prov, "source_runs": self.sources.get(name, []),
                                                        **options.get("provenance", {}),
                                                        **self.provenance.get(name, {})},
                                sort_by=options.get("sort_by"), formats=formats or None)
            written.append(name)
        for name, fig in figures.items():
            records.write_figure(fig, out_dir / name, {**prov, "source_runs": self.sources.get(name, [])})
            written.append(name)
        for f in out_dir.iterdir():
            if f.name.split(".")[0] not in written and f.suffix in (".md", ".csv", ".tex", ".png", ".json") \
                    and f.name != paths.RESULTS_FILE:
                f.unlink()
        return written
