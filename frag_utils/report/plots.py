"""The figures notebook 09 draws, each from one of its tables only.

Every function returns a matplotlib figure (the notebook shows it inline and
:func:`frag_utils.records.write_figure` saves it as PNG). The Agg backend is used when no other
was chosen, so nothing here opens a window; layouts are fixed (adjustText with a fixed iteration
limit), so a figure's bytes depend on its table only.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from . import analysis


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
SPLIT_SHORT = {"forget01": "f01", "forget05": "f05", "forget10": "f10"}


def _short(model: str, split: str) -> str:
    return f"{model} {SPLIT_SHORT.get(split, split)}"


def table3_panels(checkpoints: pd.DataFrame, table: pd.DataFrame, subset: str = "all") -> Any:
    """Table 3 as small multiples: a row of panels per weight precision, a panel per predictor.
    Each checkpoint (``checkpoints``: ``weights``, ``model``, ``forget_split``, the predictors, and
    ``delta_es`` as the list of its attack seeds) is a labelled marker at its mean ΔES, its seeds
    faint dots above and below; the title gives ρ over ``subset`` with its interval (``table``:
    :func:`frag_utils.report.analysis.paper_table3` rows with a ``weights`` column)."""
    plt, sns = _pyplot()
    precisions = list(dict.fromkeys(checkpoints.weights))
    predictors = analysis.PAPER_TABLE3_PREDICTORS
    models = list(dict.fromkeys(checkpoints.model))
    colour = dict(zip(models, sns.color_palette(n_colors=len(models))))
    fig, axes = plt.subplots(len(precisions), len(predictors), squeeze=False,
                             figsize=(3.1 * len(predictors), 2.8 * len(precisions)))
    for i, weights in enumerate(precisions):
        part = checkpoints[checkpoints.weights.eq(weights)]
        rho = table[table.weights.eq(weights) & table.subset.eq(subset)].set_index("predictor")
        for j, p in enumerate(predictors):
            ax = axes[i][j]
            for x, seeds, model, split in zip(part[p], part.delta_es, part.model, part.forget_split):
                seeds = np.atleast_1d(np.asarray(seeds, float))
                ax.scatter(np.full(len(seeds), x), seeds, s=7, color=colour[model], alpha=0.35, lw=0)
                ax.scatter([x], [seeds.mean()], s=26, color=colour[model], edgecolor="black", lw=0.4)
                ax.annotate(_short(model, split), (x, seeds.mean()), xytext=(3, 2), textcoords="offset points",
                            fontsize=5)
            r = rho.loc[p] if p in rho.index else None
            stats = ""
            if r is not None:
                stats = (f"\nρ {r.rho:+.2f} [{r.low:+.2f}, {r.high:+.2f}]" if np.isfinite(r.rho)
                         else "\nρ undefined (a constant)") + f", n {int(r.n)}, {int(r.attacks)} attacks"
            ax.set_title(f"{weights}: {PREDICTOR_NAMES[p]}{stats}", fontsize=7)
            ax.set_xlabel(PREDICTOR_NAMES[p], fontsize=7)
            ax.set_ylabel("ΔES (forget+retain)" if j == 0 else "", fontsize=7)
            ax.tick_params(labelsize=6)
    fig.tight_layout()
    return fig


def frontier_by_precision(rows: pd.DataFrame, threshold: float = 0.10) -> Any:
    """The robustness/utility frontier of the Table 1 grid: ΔES under the forget+retain attack
    against Model Utility before it, a panel per weight precision, colour the method, marker the
    split, each point labelled with both (``rows``: ``weights``, ``model``, ``forget_split``,
    ``model_utility_before``, ``delta_es``)."""
    from adjustText import adjust_text

    plt, sns = _pyplot()
    precisions = list(dict.fromkeys(rows.weights))
    models, splits = list(dict.fromkeys(rows.model)), list(dict.fromkeys(rows.forget_split))
    colour = dict(zip(models, sns.color_palette(n_colors=len(models))))  # one colour per model in every panel
    fig, axes = plt.subplots(1, len(precisions), figsize=(5.2 * len(precisions), 4.2), squeeze=False, sharey=True)
    for ax, weights in zip(axes[0], precisions):
        part = rows[rows.weights.eq(weights)]
        sns.scatterplot(data=part, x="model_utility_before", y="delta_es", hue="model", style="forget_split", s=55,
                        hue_order=[m for m in models if m in set(part.model)], palette=colour, style_order=splits,
                        ax=ax, legend="brief" if ax is axes[0][0] else False)
        texts = [ax.text(x, y, _short(m, s), fontsize=6) for x, y, m, s in
                 zip(part.model_utility_before, part.delta_es, part.model, part.forget_split)]
        ax.axhline(threshold, color="grey", ls=":", lw=1)
        ax.set(xlabel="Model Utility before the attack", ylabel="ΔES (forget+retain attack)",
               title=f"weights {weights}")
        fig.tight_layout()
        adjust_text(texts, x=list(part.model_utility_before), y=list(part.delta_es), ax=ax, iter_lim=1000,
                    arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5})
    handles, labels = axes[0][0].get_legend_handles_labels()  # the first panel's: every model and split
    axes[0][0].get_legend().remove()
    axes[0][-1].legend(handles, labels, bbox_to_anchor=(1.01, 1), loc="upper left", fontsize=6)
    fig.tight_layout()
    return fig


def per_layer_frag(per_layer: pd.DataFrame) -> Any:
    """FRAG's contribution per decoder block (``model``, ``block``, ``contribution_x100``), one
    panel per model."""
    _, sns = _pyplot()
    grid = sns.catplot(data=per_layer, x="block", y="contribution_x100", col="model", col_wrap=3, kind="bar",
                       height=2.2, aspect=1.6, color="C0", sharey=False)
    grid.set_titles("{col_name}", size=7)
    grid.set_axis_labels("decoder block", "FRAG contribution (x100)")
    for ax in grid.axes.flat:
        ax.tick_params(axis="x", labelsize=5)
    return grid.figure


NOISE_PANELS = {"l2_all": "global L2", "A_f_x100": "cos(F, ΔW²) x100", "A_r_x100": "cos(R, ΔW²) x100",
                "FRAG_x100": "FRAG gap (Eq. 5) x100", "es": "forget ES before the attack",
                "retain_delta_es": "ΔES (retain attack)", "forget_retain_delta_es": "ΔES (forget+retain attack)"}


def noise_controls(table: pd.DataFrame) -> Any:
    """The direction-blind controls beside FRP (``table``: ``model`` and the columns of
    :data:`NOISE_PANELS`): a panel per quantity, a bar per checkpoint, so noise at FRP's L2 reads
    against FRP in each: what the paper expects is a FRAG gap near zero and no forgetting."""
    plt, sns = _pyplot()
    fig, axes = plt.subplots(1, len(NOISE_PANELS), figsize=(2.4 * len(NOISE_PANELS), 3.2))
    colours = dict(zip(table.model, sns.color_palette(n_colors=len(table))))
    for ax, (column, title) in zip(axes, NOISE_PANELS.items()):
        values = pd.to_numeric(table[column], errors="coerce")
        ax.bar(range(len(table)), values.fillna(0), color=[colours[m] for m in table.model])
        for i, v in enumerate(values):
            ax.text(i, 0, "not yet" if pd.isna(v) else "", rotation=90, fontsize=6, ha="center", va="bottom")
        ax.set_xticks(range(len(table)), table.model, rotation=35, ha="right", fontsize=6)
        ax.set_title(title, fontsize=7)
        ax.tick_params(axis="y", labelsize=6)
    fig.tight_layout()
    return fig


def close(fig: Any) -> None:
    """Free a figure once it is saved (and shown)."""
    import matplotlib.pyplot as plt

    plt.close(fig)


def frontier_panels(models: pd.DataFrame, table: pd.DataFrame) -> Any:
    """The healthy frontier as :func:`table3_panels`: a row per healthy rule, the attacked
    checkpoints healthy by it (``models``: :mod:`frag_utils.report.frontier`'s
    ``frontier_models``), ρ over all of them in each panel's title (``table``: its
    ``frontier_table3``)."""
    label = {rule: f"healthy ({rule})" for rule in analysis.HEALTHY_RULES}
    points = pd.concat([models[models.attack_seeds.gt(0) & models[f"healthy_{rule}"]].assign(weights=name)
                        for rule, name in label.items()], ignore_index=True)
    return table3_panels(points, table.assign(weights=table.rule.map(label)))
