import io

import matplotlib.pyplot as plt
import pandas as pd

from frag_utils.report import plots


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=60, metadata={"Software": None})
    return buf.getvalue()


def _table3():
    from frag_utils.report import analysis, tables

    rows = []
    for weights in ("bf16", "fp32"):
        for i, model in enumerate(["GradDiff", "NPO", "RMU", "SP", "FRP (P 0)"]):
            for split in ("forget10", "forget05"):
                name = f"{weights}{i}{split}"
                rows.append({"weights": weights, "model": model, "method": model.split()[0].lower(),
                             "forget_split": split, "attack_data": "forget_retain", "unlearned_run": name,
                             "delta_es": 0.1 * i + (0.05 if split == "forget05" else 0.0), "l2_all": 1.0 + i,
                             "FRAG_x100": -0.1 * i, "A_f_x100": 10.0 - i, "A_r_x100": 5.0, "run": name})
    cp = pd.DataFrame(rows)
    # bf16 with two more seeds of its first checkpoint
    repeats = cp.iloc[:1].assign(delta_es=[0.0], run="seed1")
    parts, tabs = [], []
    for weights, g in cp.groupby("weights"):
        g = tables.with_seed_repeats(g, repeats[repeats.unlearned_run.isin(g.unlearned_run)])
        parts.append(g)
        tabs.append(analysis.paper_table3(g, n_boot=50).assign(weights=weights))
    return pd.concat(parts, ignore_index=True), pd.concat(tabs, ignore_index=True)


def _legend_labels(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_table3_panels_are_two_panels_per_precision_with_rho_in_the_title_and_one_legend():
    cp, table = _table3()
    fig = plots.table3_panels(cp, table)
    assert len(fig.axes) == 2 * 2  # FRAG's gap and global L2, per precision
    first = fig.axes[0]
    row = table[table.weights.eq("bf16") & table.subset.eq("all") & table.predictor.eq("FRAG_x100")].iloc[0]
    assert first.get_title().startswith("bf16 · FRAG gap") and f"ρ {row.rho:+.2f} [{row.low:+.2f}" in first.get_title()
    # every seed a faint dot and every checkpoint a marker at its mean (11 + 10 points), no per-point text
    assert sum(len(c.get_offsets()) for c in first.collections) == 21 and not first.texts
    means = sorted(float(y) for c in first.collections if len(c.get_offsets()) < 10 for _, y in c.get_offsets())
    assert 0.05 in [round(m, 10) for m in means]
    assert set(_legend_labels(fig)) == {*cp.model, *cp.forget_split}
    again = plots.table3_panels(cp, table)
    assert _png(fig) == _png(again)
    plt.close(fig)
    plt.close(again)


def test_frontier_by_precision_is_a_panel_per_precision_with_one_colour_per_model():
    cp, _ = _table3()
    rows = cp.assign(model_utility_before=0.3, delta_es=[sum(v) / len(v) for v in cp.delta_es])
    gold = rows.iloc[:1].assign(model="gold", method="gold", run="g")  # in the bf16 panel only, as in the grid
    fig = plots.frontier_by_precision(pd.concat([gold, rows], ignore_index=True))
    assert [ax.get_title() for ax in fig.axes] == ["weights bf16", "weights fp32"]
    assert not any(ax.texts for ax in fig.axes)
    assert sum(len(c.get_offsets()) for c in fig.axes[0].collections) == 1 + len(rows[rows.weights.eq("bf16")])
    # the same model in the same colour in both panels (and in every figure), the legend naming each
    colour = {}
    for ax in fig.axes:
        for c in ax.collections:
            for face in c.get_facecolors():
                colour.setdefault(tuple(face), set()).add(id(ax))
    assert sum(len(v) == 2 for v in colour.values()) == rows.model.nunique()
    assert "gold" in _legend_labels(fig)
    plt.close(fig)


def test_per_layer_figure_splits_dense_and_pruned_models_into_two_panels():
    per_layer = pd.DataFrame({"model": ["GA", "GA", "FRP (P 0)", "FRP (P 0)"], "block": [0, 1, 0, 1],
                              "contribution_x100": [1.0, 3.0, -0.5, 0.5]})
    fig = plots.per_layer_frag(per_layer)
    assert [ax.get_title() for ax in fig.axes] == ["dense methods and gold", "pruning"]
    # each line is the model's share of the sum of its blocks' absolute contributions
    assert list(fig.axes[0].lines[0].get_ydata()) == [0.25, 0.75]
    assert list(fig.axes[1].lines[0].get_ydata()) == [-0.5, 0.5]
    plt.close(fig)


def test_a_model_has_one_colour_in_every_figure():
    _, sns = plots._pyplot()
    a, b = plots.colours(sns, ["SP", "GA", "new"]), plots.colours(sns, ["GA", "WGA"])
    assert a["GA"] == b["GA"] and list(a) == ["GA", "SP", "new"] and a["new"] not in (a["GA"], a["SP"], b["WGA"])
