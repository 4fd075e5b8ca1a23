"""The paper's Table 1 and the seed repeats of its attacks, as plain functions of attack rows (:func:`attack_rows`:
``model`` names the method and its knobs, the same label on every split; ``weights``, the model's storage)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import pandas as pd

ATTACKS = ("retain", "forget", "forget_retain")
SPLITS = ("forget01", "forget05", "forget10")
ROW_COLUMNS = ("model", "method", "weights", "forget_split", "attack_data", "es_before", "es_after", "delta_es",
               "model_utility_before", "model_utility_after", "unlearned_run", "l2_all", "FRAG_x100", "A_f_x100",
               "A_r_x100", "optimizer_steps", "few_steps", "run")
# below this much forgotten ES (target's − before), the share recovered is not defined: nothing to recover
MIN_FORGOTTEN = 0.05


def attack_rows(attack_records: Sequence[dict], method_by_run: dict[str, dict],
                label: Callable[[dict], str]) -> pd.DataFrame:
    """One row per attack record whose notebook-05 run is known; ``label(record_05)`` names the model."""
    rows = []
    for r in attack_records:
        row = r["results"]["row"]
        source = method_by_run.get(row["unlearned_run"])
        if source is None:
            continue
        rows.append({"model": label(source), "method": row["method"],
                     "weights": source["provenance"]["params"].get("weights", "fp32"),
                     **{k: row[k] for k in ROW_COLUMNS if k in row and k not in ("model", "method", "weights")},
                     "run": r["run"]})
    return pd.DataFrame(rows, columns=list(ROW_COLUMNS))


def mean_if_complete(values: pd.Series, n: int) -> float:
    return float(values.mean()) if values.notna().sum() == n else float("nan")


def table1(rows: pd.DataFrame) -> pd.DataFrame:
    """The paper's Table 1 per precision and model: forget ES, ΔES and Model Utility before and after each attack,
    over the splits, and ΔES over the attacks; NaN unless all are recorded (a mean over fewer is not the table's)."""
    out = []
    in_order = pd.Categorical(rows.model, categories=list(dict.fromkeys(rows.model)))  # models as they appear
    for (weights, model), g in rows.groupby(["weights", in_order], observed=True):
        row: dict[str, Any] = {"weights": weights, "model": model, "method": g.method.iloc[0],
                               "splits_recorded": int(g.forget_split.nunique())}
        unlearned = g.drop_duplicates("forget_split").set_index("forget_split").reindex(list(SPLITS))
        row["es_before"] = mean_if_complete(unlearned.es_before, len(SPLITS))
        row["mu_before"] = mean_if_complete(unlearned.model_utility_before, len(SPLITS))
        for attack in ATTACKS:
            hit = g[g.attack_data == attack].set_index("forget_split")
            if hit.index.duplicated().any():
                raise ValueError(f"two {attack} attacks of {model} ({weights}) on one split: {list(hit.run)}")
            hit = hit.reindex(list(SPLITS))
            row[f"{attack}_es"] = mean_if_complete(hit.es_after, len(SPLITS))
            row[f"{attack}_delta_es"] = mean_if_complete(hit.delta_es, len(SPLITS))
            row[f"{attack}_mu"] = mean_if_complete(hit.model_utility_after, len(SPLITS))
        deltas = pd.Series([row[f"{attack}_delta_es"] for attack in ATTACKS], dtype=float)
        row["avg_delta_es"] = mean_if_complete(deltas, len(ATTACKS))
        out.append(row)
    return pd.DataFrame(out)


def table1_per_split(rows: pd.DataFrame) -> pd.DataFrame:
    """Table 1 per split: per precision, split and model (gold too), the forget ES before and ΔES per attack."""
    if not len(rows):
        return pd.DataFrame()
    order = {m: i for i, m in enumerate(dict.fromkeys(rows.model))}
    wide = rows.pivot_table(index=["weights", "forget_split", "model"], columns="attack_data", values="delta_es",
                            aggfunc="first").reindex(columns=list(ATTACKS))
    wide.columns = [f"{a}_delta_es" for a in wide.columns]
    before = rows.groupby(["weights", "forget_split", "model"]).es_before.first()
    table = wide.assign(es_before=before).reset_index()
    table = table.assign(_order=table.model.map(order)).sort_values(["weights", "forget_split", "_order"])
    # an attack of fewer than attacks.FEW_STEPS optimizer steps barely trains (forget01: 40 records)
    few = rows[rows.few_steps.eq(True)]
    notes = {k: ", ".join(f"{a} ({int(n)} steps)" for a, n in zip(g.attack_data, g.optimizer_steps))
             for k, g in few.groupby(["weights", "forget_split", "model"])}
    table["few_step_attacks"] = [notes.get(k, "") for k in zip(table.weights, table.forget_split, table.model)]
    return table[["weights", "forget_split", "model", "es_before", *[f"{a}_delta_es" for a in ATTACKS],
                  "few_step_attacks"]].reset_index(drop=True)


def with_seed_repeats(chosen: pd.DataFrame, repeats: pd.DataFrame) -> pd.DataFrame:
    """``chosen`` with ``delta_es`` the list of each checkpoint's ΔES at every seed, its own and those of ``repeats``,
    and ``attack_seeds`` their number: what :func:`.stats.bootstrap_spearman` takes to carry the seed noise."""
    extra = repeats.groupby(["unlearned_run", "attack_data"]).delta_es.apply(list).to_dict()
    lists = [[d, *extra.get((u, a), [])] for d, u, a in zip(chosen.delta_es, chosen.unlearned_run, chosen.attack_data)]
    return chosen.assign(delta_es=lists, attack_seeds=[len(v) for v in lists])


def seed_means(rows: pd.DataFrame, repeats: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (one attack a row) with the forget ES, ΔES and Model Utility after it the means over its
    seeds, its own and those of ``repeats`` (the same attack at other seeds), and ``attack_seeds``."""
    key, cols = ["unlearned_run", "attack_data"], ["es_after", "delta_es", "model_utility_after"]
    both = pd.concat([rows[key + cols], repeats[key + cols]]) if len(repeats) else rows[key + cols]
    grouped = both.groupby(key)
    at = pd.MultiIndex.from_frame(rows[key])
    means = grouped[cols].agg(lambda v: v.mean(skipna=False)).reindex(at)  # a NaN seed makes the mean NaN
    counts = grouped.size().reindex(at)
    return rows.assign(**{c: means[c].to_numpy() for c in cols}, attack_seeds=counts.to_numpy())


def recovery(checkpoints: pd.DataFrame) -> pd.DataFrame:
    """``checkpoints`` (``delta_es`` a list of seeds) with ``es_after`` (their mean) and the share of what the
    unlearning removed that each seed's attack brought back, ΔES / (``target_es`` − ``es_before``), and its mean
    (``recovered``): ΔES is small wherever little was forgotten, however much came back."""
    forgotten = checkpoints.target_es - checkpoints.es_before
    shares = [[d / f for d in ds] if f >= MIN_FORGOTTEN else [float("nan")] * len(ds)
              for ds, f in zip(checkpoints.delta_es, forgotten)]
    return checkpoints.assign(es_after=checkpoints.es_before + checkpoints.delta_es.map(lambda d: sum(d) / len(d)),
                              recovered_seeds=shares, recovered=[sum(v) / len(v) for v in shares])
