"""Notebook 09's figures, each of one of its tables only, with fixed layouts (a figure's bytes depend on its table
alone) and Agg unless another backend was chosen (nothing opens a window); each has one legend, no per-point text,
at most 2 x 2 panels, a colour per model shared by all, and a title that says what to look at."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .analysis import AUTHORS_PREDICTOR
from .book import interval


def _pyplot():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="paper")
    return plt, sns


PREDICTOR_NAMES = {"l2_all": "global L2", "FRAG_x100": "FRAG gap (Eq. 5) x100", "A_f_x100": "cos(F, ΔW²) x100",
                   "A_r_x100": "cos(R, ΔW²) x100"}
# one colour per model in every figure, in this order (tab10, then tab20's light shades)
MODEL_ORDER = ("gold", "GA", "GradDiff", "NPO", "RMU", "SP", "FRP (P 0)", "FRP (P 0.15)", "SimNPO", "IdkDPO",
               "UNDIAL", "WGA")
SPLIT_MARKERS = {"forget10": "o", "forget05": "s", "forget01": "^"}
PANEL_PREDICTORS = ("FRAG_x100", "l2_all")  # the paper's predictor against the distance it says is not enough
LEGEND_AT = 0.85  # the legend sits right of the panels, from this fraction of the figure's width
NOISE_PANELS = {"FRAG_x100": "FRAG gap (Eq. 5) x100", "l2_all": "global L2", "es": "forget ES before the attack",
                "forget_retain_delta_es": "ΔES (forget+retain attack)"}


def colours(sns: Any, labels: Any) -> dict:
    """A colour per model label, the same in every figure (:data:`MODEL_ORDER`; others after it)."""
    palette = sns.color_palette("tab10", 10) + sns.color_palette("tab20", 20)[1::2]
    known = {m: palette[i] for i, m in enumerate(MODEL_ORDER)}
    extra = iter(palette[len(MODEL_ORDER):] * 2)
    labels = list(dict.fromkeys(labels))
    return {m: known.get(m) or next(extra) for m in [*[m for m in MODEL_ORDER if m in labels],
                                                    *[m for m in labels if m not in known]]}


def _mean(seeds: Any) -> float:
    return float(np.mean(np.atleast_1d(np.asarray(seeds, float))))


def _finish(fig: Any, colour: dict, splits: Any, title: str) -> Any:
    """The figure with its title and one legend right of its panels (a colour per model, a marker per split)."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, marker="o", lw=1, markeredgecolor="black", markeredgewidth=0.4, label=m)
               for m, c in colour.items()]
    handles += [Line2D([], [], color="grey", marker=SPLIT_MARKERS.get(s, "o"), lw=0, label=s)
                for s in dict.fromkeys(splits)]
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(LEGEND_AT, 0.5), fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=8.5)
    fig.tight_layout(rect=(0, 0, LEGEND_AT, 1))
    return fig


def _points(ax: Any, pts: pd.DataFrame, x: str, y: str, colour: dict, join: str | None) -> None:
    """A marker per checkpoint; with ``join``, one model's checkpoints on a split joined in that column's order."""
    for (label, split), g in pts.groupby(["model", "forget_split"], sort=False):
        if join and len(g) > 1:
            g = g.sort_values(join)
            ax.plot(g[x], g[y], color=colour[label], lw=1.0, alpha=0.8, zorder=1)
        ax.scatter(g[x], g[y], color=colour[label], marker=SPLIT_MARKERS.get(split, "o"), s=30, edgecolor="black",
                   lw=0.4, zorder=2)


def _x_axis(ax: Any, values: pd.Series, name: str) -> None:
    """Label the x axis, in log scale where positive values span over 30x (dense updates are 100x smaller)."""
    if len(values) and (values > 0).all() and values.max() / values.min() > 30:
        ax.set_xscale("log")
        name += " (log scale)"
    ax.set_xlabel(name, fontsize=8)
    ax.tick_params(labelsize=7)


