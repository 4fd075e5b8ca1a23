"""The figures notebook 09 draws, each from one of its tables only.

Every function returns a matplotlib figure (the notebook shows it inline and
:func:`frag_utils.records.write_figure` saves it as PNG). The Agg backend is used when no other
was chosen, so nothing here opens a window; layouts are fixed (adjustText with a fixed iteration
limit), so a figure's bytes depend on its table only.
"""
from __future__ import annotations

from typing import Any

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


def frontier(checkpoints: pd.DataFrame, profile: str, forget_split: str, threshold: float = 0.10) -> Any:
    """Robustness (ΔES under the forget+retain attack) against Model Utility before it, one point
    per attacked checkpoint, labelled; the attack's effectiveness threshold dotted."""
    from adjustText import adjust_text

    plt, sns = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    sns.scatterplot(data=checkpoints, x="model_utility_before", y="delta_es", hue="method", style="method", s=70, ax=ax)
    # one label per place: checkpoints at the same point (the collapsed pruners) are counted in one
    # label; the labels are then moved apart by adjustText (a fixed number of iterations and its own
    # fixed seed, so the figure's bytes are stable), with a line back to their point where moved
    labelled = checkpoints.assign(
        label=[m.replace("sparsity ", "").replace("frp_variant ", "") + ("" if split == forget_split else f", {split}")
               for m, split in zip(checkpoints.model, checkpoints.forget_split)],
        x=checkpoints.model_utility_before.round(3), y=checkpoints.delta_es.round(3))
    texts = [ax.text(x, y, g.label.iloc[0] if len(g) == 1 else
                     f"{len(g)} checkpoints: {', '.join(sorted(set(g.method)))}", fontsize=6)
             for (x, y), g in labelled.groupby(["x", "y"])]
    ax.axhline(threshold, color="grey", ls=":", lw=1)
    ax.legend(title="method", bbox_to_anchor=(1.01, 1), loc="upper left", fontsize=7)
    ax.set(xlabel="Model Utility before the attack", ylabel="ΔES (forget+retain attack)",
           title=f"{profile}: robustness against utility")
    fig.tight_layout()
    # after the layout is final: adjustText works in display coordinates
    adjust_text(texts, x=list(checkpoints.model_utility_before), y=list(checkpoints.delta_es), ax=ax, iter_lim=1000,
                arrowprops={"arrowstyle": "-", "color": "grey", "lw": 0.5})
    return fig


def ranking(checkpoints: pd.DataFrame, profile: str) -> Any | None:
    """Each predictor standardised, over the unlearned checkpoints ordered by increasing ΔES (a
    predictor that ranks robustness rises left to right); None with fewer than two checkpoints."""
    unlearned_only = checkpoints[checkpoints.kind.ne("gold")].sort_values("delta_es")
    if unlearned_only.forget_split.nunique() > 1:  # pooled splits: the same model on two splits is two points
        unlearned_only = unlearned_only.assign(model=unlearned_only.model + ", " + unlearned_only.forget_split)
    if len(unlearned_only) < 2:
        return None
    plt, sns = _pyplot()
    z = analysis.standardised(unlearned_only).melt(id_vars=["model", "delta_es"], value_vars=list(analysis.PREDICTORS),
                                                  var_name="predictor", value_name="z")
    order = list(dict.fromkeys(z.model))  # one evenly spaced position per checkpoint, by increasing ΔES
    z["position"] = z.model.map({m: i for i, m in enumerate(order)})
    fig, ax = plt.subplots(figsize=(9, 5))
    sns.lineplot(data=z, x="position", y="z", hue="predictor", marker="o", sort=False, ax=ax)
    delta = z.drop_duplicates("model").set_index("model").delta_es
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels([f"{m} · ΔES {delta[m]:.2f}" for m in order], rotation=60, ha="right",
                       rotation_mode="anchor", fontsize=6)
    ax.set(xlabel="checkpoint, by increasing ΔES", ylabel="standardised predictor", title=f"{profile}: ranking")
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


def es_over_epochs(curve: pd.DataFrame, profile: str) -> Any:
    """Forget ES after each attack epoch (``model``, ``epoch``, ``es``; epoch 0 is before)."""
    plt, sns = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    sns.lineplot(data=curve.sort_values("epoch"), x="epoch", y="es", hue="model", marker="o", ax=ax)
    ax.set(xlabel="attack epoch (0: before)", ylabel="forget ES", title=f"{profile}: ES over the attack")
    return fig


def close(fig: Any) -> None:
    """Free a figure once it is saved (and shown)."""
    import matplotlib.pyplot as plt

    plt.close(fig)
