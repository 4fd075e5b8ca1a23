import math

import pytest
import torch
from torch import nn

from frag_utils import pruning


def _layer(d_out=6, d_in=20, seed=0):
    gen = torch.Generator().manual_seed(seed)
    m = nn.Linear(d_in, d_out, bias=False)
    with torch.no_grad():
        m.weight.copy_(torch.randn(d_out, d_in, generator=gen))
    xf, xr = torch.rand(d_in, generator=gen) + 0.1, torch.rand(d_in, generator=gen) + 0.1
    return m, xf, xr


def test_row_ranks_by_direct_sort():
    x = torch.tensor([[0.3, -1.0, 2.0, 0.0]])
    assert pruning.row_ranks(x).tolist() == [[2, 0, 3, 1]]


def test_frp_zeroes_exactly_the_top_of_s_in_each_row():
    m, xf, xr = _layer()
    w = m.weight.detach().clone()
    rho, beta, lam = 0.15, 0.05, 0.3
    pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=rho, beta=beta, lam=lam)
    k = math.floor(rho * 20)
    for i in range(w.shape[0]):  # the slow way: rank each row by hand, take the k largest S
        a = w[i].abs()
        f, r = a * xf / (xr + 1e-6), a * xr / (xf + 1e-6)
        rank = lambda v: [sorted(v.tolist()).index(x) for x in v.tolist()]  # noqa: E731 (no ties here)
        s = [rank(f)[j] - beta * rank(r)[j] + lam * rank(a)[j] for j in range(20)]
        top = set(sorted(range(20), key=lambda j: -s[j])[:k])
        zeroed = {j for j in range(20) if m.weight[i, j] == 0}
        assert zeroed == top, i
        assert torch.equal(m.weight[i, [j for j in range(20) if j not in top]], w[i, [j for j in range(20) if j not in top]])


def test_released_variant_never_prunes_vetoed_entries():
    m, xf, xr = _layer(seed=1)
    with torch.no_grad():  # the most forget-leaning channel gets huge weights: top ratio, yet vetoed
        m.weight[:, int((xf / xr).argmax())] *= 1000
    w = m.weight.detach().clone()
    pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=0.3, beta=0.0, lam=0.0, variant="released", veto=0.25)
    ratio = (xf / (xr + 1e-6)).tolist()
    for i in range(w.shape[0]):  # the slow way: veto the top 5 by |W| x_r/x_f, prune the top 6 ratios left
        veto_score = (w[i].abs() * xr / (xf + 1e-6)).tolist()
        vetoed = set(sorted(range(20), key=lambda j: -veto_score[j])[:5])
        allowed = [j for j in range(20) if j not in vetoed]
        expected = set(sorted(allowed, key=lambda j: -ratio[j])[:6])
        assert {j for j in range(20) if m.weight[i, j] == 0} == expected, i
    # without the veto the same rows would lose some vetoed entries: the veto really binds
    free = nn.Linear(20, 6, bias=False)
    with torch.no_grad():
        free.weight.copy_(w)
    pruning.frp_prune({"l": free}, {"l": xf}, {"l": xr}, rho=0.3, beta=0.0, lam=0.0, variant="released", veto=0.0)
    assert not torch.equal(free.weight == 0, m.weight == 0)


def test_random_prune_budget_and_noise_l2():
    m, _, _ = _layer(d_out=50, d_in=40)
    rep = pruning.random_prune({"l": m}, 0.1, seed=3)
    assert ((m.weight == 0).sum(dim=1) == 4).all() and rep["l"]["row_sparsity"] == 0.1
    big = nn.Linear(400, 300, bias=False)
    before = big.weight.detach().clone()
    sigma = pruning.add_isotropic_noise({"l": big}, target_l2=5.0, seed=0)
    assert float((big.weight - before).norm()) == pytest.approx(5.0, rel=0.01)
    assert sigma == pytest.approx(5.0 / math.sqrt(400 * 300))


def test_bad_prune_settings():
    m, xf, xr = _layer()
    with pytest.raises(ValueError, match="rho"):
        pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=0.0)
    with pytest.raises(ValueError, match="variant"):
        pruning.frp_scores(m.weight, xf, xr, 0.05, 0.0, variant="other")