def _rho(name: str, r: Any, within: bool = False) -> str:
    text = f"{name}: ρ {interval(r.rho, r.low, r.high)}" if np.isfinite(r.rho) else f"{name}: ρ undefined"
    if within and np.isfinite(r.get("within_rho", np.nan)):
        text += f"\nwithin a method ρ {interval(r.within_rho, r.within_low, r.within_high)}"
    return text


def frontier_panels(models: pd.DataFrame, table: pd.DataFrame, rule: str = "paper") -> Any:
    """The README's figure: mean ΔES over seeds against FRAG's gap and global L2 over the healthy checkpoints
    by ``rule``, a method's strengths joined; each title gives the pooled and the within-method ρ with intervals."""
    plt, sns = _pyplot()
    pts = models[models.attack_seeds.gt(0) & models[f"healthy_{rule}"]]
    pts = pts.assign(mean_delta=pts.delta_es.map(_mean))
    colour = colours(sns, pts.model)
    rho = table[table.rule.eq(rule) & table.subset.eq("all")].set_index("predictor")
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.6), sharey=True)
    for ax, p in zip(axes, PANEL_PREDICTORS):
        _points(ax, pts, p, "mean_delta", colour, join="strength")
        ax.set_title(_rho(PREDICTOR_NAMES[p], rho.loc[p], within=True), fontsize=8)
        _x_axis(ax, pts[p], PREDICTOR_NAMES[p])
    axes[0].set_ylabel("ΔES, forget+retain attack\n(mean of its seeds)", fontsize=8)
    r = rho.loc[PANEL_PREDICTORS[0]]
    return _finish(fig, colour, pts.forget_split, f"Healthy frontier, {int(r.n)} checkpoints of {int(r.methods)} "
                   "methods: does the predictor rank ΔES? Lines join one method's strengths")


def table3_panels(checkpoints: pd.DataFrame, table: pd.DataFrame, subset: str = "all") -> Any:
    """The paper's Table 3 checkpoints per weight precision: ΔES against FRAG's gap and global L2, a marker at
    each checkpoint's mean with its seeds as faint dots, ρ over ``subset`` (``table``: ``paper_table3``) in titles."""
    plt, sns = _pyplot()
    pts = checkpoints.assign(mean_delta=checkpoints.delta_es.map(_mean))
    precisions = list(dict.fromkeys(pts.weights))
    colour = colours(sns, pts.model)
    fig, axes = plt.subplots(len(precisions), 2, figsize=(8.0, 3.1 * len(precisions)), squeeze=False)
    for row, weights in zip(axes, precisions):
        part = pts[pts.weights.eq(weights)]
        rho = table[table.weights.eq(weights) & table.subset.eq(subset)].set_index("predictor")
        for ax, p in zip(row, PANEL_PREDICTORS):
            for x, seeds, label in zip(part[p], part.delta_es, part.model):
                seeds = np.atleast_1d(np.asarray(seeds, float))
                ax.scatter(np.full(len(seeds), x), seeds, s=7, color=colour[label], alpha=0.35, lw=0)
            _points(ax, part, p, "mean_delta", colour, join=None)
            ax.set_title(f"{weights} · {_rho(PREDICTOR_NAMES[p], rho.loc[p])}", fontsize=8)
            _x_axis(ax, part[p], PREDICTOR_NAMES[p])
        row[0].set_ylabel("ΔES, forget+retain attack", fontsize=8)
    n = int(table[table.subset.eq(subset)].n.max()) if len(table) else 0
    return _finish(fig, colour, pts.forget_split, f"The paper's Table 3 checkpoints ({n} per precision): ΔES "
                   "against each predictor; faint dots are the attack seeds")


