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

from . import analysis, parameters, paths, records, runs, tables

# the faithful grid's parameter files (issue 29): its models, their attacks, the seed repeats
GRID_05, GRID_06, SEEDS_06 = "05_unlearn.table1.yaml", "06_attacks.table1.yaml", "06_attacks.table1_seeds.yaml"
# the pilots that chose its settings (docs/choices.md): unlearning strength in bf16, the attack's recipe
STRENGTH_PILOT, PROTOCOL_PILOT = "05_unlearn.strength_bf16.yaml", "06_attacks.protocol.yaml"
MODEL_COLUMNS = ["model", "method", "weights", "forget_split", "es", "es_retain", "model_utility", "l2_all",
                 "FRAG_x100", "A_f_x100", "A_r_x100", "target_es", "target_model_utility", "run"]
PILOT_SETTINGS = {STRENGTH_PILOT: ("lr", "rmu_coeff"), PROTOCOL_PILOT: ("lr", "batch_size", "grad_accum")}
DENSE = ("ga", "graddiff", "npo", "rmu")
OTHER_ATTACK_KEYS = ("attack_data", "lr", "optimizer", "epochs", "lora_rank", "forget_split")
FIGURE_SOURCES = {"table3_panels": "table3_by_precision", "frontier_table1": "table1",
                  "per_layer_frag": "unlearned_models"}
