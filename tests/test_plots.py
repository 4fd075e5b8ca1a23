import io

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


def test_table3_panels_are_a_panel_per_predictor_and_precision_with_rho_in_the_title():
    cp, table = _table3()
    fig = plots.table3_panels(cp, table)
    assert len(fig.axes) == 2 * 4
    first = fig.axes[0]
    row = table[table.weights.eq("bf16") & table.subset.eq("all") & table.predictor.eq("l2_all")].iloc[0]
    assert first.get_title().startswith("bf16: global L2") and f"ρ {row.rho:+.2f}" in first.get_title()
    assert "11 attacks" in first.get_title() and "n 10" in first.get_title()  # 10 checkpoints, one of them 2 seeds
    # every seed a faint dot and every checkpoint a marker at its mean: 11 + 10 points, 10 labels
    assert sum(len(c.get_offsets()) for c in first.collections) == 21 and len(first.texts) == 10
    means = sorted(float(c.get_offsets()[0][1]) for c in first.collections[1::2])
    assert means[0] == 0.0 and 0.05 in [round(m, 10) for m in means]
    again = plots.table3_panels(cp, table)
    assert _png(fig) == _png(again)
    plots.close(fig)
    plots.close(again)


def test_frontier_by_precision_labels_each_point_with_method_and_split():
    cp, _ = _table3()
    rows = cp.assign(model_utility_before=0.3, delta_es=[sum(v) / len(v) for v in cp.delta_es])
    fig = plots.frontier_by_precision(rows)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["weights bf16", "weights fp32"]
    short = {"forget10": "f10", "forget05": "f05"}
    bf16 = rows[rows.weights.eq("bf16")]
    assert sorted(t.get_text() for t in fig.axes[0].texts) == sorted(
        f"{m} {short[s]}" for m, s in zip(bf16.model, bf16.forget_split))
    assert sum(len(c.get_offsets()) for c in fig.axes[0].collections) == len(bf16)
    plots.close(fig)


def test_per_layer_figure_has_a_panel_per_model():
    per_layer = pd.DataFrame({"model": ["a", "a", "b", "b"], "block": [0, 1, 0, 1],
                              "contribution_x100": [1.0, 2.0, -0.5, 0.5]})
    fig = plots.per_layer_frag(per_layer)
    assert len(fig.axes) == 2
    plots.close(fig)


def test_frontier_by_precision_keeps_one_colour_per_model_across_panels():
    cp, _ = _table3()
    rows = cp.assign(model_utility_before=0.3, delta_es=[sum(v) / len(v) for v in cp.delta_es])
    gold = rows.iloc[:1].assign(model="gold", method="gold", run="g")  # in the bf16 panel only, as in the grid
    fig = plots.frontier_by_precision(pd.concat([gold, rows], ignore_index=True))
    colours = []
    for ax in fig.axes[:2]:  # the points are drawn and labelled in the rows' order
        points = next(c for c in ax.collections if len(c.get_offsets()) == len(ax.texts))
        colours.append({t.get_text().rsplit(" ", 1)[0]: tuple(points.get_facecolors()[i])
                        for i, t in enumerate(ax.texts)})
    # the same model is drawn in the same colour in both panels, and the legend names the gold model
    assert all(colours[0][m] == colours[1][m] for m in colours[1])
    assert "gold" in [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    plots.close(fig)