def frontier_by_precision(rows: pd.DataFrame, threshold: float = 0.10) -> Any:
    """Table 1's grid as a robustness/utility frontier: ΔES under the forget+retain attack against Model
    Utility before it, a panel per weight precision, colour the model, marker the split."""
    plt, sns = _pyplot()
    precisions = list(dict.fromkeys(rows.weights))
    colour = colours(sns, rows.model)
    fig, axes = plt.subplots(1, len(precisions), figsize=(4.0 * len(precisions) + 1.4, 3.6), squeeze=False, sharey=True)
    for ax, weights in zip(axes[0], precisions):
        _points(ax, rows[rows.weights.eq(weights)], "model_utility_before", "delta_es", colour, join=None)
        ax.axhline(threshold, color="grey", ls=":", lw=1)
        ax.set_title(f"weights {weights}", fontsize=8)
        _x_axis(ax, pd.Series(dtype=float), "Model Utility before the attack")
    axes[0][0].set_ylabel("ΔES, forget+retain attack", fontsize=8)
    return _finish(fig, colour, rows.forget_split,
                   "Table 1's models: robust (low ΔES) and useful (high utility) sit bottom right")


def per_layer_frag(per_layer: pd.DataFrame) -> Any:
    """Where FRAG's gap comes from: a line per model, its blocks' contributions as shares of their absolute sum,
    the dense methods and the pruners in two panels (their scales differ a hundredfold)."""
    plt, sns = _pyplot()
    colour = colours(sns, per_layer.model)
    total = per_layer.groupby("model").contribution_x100.transform(lambda v: v.abs().sum())
    data = per_layer.assign(share=per_layer.contribution_x100 / total)
    pruned = data.model.str.startswith(("FRP", "SP"))
    groups = [(title, part) for title, part in (("dense methods and gold", data[~pruned]), ("pruning", data[pruned]))
              if len(part)]
    fig, axes = plt.subplots(1, len(groups), figsize=(4.0 * len(groups) + 1.4, 3.4), squeeze=False, sharey=True)
    for ax, (title, part) in zip(axes[0], groups):
        for label, g in part.groupby("model", sort=False):
            g = g.sort_values("block")
            ax.plot(g.block, g.share, color=colour[label], lw=1.2, marker="o", ms=2.5)
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_title(title, fontsize=8)
        _x_axis(ax, pd.Series(dtype=float), "decoder block")
    axes[0][0].set_ylabel("share of the model's FRAG gap", fontsize=8)
    return _finish(fig, colour, [], "Where each model's FRAG gap comes from, block by block")