# how each table is written (:meth:`Collection.write`): formats per column (of those the table
# has), a complete sort key, more provenance
WRITE_OPTIONS: dict[str, dict] = {
    **{name: {"formats": {"lr": "g", "rmu_coeff": "g", "model_lr": "g"}}
       for name in ("strength_pilot", "protocol_pilot", "other_runs_attacks", "other_runs_unlearning")},
    "grid_times": {"formats": {"hours": ".2f", "median_minutes": ".1f", "estimated_hours": ".2f"},
                   "provenance": {"source_runs": "every run the profile's parameter files list; hours from the "
                                                 "recorded ones, estimated_hours adds the others at the median "
                                                 "recorded run of their kind (frag_utils.costs)"}},
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
        sources: table name -> the runs it was built from (filled as tables are built);
            ``provenance``: table name -> the rules that chose its rows, where a parameter did.
    """

    def __init__(self, profile: str) -> None:
        self.profile = profile
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
        self.sources: dict[str, list[str]] = {}
        self.provenance: dict[str, dict] = {}  # table name -> more provenance (the rules that chose its rows)

    # -- the records of one parameter file -------------------------------------------------------
    def planned(self, notebook: str, name: str) -> list:
        """The runs one parameter file of the profile plans (none when the file is absent)."""
        file = self.params_dir / name
        return runs.plan_run(notebook, file) if file.is_file() else []

    def attacks_of_file(self, name: str) -> list[dict]:
        """The recorded runs of one notebook-06 file, in file order; runs not recorded yet are left out."""
        keys = [parameters.params_key(s.params, self.defaults_06) for s in self.planned("06_attacks", name)]
        return [self.all_attacks[k] for k in keys if k in self.all_attacks]

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
        found = self.methods_of_file(GRID_05)
        self.sources["unlearned_models"] = [r["run"] for r in found]
        print(f"{len(found)} of {len(self.planned('05_unlearn', GRID_05))} runs of {GRID_05} recorded")
        return self._model_frame(found)

    def pilots(self) -> dict[str, pd.DataFrame]:
        """The two pilots that chose the grid's settings (``docs/choices.md``): ``strength_pilot``
        (each dense method in bf16 at several learning rates; the grid's own forget10 bf16 runs are
        its rows at the chosen rate) and ``protocol_pilot`` (the forget+retain attack at the
        reference recipe and at the profile's)."""
        strength = self.methods_of_file(STRENGTH_PILOT) + [
            r for r in self.methods_of_file(GRID_05) if _row(r)["forget_split"] == "forget10"
            and r["provenance"]["params"]["weights"] == "bf16" and _row(r)["method"] in DENSE]
        protocol = self.attacks_of_file(PROTOCOL_PILOT)
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
        seed noise (:func:`frag_utils.analysis.bootstrap_spearman`); Table 1 stays at the reference
        seed 42."""
        specs = self.planned("06_attacks", GRID_06)
        found = self.attacks_of_file(GRID_06)
        rows = tables.attack_rows(found, self.method_by_run, short_label)
        repeat_records = self.attacks_of_file(SEEDS_06)
        _same_attack_but_the_seed(repeat_records, found)
        repeats = tables.attack_rows(repeat_records, self.method_by_run, short_label)
        fr = rows[rows.attack_data.eq("forget_retain")]
        fr = fr.assign(target_model_utility=[_row(self.method_by_run[u])["target_model_utility"]
                                             for u in fr.unlearned_run])
        main = {u for u in fr.unlearned_run if not (_row(self.method_by_run[u])["method"] == "frp"
                                                    and self.method_by_run[u]["results"].get("made", {}).get("veto"))}
        by_precision, checkpoints, extended, listing = [], [], [], []
        for weights, g in fr.groupby("weights"):
            chosen = analysis.paper_table3_checkpoints(g, main)
            if len(chosen) >= 4:
                chosen = tables.with_seed_repeats(chosen, repeats[repeats.unlearned_run.isin(chosen.unlearned_run)])
                table = analysis.table3_beside_authors(analysis.paper_table3(chosen, n_boot=n_boot))
                by_precision.append(table.assign(weights=weights, checkpoints=len(chosen)))
                checkpoints.append(chosen)
            ok, excluded = analysis.healthy(g[g.method.ne("gold")], min_utility_fraction)
            listing.append(pd.concat([ok.assign(reason="included"), excluded]))
            if len(ok) >= 4:
                ok = tables.with_seed_repeats(ok, repeats[repeats.unlearned_run.isin(ok.unlearned_run)])
                extended.append(analysis.paper_table3(ok, n_boot=n_boot).assign(weights=weights))
        self.sources["table1"] = self.sources["table1_per_split"] = list(rows.run)
        table3_runs = [*fr[fr.unlearned_run.isin(main)].run, *repeats[repeats.unlearned_run.isin(main)].run]
        for name in ("table3_by_precision", "table3_by_precision_checkpoints", "claims"):
            self.sources[name] = table3_runs
        self.sources["table3_extended"] = self.sources["table3_extended_checkpoints"] = [
            *fr.run, *repeats[repeats.attack_data.eq("forget_retain")].run]
        self.provenance["table3_extended"] = self.provenance["table3_extended_checkpoints"] = {
            "exclusion_rule": "gold model; Model Utility before the attack below "
                              f"{min_utility_fraction:g} x the target's"}
        print(f"{len(found)} of {len(specs)} runs of {GRID_06} recorded, "
              f"{len(repeats)} of {len(self.planned('06_attacks', SEEDS_06))} seed repeats of {SEEDS_06}")
        return {"rows": rows, "table1": tables.table1(rows) if len(rows) else pd.DataFrame(),
                "per_split": tables.table1_per_split(rows),
                "table3_by_precision": pd.concat(by_precision, ignore_index=True) if by_precision else pd.DataFrame(),
                "table3_checkpoints": pd.concat(checkpoints, ignore_index=True) if checkpoints else pd.DataFrame(),
                "table3_extended": pd.concat(extended, ignore_index=True) if extended else pd.DataFrame(),
                "table3_extended_checkpoints": pd.concat(listing, ignore_index=True) if listing else pd.DataFrame()}

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
                      for r in self.attacks_of_file(GRID_06)}
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

    def per_layer_frag(self, weights: str = "bf16", forget_split: str = "forget10") -> pd.DataFrame:
        """Per model of the grid in one precision and split, and decoder block: its contribution to
        FRAG (``A_f`` share − gamma · ``A_r`` share, x100, summed over the block's projections)."""
        rows = []
        for r in self.methods_of_file(GRID_05):
            p = r["provenance"]["params"]
            if p.get("weights", "fp32") != weights or p["forget_split"] != forget_split:
                continue
            gamma = r["results"]["frag"]["gamma"]
            for m in r["results"]["frag"]["per_layer"]:
                block = int(m["module"].split("layers.")[1].split(".")[0]) if "layers." in m["module"] else -1
                rows.append({"model": short_label(r), "block": block,
                             "contribution_x100": 100 * (m["a_f_share"] - gamma * m["a_r_share"])})
        if not rows:
            return pd.DataFrame()
        return pd.DataFrame(rows).groupby(["model", "block"], sort=False, as_index=False).sum()

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
            source = FIGURE_SOURCES[name]
            records.write_figure(fig, out_dir / name, {**prov, "source_runs": self.sources.get(source, [])})
            written.append(name)
        return written
