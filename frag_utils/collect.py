"""The recorded runs of one profile, collected into notebook 09's tables (tested in
``tests/test_collect.py``; ``tests/test_regenerate.py`` checks that they rebuild the committed
tables byte for byte).

:class:`Collection` reads every complete ``results.json`` of a profile under ``papermill_runs/``
once; each method returns one table (a ``DataFrame``) and notes the runs it came from in
``sources``, which :meth:`Collection.write` puts in each table's provenance. The pure functions
of rows (the paper's Table 1 layout) live in :mod:`frag_utils.tables`, the statistics in
:mod:`frag_utils.analysis`, the figures in :mod:`frag_utils.plots`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from . import analysis, attacks, multiple_choice, parameters, paths, records, runs, tables

METHOD_ORDER = ("gold", "ga", "graddiff", "npo", "rmu", "sp", "frp")
KNOBS = ["sparsity", "frp_variant", "frp_lam", "frp_veto", "frp_beta", "lr", "rmu_coeff"]
# the knobs each method uses; the others are left blank (a pruner has no learning rate; only FRP's
# Eq. 6 scoring has a retain-rank weight beta, only the released one a veto P). FRP's lambda and P
# are read from the checkpoint's own record: records before 2026-11-25 lack the parameter
# frp_veto, and their released variant vetoed 5 % per row.
USES = {"frp": ("sparsity", "frp_variant", "frp_lam", "frp_veto", "frp_beta"), "sp": ("sparsity",),
        "rmu": ("lr", "rmu_coeff"), "ga": ("lr",), "graddiff": ("lr",), "npo": ("lr",), "gold": ()}
DEFAULT_SPARSITY = {"frp": 0.03, "sp": 0.05}  # what sparsity 0 means in notebook 05
KNOB_FORMATS = {k: "g" for k in ("sparsity", "frp_lam", "frp_veto", "frp_beta", "lr", "rmu_coeff")}  # as set
METHOD_COLUMNS = ["method", *KNOBS, "es", "es_retain", "model_utility", "l2_all", "l2_scored", "FRAG_x100",
                  "A_f_x100", "A_r_x100", "target_es", "target_model_utility", "forget_split", "run"]
VARIANT_KEYS = ("lr", "optimizer", "attack_data", "epochs", "lora_rank")
VARIANT_FILES = ("lr", "optimizer", "data", "lora", "horizon")  # 06_attacks.<name>.yaml; the others feed other tables
CHECK_COLUMNS = ["es", "model_utility", "l2_all", "A_f_x100", "A_r_x100", "FRAG_x100", "moved_fraction", "target_es",
                 "target_model_utility"]
OTHER_ATTACK_KEYS = ("attack_data", "lr", "optimizer", "epochs", "lora_rank", "forget_split")
PRUNING, DENSE = ("frp", "sp"), ("ga", "graddiff", "npo", "rmu")
FIGURE_SOURCES = {"frontier": "predictors", "table3_panels": "table3_by_precision", "frontier_table1": "table1",
                  "per_layer_frag": "methods"}  # else "horizon"
# how each table is written (:meth:`Collection.write`): formats per column (of those the table
# has), a complete sort key, more provenance
WRITE_OPTIONS: dict[str, dict] = {
    **{name: {"formats": KNOB_FORMATS} for name in ("methods", "sweep", "forgetting_strength", "frp_ablation")},
    **{name: {"formats": {k: "g" for k in ("lr", *KNOBS)}} for name in ("other_runs_attacks", "other_runs_unlearning")},
    "grid_times": {"formats": {"hours": ".2f", "median_minutes": ".1f", "estimated_hours": ".2f"},
                   "provenance": {"source_runs": "every run the profile's parameter files list; hours from the "
                                                 "recorded ones, estimated_hours adds the others at the median "
                                                 "recorded run of their kind (frag_utils.costs)"}},
    "table3_paper_protocol": {"provenance": {"methods": list(analysis.PAPER_TABLE3_METHODS)}},
    "frp_released": {"sort_by": ["lambda", "veto_P"], "formats": {"lambda": "g", "veto_P": "g", "sparsity": "g"}},
    "precision": {"formats": {"moved_fraction": ".4f"}},
    "claims": {"formats": {k: "+.2f" for k in ("paper_1B", "authors_recomputed_1B", "ours_bf16", "low",
                                                              "high")}},
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


def knobs(record: dict) -> dict[str, str]:
    """The strength knobs of a notebook-05 record as strings, blank where the method has none."""
    p, method = dict(record["provenance"]["params"]), record["results"]["row"]["method"]
    if p.get("match_l2_run"):  # SP pruned to another run's L2: the fraction of neurons that took
        p["sparsity"] = float(record["results"]["made"]["sparsity"])
    elif method in DEFAULT_SPARSITY and not p["sparsity"]:
        p["sparsity"] = DEFAULT_SPARSITY[method]
    if method == "frp":
        made = record["results"].get("made", {})
        p["frp_lam"], p["frp_veto"] = made.get("lam", ""), made.get("veto", "")
    used = [k for k in USES[method] if k != "frp_beta" or p["frp_variant"] in ("paper", "eq6")]
    return {k: (format(p[k], "g") if isinstance(p[k], float) else str(p[k])) if k in used else "" for k in KNOBS}


METHOD_NAMES = {"ga": "GA", "graddiff": "GradDiff", "npo": "NPO", "rmu": "RMU", "sp": "SP", "frp": "FRP",
                "gold": "gold"}


def short_label(record: dict) -> str:
    """The paper's name of a notebook-05 record's method (FRP with its veto P), for tables and
    figures whose parameter file fixes every other setting (the file and the notebook say which)."""
    method = _row(record)["method"]
    if method == "frp":
        return f"FRP (P {float(record['results'].get('made', {}).get('veto') or 0):g})"
    return METHOD_NAMES.get(method, method)


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
            raise ValueError(f"{r['run']} repeats {first['run']} at another seed but differs in {differ}: make the two "
                             "parameter files agree (06_attacks.table1.yaml, 06_attacks.table1_seeds.yaml).")
        seed = (key, r["provenance"]["params"]["seed"])
        if seed in seen:
            raise ValueError(f"{r['run']} repeats an attack at a seed it was already run with ({seed[1]}).")
        seen.add(seed)


class Collection:
    """The complete records of ``profile`` and the parameter files that name its grid.

    Attributes:
        method_runs: every notebook-05 record of the profile; ``method_by_run`` by run name.
        all_attacks: every notebook-06 record by its parameters (a run two files list is run once,
            under the first name; defaults left out of the key, as the runner does), less the stale
            ones (``stale``: the 05 run they attacked was redone or removed since: its FRAG or L2
            are no longer what the attack recorded).
        attacks: those of ``forget_split``.
        sources: table name -> the runs it was built from (filled as tables are built);
            ``provenance``: table name -> the rules that chose its rows, where a parameter did.
    """

    def __init__(self, profile: str, forget_split: str = "forget10") -> None:
        self.profile, self.forget_split = profile, forget_split
        self.params_dir = paths.PARAMS_DIR / profile
        found_06 = recorded_runs("06_attacks", profile)
        self.method_runs = recorded_runs("05_unlearn", profile)
        self.method_by_run = {_name(r): r for r in self.method_runs}
        self.defaults_06 = parameters.notebook_defaults("06_attacks")
        found = {parameters.params_key(r["provenance"]["params"], self.defaults_06): r for r in found_06}

        # stale: the copied pre-attack properties of the unlearned weights no longer match its 05 run
        def attacked_other_weights(r):
            u = r["results"]["unlearned_run"]
            return bool(u) and (u not in self.method_by_run or any(
                _row(r)[k] != _row(self.method_by_run[u])[k] for k in ("FRAG_x100", "l2_all")))

        self.stale = [r["run"] for r in found.values() if attacked_other_weights(r)]
        self.all_attacks = {k: r for k, r in found.items() if r["run"] not in self.stale}
        self.attacks = {k: r for k, r in self.all_attacks.items() if _row(r)["forget_split"] == forget_split}
        self.sources: dict[str, list[str]] = {}
        self.provenance: dict[str, dict] = {}  # table name -> more provenance (the rules that chose its rows)

    # -- the records of one parameter file -------------------------------------------------------
    def file(self, name: str) -> Path:
        return self.params_dir / name

    def planned(self, notebook: str, name: str) -> list:
        """The runs one parameter file of the profile plans (none when the file is absent)."""
        file = self.file(name)
        return runs.plan_run(notebook, file) if file.is_file() else []

    def attacks_of_file(self, name: str, every_split: bool = False) -> list[dict]:
        """The recorded runs of one notebook-06 file (of ``forget_split`` unless ``every_split``),
        in file order; runs not recorded yet are left out."""
        pool = self.all_attacks if every_split else self.attacks
        keys = [parameters.params_key(s.params, self.defaults_06) for s in self.planned("06_attacks", name)]
        return [pool[k] for k in keys if k in pool]

    def methods_of_file(self, name: str) -> list[dict]:
        """The recorded runs of one notebook-05 file, in file order."""
        return [self.method_by_run[s.name] for s in self.planned("05_unlearn", name) if s.name in self.method_by_run]

    def label(self, unlearned_run: str) -> str:
        """The attacked model: its method, with the strength knobs of its 05 run."""
        rec = self.method_by_run.get(unlearned_run)
        if rec is None:
            return unlearned_run
        set_knobs = [f"{k} {v}" for k, v in knobs(rec).items() if v != ""]
        return _row(rec)["method"] + (f" ({', '.join(set_knobs)})" if set_knobs else "")

    def _label_of(self, record: dict) -> str:
        return self.label(_row(record)["unlearned_run"])

    # -- notebook 05: the methods before any attack -----------------------------------------------
    def main_names(self) -> set[str]:
        """The notebook-05 runs of the attack grid (what ``06_attacks.yaml`` attacks; without it,
        ``05_unlearn.yaml``'s runs), as ``05_unlearn/<name>``."""
        if self.file("06_attacks.yaml").is_file():
            return {f"05_unlearn/{s.params['unlearned_run']}" for s in self.planned("06_attacks", "06_attacks.yaml")}
        return {f"05_unlearn/{s.name}" for s in self.planned("05_unlearn", "05_unlearn.yaml")}

    def _method_frame(self, recs: list[dict]) -> pd.DataFrame:
        return pd.DataFrame([{**knobs(r), **_row(r), "run": r["run"]} for r in recs], columns=METHOD_COLUMNS)

    def methods(self) -> pd.DataFrame:
        """One row per model of the attack grid on ``forget_split``, in method order."""
        main = self.main_names()
        chosen = [r for r in self.method_runs if r["run"] in main and _row(r)["forget_split"] == self.forget_split]
        self.sources["methods"] = [r["run"] for r in chosen]
        table = self._method_frame(chosen)
        if len(table):
            order = {m: i for i, m in enumerate(METHOD_ORDER)}
            unknown = set(table.method) - set(order)
            if unknown:
                raise ValueError(f"methods outside {METHOD_ORDER}: {sorted(unknown)}")
            table = table.assign(order=table.method.map(order)).sort_values(["order", "run"]).drop(columns="order")
        missing = sorted(main - {r["run"] for r in self.method_runs})
        print(f"{len(table)} recorded 05_unlearn runs of the attack grid for profile {self.profile!r} on "
              f"{self.forget_split}; methods missing: {sorted(set(METHOD_ORDER) - set(table.method))}; "
              f"runs not recorded: {missing}")
        return table

    def sweep(self) -> pd.DataFrame:
        """Every other notebook-05 run on ``forget_split`` (other strengths), the same columns."""
        main = self.main_names()
        chosen = [r for r in self.method_runs if r["run"] not in main and _row(r)["forget_split"] == self.forget_split]
        self.sources["sweep"] = [r["run"] for r in chosen]
        table = self._method_frame(chosen)
        return table.sort_values(["method", *KNOBS, "run"]).reset_index(drop=True) if len(table) else table

    # -- notebook 06: the relearning attacks ----------------------------------------------------
    def _attack_frame(self, recs: list[dict]) -> pd.DataFrame:
        return pd.DataFrame([{**_row(r), "model": self._label_of(r), "run": r["run"]} for r in recs])

    def main_attacks(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The paper's main table (``06_attacks.yaml``: one row per attacked checkpoint, ES, ΔES
        and Model Utility after each attack and their averages, blank until all three ran) and the
        effectiveness table (the 0.10 rule over every model, and over the intact ones: a collapsed
        model can relearn what an intact one does not and make an attack look effective alone)."""
        found = self.attacks_of_file("06_attacks.yaml")
        self.sources["attacks"] = self.sources["attack_effectiveness"] = [r["run"] for r in found]
        print(f"{len(found)} recorded runs of 06_attacks.yaml")
        long = self._attack_frame(found)
        if not len(long):
            return pd.DataFrame(), pd.DataFrame()
        wide = []
        for _, g in long.groupby("unlearned_run", sort=False):
            if not g.attack_data.is_unique:
                raise ValueError(f"two runs of one attack on one model: {g.run.tolist()}")
            row = {"model": g.model.iloc[0], "es_before": g.es_before.iloc[0],
                   "mu_before": g.model_utility_before.iloc[0]}
            for attack in tables.ATTACKS:
                hit = g[g.attack_data == attack]
                for col, src in (("es", "es_after"), ("delta_es", "delta_es"), ("mu", "model_utility_after")):
                    row[f"{attack}_{col}"] = hit[src].iloc[0] if len(hit) else float("nan")
            done = g[g.attack_data.isin(tables.ATTACKS)]
            complete = len(done) == len(tables.ATTACKS)  # an average over fewer attacks is not the table's
            row["avg_delta_es"] = done.delta_es.mean() if complete else float("nan")
            row["avg_mu_after"] = done.model_utility_after.mean() if complete else float("nan")
            row["l2_all"], row["FRAG_x100"] = g.l2_all.iloc[0], g.FRAG_x100.iloc[0]
            wide.append(row)
        intact = long.model_utility_before >= 0.5 * long.unlearned_run.map(
            lambda u: _row(self.method_by_run[u])["target_model_utility"])
        effectiveness = pd.DataFrame([
            {"attack": a, "models": int((long.attack_data == a).sum()),
             "max_delta_es": long[long.attack_data == a].delta_es.max(),
             "effective": bool(attacks.attack_effective(long[long.attack_data == a].delta_es)),
             "max_delta_es_intact": long[(long.attack_data == a) & intact].delta_es.max(),
             "effective_on_intact": bool(attacks.attack_effective(long[(long.attack_data == a) & intact].delta_es))}
            for a in tables.ATTACKS if (long.attack_data == a).any()])
        return pd.DataFrame(wide), effectiveness

    def variant_tables(self) -> dict[str, pd.DataFrame]:
        """One table per ``06_attacks.{lr,optimizer,data,lora,horizon}.yaml``: rows the attacked
        models, columns the setting the file varies, cells ΔES (and Model Utility after, where
        measured); a horizon file gives ΔES after each epoch. Plus ``06_attacks.seeds.yaml``'s
        ΔES per seed with per-model mean, standard deviation and range."""
        out = {}
        for variant in VARIANT_FILES:
            name = f"06_attacks.{variant}.yaml"
            found = self.attacks_of_file(name)
            if not found:
                continue
            rows = self._attack_frame(found)
            src = [r["run"] for r in found]
            if (rows.epochs > 1).any():  # a horizon: ΔES after each evaluated epoch of one run
                table = pd.DataFrame([{"model": m, **{f"epoch {e}": ev["es"] - r["results"]["before"]["es"]
                                                      for e, ev in sorted(r["results"]["epochs"].items(),
                                                                          key=lambda kv: int(kv[0]))}}
                                      for m, r in zip(rows.model, found)])
                out[f"variant_{variant}_delta_es"] = tables.mark_not_effective(table)
                self.sources[f"variant_{variant}_delta_es"] = src
                continue
            varying = [k for k in VARIANT_KEYS if rows[k].astype(str).nunique() > 1] or ["attack_data"]
            rows["setting"] = rows[varying].astype(str).agg(", ".join, axis=1)
            if rows.duplicated(["unlearned_run", "setting"]).any():
                raise ValueError(f"{name}: two runs in one cell")
            if rows.groupby("model").unlearned_run.nunique().max() != 1:
                raise ValueError(f"{name}: two models share a label")
            for value, suffix in (("delta_es", "delta_es"), ("model_utility_after", "utility")):
                if rows[value].isna().all():  # ES-only runs (eval_utility off)
                    continue
                table = rows.pivot_table(index="model", columns="setting", values=value, aggfunc="first", sort=False,
                                         dropna=False).reset_index()
                out[f"variant_{variant}_{suffix}"] = tables.mark_not_effective(table) if value == "delta_es" else table
                self.sources[f"variant_{variant}_{suffix}"] = src
        seed_runs = self.attacks_of_file("06_attacks.seeds.yaml")
        if seed_runs:
            rows = pd.DataFrame([{"model": self._label_of(r), "seed": r["provenance"]["params"]["seed"],
                                  "es_before": _row(r)["es_before"], "delta_es": _row(r)["delta_es"]}
                                 for r in seed_runs])
            out["variant_seeds_delta_es"] = tables.seeds_table(rows)
            self.sources["variant_seeds_delta_es"] = [r["run"] for r in seed_runs]
        return out

    def multiple_choice(self) -> pd.DataFrame:
        """``06_attacks.mc.yaml``: 4-option accuracy on the forget questions before and after the
        retain attack, utility accuracy, and a flag for a model within 0.05 of chance."""
        found = self.attacks_of_file("06_attacks.mc.yaml")
        self.sources["multiple_choice"] = [r["run"] for r in found]
        print(f"{len(found)} recorded runs of 06_attacks.mc.yaml")
        return pd.DataFrame([{
            "model": self._label_of(r), "acc": _row(r)["mc_forget_acc_before"],
            "delta_acc": _row(r)["mc_delta_forget_acc"],
            "acc_after": _row(r)["mc_forget_acc_after"], "utility_acc": _row(r)["mc_utility_acc_before"],
            "utility_acc_after": _row(r)["mc_utility_acc_after"], "l2_all": _row(r)["l2_all"],
            "FRAG_x100": _row(r)["FRAG_x100"],
            "degenerate": bool(_row(r)["mc_utility_acc_before"] <= multiple_choice.CHANCE + 0.05),
            "run": r["run"]} for r in found])

    # -- the predictor analysis ------------------------------------------------------------------
    def checkpoints(self, pool_splits: bool = True) -> pd.DataFrame:
        """Every checkpoint attacked by forget+retain at the main grid's attack settings (any
        file; with ``pool_splits`` on every split, each ΔES measured on its own split)."""
        pooled = ("unlearned_run", "forget_split") if pool_splits else ("unlearned_run",)

        def without_model(params):
            return parameters.params_key({k: v for k, v in params.items() if k not in pooled}, self.defaults_06)

        standard = {without_model(s.params) for s in self.planned("06_attacks", "06_attacks.yaml")
                    if s.params["attack_data"] == "forget_retain"}
        rows = []
        for r in (self.all_attacks if pool_splits else self.attacks).values():
            p = r["provenance"]["params"]
            source = self.method_by_run.get(p.get("unlearned_run", ""))
            if without_model(p) not in standard or source is None:
                continue
            row = _row(r)
            rows.append({"model": self.label(p["unlearned_run"]), "unlearned_run": p["unlearned_run"],
                         "forget_split": row["forget_split"], "method": row["method"],
                         "sparsity": float(knobs(source)["sparsity"] or "nan"),
                         "kind": "gold" if row["method"] == "gold" else "method", "delta_es": row["delta_es"],
                         "es_before": row["es_before"], "model_utility_before": row["model_utility_before"],
                         "target_model_utility": _row(source)["target_model_utility"],
                         "target_es": _row(source)["target_es"],
                         **{k: row[k] for k in analysis.PREDICTORS}, "run": r["run"]})
        table = pd.DataFrame(rows)
        self.sources["predictors"] = self.sources["predictor_checkpoints"] = list(table.run) if len(table) else []
        return table

    def predictor_analysis(self, checkpoints: pd.DataFrame, min_utility_fraction: float, min_forgetting: float,
                           n_boot: int) -> dict[str, Any]:
        """Spearman rho (bootstrap intervals) of each predictor against ΔES over the healthy
        checkpoints (not gold, Model Utility at least ``min_utility_fraction`` of the target's):
        all, without FRP, those that forgot (ES at least ``min_forgetting`` below the target's),
        and within each family of update (pooled over both, a predictor can rank the families
        apart without ranking inside either).

        Returns:
            ``ok`` (the healthy checkpoints), ``predictors`` (the table), ``listing`` (every
            checkpoint with why it is in or out) and ``forgot`` (how many forgot).
        """
        if not len(checkpoints):
            print("no checkpoint attacked by forget+retain yet")
            return {"ok": checkpoints, "predictors": pd.DataFrame(), "listing": pd.DataFrame(), "forgot": 0}
        is_gold = checkpoints.kind.eq("gold")
        ok, excluded = analysis.healthy(checkpoints[~is_gold], min_utility_fraction)
        excluded = pd.concat([checkpoints[is_gold].assign(reason="gold model (not an unlearned checkpoint)"), excluded])
        forgot = ok.es_before <= ok.target_es - min_forgetting
        pruning, dense = ok.method.isin(PRUNING), ok.method.isin(DENSE)
        if not (pruning | dense).all():
            raise ValueError(f"a method in neither family: {sorted(set(ok.method[~(pruning | dense)]))}")
        predictors = analysis.predictor_table(ok, {"all": ok.method.ne(""), "without FRP": ok.method.ne("frp"),
                                                   f"forgot (ES ≥ {min_forgetting:g} below target)": forgot,
                                                   "pruning only (FRP, SP)": pruning,
                                                   "dense only (GA, GradDiff, NPO, RMU)": dense},
                                              n_boot=n_boot, seed=0)
        rule = {"exclusion_rule": "gold model; Model Utility before the attack below "
                                  f"{min_utility_fraction:g} x the target's"}
        self.provenance["predictors"] = self.provenance["predictor_checkpoints"] = rule
        listing = pd.concat([ok.assign(reason="included"), excluded])[
            ["model", "forget_split", "reason", "delta_es", "es_before", "model_utility_before", *analysis.PREDICTORS,
             "run"]]
        print(f"{len(ok)} healthy checkpoints of {len(checkpoints)} attacked by forget+retain "
              f"(the issue asks for at least 20: {'met' if len(ok) >= 20 else 'NOT met'}); "
              f"exclusion rule: gold, and Model Utility below {min_utility_fraction:g} x the target's; "
              f"{int(forgot.sum())} of them forgot (ES at least {min_forgetting:g} below the target's)")
        return {"ok": ok, "predictors": predictors, "listing": listing, "forgot": int(forgot.sum())}

    def table3_paper_protocol(self, checkpoints: pd.DataFrame, n_boot: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The authors' ``analysis/table3_spearman.py``: GradDiff, NPO, RMU, SP and FRP, one
        checkpoint per method and split at its main setting (what ``05_unlearn.splits.yaml`` runs;
        on a split it does not name, the recorded run with the same method and knobs).

        Returns:
            The chosen checkpoints and the table (empty when there are none).
        """
        split_names = {s.name for s in self.planned("05_unlearn", "05_unlearn.splits.yaml")}

        def signature(r):
            return _row(r)["method"], tuple(sorted(knobs(r).items()))

        main_signatures = {signature(r) for r in self.method_runs if _name(r) in split_names}
        main_runs = split_names | {_name(r) for r in self.method_runs if signature(r) in main_signatures}
        chosen = analysis.paper_table3_checkpoints(checkpoints, main_runs) if len(checkpoints) else checkpoints
        table = (analysis.table3_beside_authors(analysis.paper_table3(chosen, n_boot=n_boot)) if len(chosen)
                 else pd.DataFrame())
        self.sources["table3_paper_protocol"] = self.sources["table3_paper_protocol_checkpoints"] = (
            list(chosen.run) if len(chosen) else [])
        print(f"{len(chosen)} checkpoints (the paper: 5 methods x 3 splits per model); per method and split: "
              f"{chosen.groupby(['method', 'forget_split']).size().to_dict() if len(chosen) else {}}")
        return chosen, table

    def table1(self, n_boot: int) -> dict[str, pd.DataFrame]:
        """The faithful grid (``06_attacks.table1.yaml``): the paper's Table 1 layout averaged over
        splits and per split, and Table 3 in the paper's protocol per weight precision (FRP's main
        setting is plain FRP, veto P 0; computed once four checkpoints of a precision exist). The
        forget+retain attacks that ``06_attacks.table1_seeds.yaml`` repeats at other seeds enter
        Table 3 as lists of ΔES, so that its intervals carry the seed noise
        (:func:`frag_utils.analysis.bootstrap_spearman`); Table 1 stays at the reference seed 42."""
        specs = self.planned("06_attacks", "06_attacks.table1.yaml")
        found = self.attacks_of_file("06_attacks.table1.yaml", every_split=True)
        rows = tables.attack_rows(found, self.method_by_run, short_label)
        repeat_records = self.attacks_of_file("06_attacks.table1_seeds.yaml", every_split=True)
        _same_attack_but_the_seed(repeat_records, found)
        repeats = tables.attack_rows(repeat_records, self.method_by_run, short_label)
        fr = rows[rows.attack_data.eq("forget_retain")]
        main = {u for u in fr.unlearned_run if not (_row(self.method_by_run[u])["method"] == "frp"
                                                    and self.method_by_run[u]["results"].get("made", {}).get("veto"))}
        by_precision, checkpoints = [], []
        for weights, g in fr.groupby("weights"):
            chosen = analysis.paper_table3_checkpoints(g, main)
            if len(chosen) >= 4:
                chosen = tables.with_seed_repeats(chosen, repeats[repeats.unlearned_run.isin(chosen.unlearned_run)])
                table = analysis.table3_beside_authors(analysis.paper_table3(chosen, n_boot=n_boot))
                by_precision.append(table.assign(weights=weights, checkpoints=len(chosen)))
                checkpoints.append(chosen)
        self.sources["table1"] = self.sources["table1_per_split"] = list(rows.run)
        table3_runs = [*fr[fr.unlearned_run.isin(main)].run, *repeats[repeats.unlearned_run.isin(main)].run]
        for name in ("table3_by_precision", "table3_by_precision_checkpoints", "claims"):
            self.sources[name] = table3_runs
        print(f"{len(found)} of {len(specs)} runs of 06_attacks.table1.yaml recorded, "
              f"{len(repeats)} of {len(self.planned('06_attacks', '06_attacks.table1_seeds.yaml'))} "
              "seed repeats of 06_attacks.table1_seeds.yaml")
        return {"rows": rows, "table1": tables.table1(rows) if len(rows) else pd.DataFrame(),
                "per_split": tables.table1_per_split(rows),
                "table3_by_precision": pd.concat(by_precision, ignore_index=True) if by_precision else pd.DataFrame(),
                "table3_checkpoints": pd.concat(checkpoints, ignore_index=True) if checkpoints else pd.DataFrame()}

    # -- issue 16's checks, the ablations, the controls ------------------------------------------
    def issue16_checks(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """FRP as released (``05_unlearn.frp_released.yaml``) and the precision check
        (``05_unlearn.precision.yaml``), with the fraction of scored weights that moved."""
        frp_runs = self.methods_of_file("05_unlearn.frp_released.yaml")
        frp = pd.DataFrame([{"lambda": r["provenance"]["params"]["frp_lam"],
                             "veto_P": r["provenance"]["params"]["frp_veto"],
                             "sparsity": r["provenance"]["params"]["sparsity"],
                             "weights": r["provenance"]["params"]["weights"],
                             **{k: _row(r).get(k) for k in CHECK_COLUMNS + ["distinct_row_masks_min"]},
                             "run": r["run"]} for r in frp_runs])
        precision_runs = self.methods_of_file("05_unlearn.precision.yaml")
        precision = pd.DataFrame([{"method": _row(r)["method"], "weights": r["provenance"]["params"]["weights"],
                                   **{k: _row(r).get(k) for k in CHECK_COLUMNS}, "run": r["run"]}
                                  for r in precision_runs])
        for table in (frp, precision):
            if len(table) and not (table.moved_fraction.between(0, 1).all() and table.es.between(0, 1).all()):
                raise ValueError("a moved fraction or ES outside [0, 1]: a record is corrupt")
        if len(precision):
            precision = precision.assign(_o=precision.method.map({"ga": 0, "graddiff": 1, "npo": 2})).sort_values(
                ["_o", "weights"]).drop(columns="_o")
        self.sources["frp_released"] = list(frp.run) if len(frp) else []
        self.sources["precision"] = list(precision.run) if len(precision) else []
        planned = {n: len(self.planned("05_unlearn", n)) for n in ("05_unlearn.frp_released.yaml",
                                                                  "05_unlearn.precision.yaml")}
        print(f"FRP check: {len(frp_runs)} of {planned['05_unlearn.frp_released.yaml']} runs recorded; "
              f"precision check: {len(precision_runs)} of {planned['05_unlearn.precision.yaml']}")
        return frp, precision

    def importance_ablation(self, ok: pd.DataFrame, n_boot: int) -> pd.DataFrame:
        """Notebook 07: rho of FRAG recomputed with each importance term, and of the forget-loss
        barrier, against ΔES over the healthy checkpoints that have a 07 record."""
        rows, barrier_by_run = [], {}
        for r in recorded_runs("07_ablations", self.profile):
            for row in r["results"]["scores"]:
                rows.append({**row, "ablation_run": r["run"]})
            for b in r["results"]["barrier"]:
                barrier_by_run[b["unlearned_run"]] = b["barrier"]
        ablation = pd.DataFrame(rows)
        self.sources["ablation_importance"] = sorted({r["ablation_run"] for r in rows}) + self.sources.get(
            "predictors", [])
        table = pd.DataFrame()
        if len(ablation) and len(ok):
            merged = ok[["unlearned_run", "delta_es", "method"]].merge(ablation, on="unlearned_run")
            parts = []
            for kind, g in merged.groupby("importance", sort=False):
                g = g.drop_duplicates("unlearned_run", keep="last")
                parts.append(analysis.predictor_table(g, {"all": g.method.ne("")}, predictors=("FRAG_x100", "A_f_x100"),
                                                      n_boot=n_boot, seed=0).assign(importance=kind))
            with_barrier = ok.assign(barrier=ok.unlearned_run.map(barrier_by_run)).dropna(subset=["barrier"])
            if len(with_barrier):
                parts.append(analysis.predictor_table(with_barrier, {"all": with_barrier.method.ne("")},
                                                      predictors=("barrier",), n_boot=n_boot,
                                                      seed=0).assign(importance="-"))
            table = pd.concat(parts, ignore_index=True)[["importance", "predictor", "n", "rho", "low", "high",
                                                         "degenerate_resamples"]]
        scored = (ablation.unlearned_run.isin(ok.unlearned_run).sum() // max(1, ablation.importance.nunique())
                  if len(ablation) and len(ok) else 0)
        print(f"07_ablations records: {len({r['ablation_run'] for r in rows})}; "
              f"healthy checkpoints with an ablation score: {scored}")
        return table

    def frp_ablation(self, checkpoints: pd.DataFrame) -> pd.DataFrame:
        """Every FRP checkpoint on ``forget_split``: scoring rule, beta, sparsity, ES and Model
        Utility before the attack, ΔES under forget+retain (blank until attacked), L2, FRAG."""
        delta = (checkpoints.drop_duplicates("unlearned_run").set_index("unlearned_run").delta_es
                 if len(checkpoints) else pd.Series(dtype=float))
        table = pd.DataFrame([
            {**{k: knobs(r)[k] for k in ("frp_variant", "frp_beta", "sparsity")}, "es": _row(r)["es"],
             "model_utility": _row(r)["model_utility"], "delta_es": delta.get(_name(r), float("nan")),
             "l2_all": _row(r)["l2_all"], "FRAG_x100": _row(r)["FRAG_x100"], "run": r["run"]}
            for r in self.method_runs if _row(r)["method"] == "frp" and _row(r)["forget_split"] == self.forget_split])
        if len(table):
            table = table.assign(_b=pd.to_numeric(table.frp_beta, errors="coerce"), _s=pd.to_numeric(table.sparsity))
            table = table.sort_values(["frp_variant", "_b", "_s"]).drop(columns=["_b", "_s"]).reset_index(drop=True)
        self.sources["frp_ablation"] = (list(table.run) if len(table) else []) + self.sources.get("predictors", [])
        return table

    def matched_controls(self, checkpoints: pd.DataFrame, methods: pd.DataFrame,
                         utility_band: float) -> dict[str, pd.DataFrame]:
        """Appendix C.4 from the records so far: ``matched_utility`` (bands of Model Utility
        before the attack, ``utility_band`` wide, with more than one model), ``matched_sparsity``
        (FRP against SP at 2.5 % and 5 %), ``matched_update_norm`` (each SP run pruned to an FRP run's
        L2 beside that run, with the L2 gap and the paper's 3 % check) and ``forgetting_strength`` (each main
        model's forget ES against the gold model's)."""
        out = {"matched_utility": pd.DataFrame(), "matched_sparsity": pd.DataFrame()}
        norm_pairs = []
        if len(checkpoints):
            banded = checkpoints.assign(band=(checkpoints.model_utility_before // utility_band) * utility_band)
            banded = banded[banded.band.map(banded.band.value_counts()) > 1]  # one model in a band compares nothing
            out["matched_utility"] = banded.sort_values(["band", "delta_es"])[
                ["band", "model", "forget_split", "method", "model_utility_before", "es_before", "delta_es",
                 "FRAG_x100", "l2_all", "run"]]
            pruned = checkpoints[checkpoints.method.isin(PRUNING) & checkpoints.sparsity.isin([0.025, 0.05])]
            out["matched_sparsity"] = pruned.sort_values(["sparsity", "method"])[
                ["sparsity", "model", "method", "model_utility_before", "es_before", "delta_es", "l2_all", "FRAG_x100",
                 "run"]]
            attacked = checkpoints.drop_duplicates("unlearned_run").set_index("unlearned_run")
            for u, sp_row in attacked.iterrows():
                frp_run = self.method_by_run[u]["provenance"]["params"].get("match_l2_run", "")
                if frp_run not in attacked.index:
                    continue
                frp_row = attacked.loc[frp_run]
                gap = sp_row.l2_all / frp_row.l2_all - 1
                norm_pairs.append({
                    "frp": frp_row.model, "sp": sp_row.model, "l2_frp": frp_row.l2_all, "l2_sp": sp_row.l2_all,
                    "l2_gap_pct": 100 * abs(gap), "within_3pct": bool(abs(gap) <= 0.03),
                    **{f"{col}_{m}": r[col] for m, r in (("frp", frp_row), ("sp", sp_row))
                       for col in ("model_utility_before", "es_before", "delta_es", "FRAG_x100")},
                    "runs": f"{frp_run} | {u}"})
        out["matched_update_norm"] = pd.DataFrame(norm_pairs)
        gold_es = methods.loc[methods.method.eq("gold"), "es"] if len(methods) else pd.Series(dtype=float)
        strength = methods.reindex(columns=["method", *KNOBS, "es", "model_utility", "run"]).assign(
            gold_es=float(gold_es.iloc[0]) if len(gold_es) else float("nan"))
        if len(strength):
            strength = strength.assign(es_minus_gold=strength.es - strength.gold_es,
                                       forgot_to_gold_level=strength.es <= strength.gold_es)
        out["forgetting_strength"] = strength
        for name in ("matched_utility", "matched_sparsity", "matched_update_norm"):
            self.sources[name] = self.sources.get("predictors", [])
        self.sources["forgetting_strength"] = self.sources.get("methods", [])
        return out

    def other_runs(self, main_attack_runs: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Every complete record of the profile that no parameter file of it lists, by name or by
        parameters (a user's rerun or own file): the attacks beside the grid's ΔES for the same model and attack data
        (``grid_delta_es``), and the notebook-05 runs."""
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
        by_run = {r["run"]: r for r in self.all_attacks.values()}
        grid_fr = {(_row(by_run[n])["unlearned_run"], _row(by_run[n])["attack_data"]): _row(by_run[n])["delta_es"]
                   for n in main_attack_runs}
        attacks_ = pd.DataFrame([
            {"model": self._label_of(r), **{k: _row(r)[k] for k in OTHER_ATTACK_KEYS},
             "seed": r["provenance"]["params"].get("seed"), "es_before": _row(r)["es_before"],
             "es_after": _row(r)["es_after"], "delta_es": _row(r)["delta_es"],
             "model_utility_after": _row(r)["model_utility_after"],
             "grid_delta_es": grid_fr.get((_row(r)["unlearned_run"], _row(r)["attack_data"]), float("nan")),
             "run": r["run"]} for r in other_06])
        methods = self._method_frame(other_05)
        self.sources["other_runs_attacks"] = list(attacks_.run) if len(attacks_) else []
        self.sources["other_runs_unlearning"] = list(methods.run)
        print(f"runs outside the profile's parameter files: {len(methods)} of notebook 05, "
              f"{len(attacks_)} of notebook 06")
        return attacks_, methods

    # -- what the figures plot -------------------------------------------------------------------
    def per_layer_frag(self) -> pd.DataFrame:
        """Per model of the methods table and decoder block: its contribution to FRAG (``A_f``
        share − gamma · ``A_r`` share, x100, summed over the block's projections)."""
        rows = []
        for name in self.sources.get("methods", []):
            r = self.method_by_run[name.split("/", 1)[1]]
            gamma = r["results"]["frag"]["gamma"]
            for m in r["results"]["frag"]["per_layer"]:
                block = int(m["module"].split("layers.")[1].split(".")[0]) if "layers." in m["module"] else -1
                rows.append({"model": self.label(_name(r)), "block": block,
                             "contribution_x100": 100 * (m["a_f_share"] - gamma * m["a_r_share"])})
        if not rows:
            return pd.DataFrame()
        return pd.DataFrame(rows).groupby(["model", "block"], sort=False, as_index=False).sum()

    def horizon_curve(self) -> pd.DataFrame:
        """ES after each evaluated epoch of every attack of several epochs (epoch 0: before)."""
        found = [r for r in self.attacks.values() if _row(r)["epochs"] > 1]
        self.sources["horizon"] = [r["run"] for r in found]
        if not found:
            return pd.DataFrame()
        return pd.DataFrame([{"model": self._label_of(r), "epoch": int(e), "es": ev["es"]}
                             for r in found for e, ev in r["results"]["epochs"].items()]
                            + [{"model": self._label_of(r), "epoch": 0, "es": r["results"]["before"]["es"]}
                               for r in found])

    # -- writing ---------------------------------------------------------------------------------
    def write(self, out_dir: Path, prov: dict, tables_: dict[str, pd.DataFrame], figures: dict[str, Any]) -> list[str]:
        """Write each non-empty table (Markdown, LaTeX, CSV, and provenance naming its source runs,
        with :data:`WRITE_OPTIONS`) and each figure (PNG, provenance) to ``out_dir``. A table that
        came out empty has its earlier files removed (no stale table: its records were left out or
        removed since). Returns the names written."""
        written = []
        for name, table in tables_.items():
            if not len(table):
                for f in out_dir.glob(f"{name}.*"):
                    f.unlink()
                continue
            options = WRITE_OPTIONS.get(name, {})
            formats = {k: f for k, f in options.get("formats", {}).items() if k in table}
            records.write_table(table, out_dir / name, {**prov, "source_runs": self.sources.get(name, []),
                                                        **options.get("provenance", {}),
                                                        **self.provenance.get(name, {})},
                                sort_by=options.get("sort_by"), formats=formats or None)
            written.append(name)
        for name, fig in figures.items():
            source = FIGURE_SOURCES.get(name, "horizon")
            records.write_figure(fig, out_dir / name, {**prov, "source_runs": self.sources.get(source, [])})
            written.append(name)
        return written