def noise_controls(table: pd.DataFrame) -> Any:
    """The direction-blind controls beside FRP: a panel per quantity of :data:`NOISE_PANELS`, a bar per
    checkpoint with its value, so noise at FRP's L2 reads against FRP in each."""
    plt, sns = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(7.0, 5.0))
    colour = dict(zip(table.model, sns.color_palette("tab10", n_colors=len(table))))
    for ax, (column, title) in zip(axes.flat, NOISE_PANELS.items()):
        values = pd.to_numeric(table[column], errors="coerce")
        ax.barh(range(len(table)), values.fillna(0), color=[colour[m] for m in table.model])
        for i, v in enumerate(values):
            ax.text(0, i, " not run" if pd.isna(v) else f" {v:.3g}", va="center", fontsize=7)
        ax.set_yticks(range(len(table)), table.model, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle("FRP beside isotropic noise at its L2 and at half of it: compare FRAG's gap with what each forgot "
                 "and recovered", fontsize=8.5)
    fig.tight_layout()
    return fig



FAMILY_COLOURS = {"weight space": 0, "evaluation": 1, "design": 2, "measured": 3, "probe": 4}


def predictor_forest(ranks: pd.DataFrame, authors: pd.DataFrame, split: str = "both",
                     outcomes: tuple[str, ...] = ("delta_es", "es_after")) -> Any:
    """Each signal's pooled ρ with its interval over ``split``, a panel per outcome, a colour per family; on the ΔES
    panel the authors' 1B and 3B ρ (their 15 Table 3 checkpoints each; no interval) where their rows allow it."""
    plt, sns = _pyplot()
    t = ranks[ranks.split.eq(split)]
    order = list(dict.fromkeys(t.signal))
    words = dict(zip(t.signal, t.words))
    palette = sns.color_palette("tab10", 10)
    fig, axes = plt.subplots(1, len(outcomes), figsize=(4.1 * len(outcomes) + 1.6, 0.32 * len(order) + 1.3),
                             sharey=True, squeeze=False)
    names = {"delta_es": "ΔES", "es_after": "forget ES after", "recovered": "share recovered"}
    theirs = {**AUTHORS_PREDICTOR, "es": "es_before", "pruning": "pruning"}  # our signal -> the authors' column
    at = authors[authors.subset.eq("all")].set_index(["scale", "predictor"]).rho if len(authors) else pd.Series()
    for ax, outcome in zip(axes[0], outcomes):
        part = t[t.outcome.eq(outcome)].set_index("signal").reindex(order)
        y = np.arange(len(order))[::-1]
        for yi, (s, r) in zip(y, part.iterrows()):
            c = palette[FAMILY_COLOURS.get(r.family, 5)]
            ax.plot([r.low, r.high], [yi, yi], color=c, lw=1.6)
            ax.plot([r.rho], [yi], "o", color=c, markeredgecolor="black", markeredgewidth=0.4)
            if outcome == "delta_es":
                for scale, marker in (("1B", "D"), ("3B", "^")):
                    v = at.get((scale, theirs.get(s, "")), np.nan)
                    if np.isfinite(v):
                        ax.plot([v], [yi], marker, color="black", fillstyle="none", ms=5)
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xlim(-1.05, 1.05)
        ax.set_xlabel(f"Spearman ρ with {names.get(outcome, outcome)}")
        counts = t.groupby("signal").n.max()  # a signal recorded on fewer checkpoints says on how many
        ax.set_yticks(y, [words[s] + (f" (n = {counts[s]})" if counts[s] < counts.max() else "") for s in order])
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=palette[i], marker="o", lw=1.6, label=f) for f, i in FAMILY_COLOURS.items()
               if f in set(t.family)]
    handles += [Line2D([], [], color="black", marker=m, lw=0, fillstyle="none",
                       label=f"authors' Llama-3.2-{s},\nΔES, n = 15, no interval")
                for s, m in (("1B", "D"), ("3B", "^"))]
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(0.83, 0.5), fontsize=7, frameon=False)
    n, methods = int(t.n.max()), int(t.methods.max())
    fig.suptitle(f"Which intervals clear 0? Each signal's pooled ρ with its 95 % interval, {n} healthy checkpoints "
                 f"of {methods} methods", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.82, 0.95))
    return fig


def placed(df: pd.DataFrame, here: pd.Series, signals: Any) -> Any:
    """ΔES (seed mean) against each of ``signals`` over notebook 08's checkpoints, a colour per method, the checkpoint
    ``here`` circled."""
    plt, sns = _pyplot()
    colour = colours(sns, df.model.unique())
    fig, axes = plt.subplots(1, len(signals), figsize=(4.2 * len(signals), 3.4), sharey=True)
    for ax, signal in zip(np.atleast_1d(axes), signals):
        for model, part in df.groupby("model"):
            ax.scatter(part[signal], part.delta_es, s=18, color=colour[model], label=model, alpha=0.8)
        ax.scatter(df.loc[here, signal], df.loc[here, "delta_es"], s=160, facecolors="none", edgecolors="black",
                   linewidths=1.5, label="this checkpoint")
        ax.set_xlabel(PREDICTOR_NAMES.get(signal, signal))
    np.atleast_1d(axes)[0].set_ylabel("ΔES (mean of the attack seeds)")
    handles, labels = np.atleast_1d(axes)[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    fig.tight_layout()
    return fig
