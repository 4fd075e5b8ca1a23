import io

import pandas as pd

from frag_utils import plots


def _checkpoints():
    return pd.DataFrame({
        "model": ["gold", "ga (lr 5e-05)", "npo (lr 5e-05)", "sp (sparsity 0.01)", "frp (sparsity 0.03)"],
        "method": ["gold", "ga", "npo", "sp", "frp"], "kind": ["gold", "method", "method", "method", "method"],
        "forget_split": ["forget10"] * 4 + ["forget05"], "model_utility_before": [0.27, 0.30, 0.28, 0.1, 0.1],
        "delta_es": [0.05, 0.4, 0.3, 0.2, 0.2], "FRAG_x100": [0.0, 0.05, 0.1, 4.0, 7.6],
        "A_f_x100": [1.0, 50.0, 40.0, 17.0, 20.0], "A_r_x100": [1.0, 50.0, 39.0, 12.0, 12.4],
        "l2_all": [25.0, 3.9, 3.5, 173.0, 367.0]})


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=60, metadata={"Software": None})
    return buf.getvalue()


def test_frontier_has_one_point_per_checkpoint_and_is_drawn_the_same_every_time():
    cp = _checkpoints()
    fig = plots.frontier(cp, "smol", "forget10")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "Model Utility before the attack" and "ΔES" in ax.get_ylabel()
    points = sum(len(c.get_offsets()) for c in ax.collections)
    assert points == len(cp)
    # two checkpoints at one place share one label; the other split is named in its label
    labels = [t.get_text() for t in ax.texts]
    assert "2 checkpoints: frp, sp" in labels and len(labels) == 4
    again = plots.frontier(cp, "smol", "forget10")
    assert _png(fig) == _png(again)
    plots.close(fig)
    plots.close(again)


def test_ranking_orders_unlearned_checkpoints_by_delta_es_and_leaves_out_gold():
    fig = plots.ranking(_checkpoints(), "smol")
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(ticks) == 4 and not any(t.startswith("gold") for t in ticks)
    deltas = [float(t.rsplit("ΔES ", 1)[1]) for t in ticks]
    assert deltas == sorted(deltas)
    assert plots.ranking(_checkpoints().iloc[:2], "smol") is None  # one unlearned checkpoint ranks nothing
    plots.close(fig)


def test_per_layer_and_horizon_figures_have_a_panel_per_model_and_a_line_per_model():
    per_layer = pd.DataFrame({"model": ["a", "a", "b", "b"], "block": [0, 1, 0, 1],
                              "contribution_x100": [1.0, 2.0, -0.5, 0.5]})
    fig = plots.per_layer_frag(per_layer)
    assert len(fig.axes) == 2
    curve = pd.DataFrame({"model": ["a", "a", "b", "b"], "epoch": [0, 1, 0, 1], "es": [0.2, 0.5, 0.3, 0.3]})
    fig2 = plots.es_over_epochs(curve, "smol")
    assert len(fig2.axes[0].get_lines()) >= 2
    plots.close(fig)
    plots.close(fig2)
