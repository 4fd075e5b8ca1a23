import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from frag_utils import calibration, data, models, pruning
from frag_utils.calibration import CalibConfig
from frag_utils.prompts import collate


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
    pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=rho, beta=beta, lam=lam, variant="eq6")
    k = math.floor(rho * 20)
    for i in range(w.shape[0]):  # the slow way: rank each row by hand, take the k largest S
        a = w[i].abs()
        f, r = a * xf / (xr + 1e-6), a * xr / (xf + 1e-6)
        rank = lambda v: [sorted(v.tolist()).index(x) for x in v.tolist()]  # noqa: E731 (no ties here)
        s = [rank(f)[j] - beta * rank(r)[j] + lam * rank(a)[j] for j in range(20)]
        top = set(sorted(range(20), key=lambda j: -s[j])[:k])
        zeroed = {j for j in range(20) if m.weight[i, j] == 0}
        assert zeroed == top, i
        kept = [j for j in range(20) if j not in top]
        assert torch.equal(m.weight[i, kept], w[i, kept])


@pytest.mark.parametrize("rule", pruning.FRP_ABLATION_RULES)
def test_ablation_rules_zero_the_top_of_their_own_score(rule):
    m, xf, xr = _layer(seed=4)
    w = m.weight.detach().clone()
    pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=0.2, variant=rule)
    score = {"magnitude": w.abs(), "magnitude_xf": w.abs() * xf,
             "magnitude_ratio": w.abs() * xf / (xr + 1e-6)}[rule]  # written out: |W|, |W| x_f, F
    for i in range(w.shape[0]):
        top = set(sorted(range(20), key=lambda j: -float(score[i, j]))[:4])
        assert {j for j in range(20) if m.weight[i, j] == 0} == top, (rule, i)


def test_released_variant_never_prunes_vetoed_entries():
    m, xf, xr = _layer(seed=1)
    with torch.no_grad():  # the most forget-leaning channel gets huge weights: top ratio, yet vetoed
        m.weight[:, int((xf / xr).argmax())] *= 1000
    w = m.weight.detach().clone()
    pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=0.3, beta=0.0, lam=0.0, variant="released", veto=0.25)
    ratio = (xf.float() / (xr.float() + 1e-6)).tolist()
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
    assert float((big.weight.detach() - before).norm()) == pytest.approx(5.0, rel=0.01)
    assert sigma == pytest.approx(5.0 / math.sqrt(400 * 300))


def test_bad_prune_settings():
    m, xf, xr = _layer()
    with pytest.raises(ValueError, match="rho"):
        pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=0.0)
    with pytest.raises(ValueError, match="variant"):
        pruning.frp_scores(m.weight, xf, xr, 0.05, 0.0, variant="other")
    with pytest.raises(ValueError, match="has none"):  # the veto belongs to the released scoring only
        pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=0.1, variant="eq6", veto=0.1)


def test_defaults_are_the_authors_released_frp():
    """frp/prune.py rank_combo as scripts/frp_tofu.sh runs it: lambda 0.05, plain FRP (P = 0), 3 %."""
    import inspect

    sig = inspect.signature(pruning.frp_prune)
    assert (sig.parameters["variant"].default, sig.parameters["lam"].default, sig.parameters["veto"].default,
            sig.parameters["rho"].default) == ("released", 0.05, 0.0, 0.03)
    sig = inspect.signature(pruning.prune_checkpoint)
    assert (sig.parameters["lam"].default, sig.parameters["veto"].default) == (0.05, 0.0)
    with pytest.raises(pruning.PruningError, match="Unknown FRP variant 'paper'"):  # Eq. 6's old name
        pruning.frp_prune({}, {}, {}, variant="paper")


# --- the authors' rank_combo, computed independently -------------------------------------------


def rank_combo_by_hand(w, xf, xr, rho, lam, veto, eps=1e-6):
    """The released FRP mask, one row at a time in pure Python over float32 values: ranks by
    (value, position), S = rank(x_f/(x_r+eps)) + lam * rank(|W|) in float32, the top floor(P d_in)
    entries by |W| x_r/(x_f+eps) vetoed, then the top floor(rho d_in) of S among the rest, ties
    to the lower position. Returns the mask [d_out, d_in] (bool) and S."""
    f32 = np.float32
    a = np.abs(w.detach().float().numpy())
    xf, xr = xf.float().numpy(), xr.float().numpy()
    d_out, d_in = a.shape
    ratio = [f32(xf[j]) / (f32(xr[j]) + f32(eps)) for j in range(d_in)]
    protect = [f32(xr[j]) / (f32(xf[j]) + f32(eps)) for j in range(d_in)]
    k, n_veto = math.floor(rho * d_in), math.floor(veto * d_in)
    mask, scores = np.zeros(a.shape, dtype=bool), np.zeros(a.shape, dtype=np.float32)

    def ranks(values):
        order = sorted(range(d_in), key=lambda j: (values[j], j))
        out = [0] * d_in
        for position, j in enumerate(order):
            out[j] = position
        return out

    ratio_rank = ranks(ratio)
    for i in range(d_out):
        w_rank = ranks([a[i, j] for j in range(d_in)])
        s = [f32(ratio_rank[j]) + f32(lam) * f32(w_rank[j]) for j in range(d_in)]
        p = [f32(a[i, j]) * protect[j] for j in range(d_in)]
        vetoed = set(sorted(range(d_in), key=lambda j: (-p[j], j))[:n_veto])
        chosen = sorted((j for j in range(d_in) if j not in vetoed), key=lambda j: (-s[j], j))[:k]
        mask[i, chosen] = True
        scores[i] = s
    return mask, scores


@pytest.mark.parametrize("bf16_weights", [False, True])
@pytest.mark.parametrize("rho,lam,veto", [(0.03, 0.05, 0.0), (0.03, 0.05, 0.15), (0.1, 0.0, 0.05), (0.05, 0.5, 0.3)])
def test_released_frp_is_rank_combo_with_the_veto(rho, lam, veto, bf16_weights):
    """Against an independent slow implementation, on random layers; bf16 weights tie often in |W|."""
    gen = torch.Generator().manual_seed(int(rho * 1000 + lam * 100 + veto * 10))
    d_in = 192
    m = nn.Linear(d_in, 24, bias=False)
    with torch.no_grad():
        w = torch.randn(24, d_in, generator=gen) * 0.05
        m.weight.copy_(w.to(torch.bfloat16).float() if bf16_weights else w)
    xf, xr = torch.rand(d_in, generator=gen) + 0.05, torch.rand(d_in, generator=gen) + 0.05
    w0 = m.weight.detach().clone()
    expected, s_hand = rank_combo_by_hand(w0, xf, xr, rho, lam, veto)
    s, _ = pruning.frp_scores(w0, xf, xr, beta=0.05, lam=lam, variant="released")
    assert s.dtype == torch.float32 and np.array_equal(s.numpy(), s_hand)
    rep = pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=rho, lam=lam, variant="released", veto=veto)
    got = (m.weight == 0).numpy()
    assert np.array_equal(got, expected)
    assert rep["l"]["distinct_row_masks"] == len({tuple(r) for r in expected.tolist()})
    if bf16_weights:
        assert len(set(w0.abs()[0].tolist())) < d_in  # ties in |W| were there to break


def test_released_frp_matches_the_authors_torch_ops_where_order_is_defined():
    """The authors' rank_combo, written with their torch calls (argsort().argsort(), topk), on fp32
    weights (no ties in |W|): the same scores, the same vetoed entries, and the same multiset of
    pruned scores in every row (their topk leaves the order among equal S unspecified)."""
    gen = torch.Generator().manual_seed(7)
    d_in, rho, lam, p = 576, 0.03, 0.05, 0.15
    m = nn.Linear(d_in, 64, bias=False)
    with torch.no_grad():
        m.weight.copy_(torch.randn(64, d_in, generator=gen))
    fn, rn = torch.rand(d_in, generator=gen) + 0.05, torch.rand(d_in, generator=gen) + 0.05
    W = m.weight.detach().float().abs()
    act_ranks = (fn / (rn + 1e-6)).unsqueeze(0).expand_as(W).argsort(dim=1).argsort(dim=1).float()
    s_theirs = act_ranks + lam * W.argsort(dim=1).argsort(dim=1).float()
    pidx = torch.topk(W * (rn / (fn + 1e-6)).unsqueeze(0), int(p * d_in), dim=1).indices
    protected = torch.zeros_like(s_theirs, dtype=torch.bool).scatter_(1, pidx, True)
    masked = s_theirs.clone()
    masked[protected] = float("-inf")
    theirs = torch.zeros_like(masked, dtype=torch.bool).scatter_(1, torch.topk(masked, int(rho * d_in), dim=1).indices,
                                                                 True)

    s_ours, _ = pruning.frp_scores(m.weight.detach(), fn, rn, beta=0.05, lam=lam, variant="released")
    assert torch.equal(s_ours, s_theirs)
    pruning.frp_prune({"l": m}, {"l": fn}, {"l": rn}, rho=rho, lam=lam, variant="released", veto=p)
    ours = m.weight == 0
    assert not (ours & protected).any()
    for i in range(64):
        assert sorted(s_theirs[i][ours[i]].tolist()) == sorted(s_theirs[i][theirs[i]].tolist())


def test_without_the_magnitude_rank_released_frp_prunes_columns():
    """lambda = 0 (what every FRP record before 2026-11-25 ran): the score is the same in every row,
    so every row prunes the same input channels; lambda 0.05 does not."""
    gen = torch.Generator().manual_seed(3)
    d_in = 576
    xf, xr = torch.rand(d_in, generator=gen) + 0.05, torch.rand(d_in, generator=gen) + 0.05
    w = torch.randn(48, d_in, generator=gen)
    counts = {}
    for lam in (0.0, 0.05):
        m = nn.Linear(d_in, 48, bias=False)
        with torch.no_grad():
            m.weight.copy_(w)
        report = pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=0.03, lam=lam, variant="released")
        counts[lam] = report["l"]["distinct_row_masks"]
    assert counts[0.0] == 1 and counts[0.05] > 1


# --- FRP on the tiny model, against a direct per-row computation -------------------------------


def frp_by_hand(w, xf, xr, rho, beta, lam, variant="eq6", veto=0.0, eps=1e-6):
    """Per-row FRP scores S, vetoed entries and budget k, computed directly with NumPy sorts.

    Returns ``(S [d_out, d_in], vetoed [d_out, d_in] bool, k)``.
    """
    w, xf, xr = (t.detach().double().cpu().numpy() for t in (w, xf, xr))
    a = np.abs(w)
    rank = lambda v: np.argsort(np.argsort(v, axis=1, kind="stable"), axis=1, kind="stable")  # noqa: E731
    f, r = a * (xf / (xr + eps)), a * (xr / (xf + eps))
    vetoed = np.zeros(w.shape, dtype=bool)
    if variant == "eq6":
        s = rank(f) - beta * rank(r) + lam * rank(a)
    else:
        s = rank(np.broadcast_to(xf / (xr + eps), w.shape)) + lam * rank(a)
        n_veto = math.floor(veto * w.shape[1])
        np.put_along_axis(vetoed, np.argsort(-r, axis=1, kind="stable")[:, :n_veto], True, axis=1)
    return s, vetoed, math.floor(rho * w.shape[1])


def check_frp_rows(before, after, xf, xr, rho, beta, lam, variant="eq6", veto=0.0):
    """Every row lost exactly k entries, nothing else moved, none vetoed, and the lost ones are the
    top of S among the allowed entries (ties at the threshold allowed either way)."""
    s, vetoed, k = frp_by_hand(before, xf, xr, rho, beta, lam, variant, veto)
    assert not (before == 0).any()  # a random model: no exact zeros, so 'zeroed' is 'pruned'
    zeroed = (after == 0).cpu().numpy()
    assert (zeroed.sum(axis=1) == k).all()
    assert torch.equal(after[~torch.from_numpy(zeroed)], before[~torch.from_numpy(zeroed)])
    assert not (zeroed & vetoed).any(), "a vetoed entry was pruned"
    lowest_pruned = np.where(zeroed, s, np.inf).min(axis=1)
    highest_kept = np.where(~zeroed & ~vetoed, s, -np.inf).max(axis=1)
    assert (lowest_pruned >= highest_kept).all()
    return s, vetoed, k


@pytest.fixture(scope="module")
def tiny_norms(tokenizer):
    model = models.build_tiny_model(len(tokenizer), seed=0).eval()
    cfg = CalibConfig(n=6, max_len=48, batch_size=4)
    mods = calibration.select_modules(model, "mlp")
    xf = calibration.activation_norms(model, tokenizer, data.load_split("synthetic", "forget10"), mods, cfg)
    xr = calibration.activation_norms(model, tokenizer, data.load_split("synthetic", "retain90"), mods, cfg)
    return model, xf, xr


@pytest.mark.parametrize("variant,rho,lam,veto", [("eq6", 0.03, 0.0, 0.0), ("eq6", 0.1, 0.5, 0.0),
                                                  ("released", 0.1, 0.0, 0.3), ("released", 0.05, 0.2, 0.05)])
def test_frp_on_tiny_model_is_the_top_of_s_per_row(tiny_norms, variant, rho, lam, veto):
    model, xf, xr = tiny_norms
    before = {n: m.weight.detach().clone() for n, m in calibration.select_modules(model, "mlp").items()}
    sd, report = pruning.edited_copy(model, lambda mods: pruning.frp_prune(mods, xf, xr, rho=rho, beta=0.05, lam=lam,
                                                                            variant=variant, veto=veto))
    for name, w0 in before.items():
        _, vetoed, k = check_frp_rows(w0, sd[f"{name}.weight"], xf[name], xr[name], rho, 0.05, lam, variant, veto)
        distinct = int(torch.unique(sd[f"{name}.weight"] == 0, dim=0).shape[0])
        assert k >= 1 and report[name] == {"pruned_per_row": k, "row_sparsity": k / w0.shape[1],
                                           "pruned": k * w0.shape[0], "d_in": w0.shape[1],
                                           "distinct_row_masks": distinct}
        if variant == "released" and veto >= 0.3:  # the veto binds: some top-ratio entries were protected
            top_ratio = np.argsort(-(xf[name] / (xr[name] + 1e-6)).numpy(), kind="stable")[:k]
            assert vetoed[:, top_ratio].any()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in ((f"{n}.weight", w) for n, w in before.items()))


def test_already_zero_entries_count_as_pruned_and_measurement_is_checked():
    m, xf, xr = _layer(seed=2)
    top = int((xf / xr).argmax())
    with torch.no_grad():  # quantised checkpoints hold exact zeros; released ranks ignore |W| at lam 0
        m.weight[:, top] = 0.0
    rep = pruning.frp_prune({"l": m}, {"l": xf}, {"l": xr}, rho=0.2, variant="released", veto=0.0)
    assert rep["l"]["pruned_per_row"] == 4 and ((m.weight == 0).sum(dim=1) == 4).all()
    w0 = torch.randn(3, 10)
    w1 = w0.clone()
    w1[:, :2] = 0.0
    w1[0, 5] += 1.0
    assert pruning.zeroed_per_row(w0, w1) == {"min": 2, "max": 2, "d_in": 10, "other_changes": 1}


# --- Selective Pruning ------------------------------------------------------------------------


@torch.no_grad()
def _sp_by_hand(model, tokenizer, forget, retain, cfg, fraction):
    """down_in: mean |act(gate(x)) * up(x)| per neuron from each record alone (no padding), the MLP
    recomputed by hand from its input; scores and the global top set by a plain sort."""
    blocks = {n: m for n, m in model.named_modules() if n.endswith(".mlp")}
    acts = {}
    for role, recs in (("forget", forget), ("retain", retain)):
        xs = {n: [] for n in blocks}
        hooks = [b.register_forward_pre_hook(lambda _m, args, n=n, xs=xs: xs[n].append(args[0][0].double()))
                 for n, b in blocks.items()]
        with torch.no_grad():
            for enc in calibration.encode_calibration(tokenizer, calibration.select_records(recs, cfg), cfg):
                model(input_ids=torch.tensor([enc["input_ids"]]))
        for h in hooks:
            h.remove()
        acts[role] = {}
        for n, b in blocks.items():
            x = torch.cat(xs[n])  # [all tokens, d_model]
            up = x @ b.up_proj.weight.double().T
            a = F.silu(x @ b.gate_proj.weight.double().T) * up
            acts[role][n] = a.abs().mean(dim=0)
    scores = [(float(acts["forget"][n][j] / (acts["retain"][n][j] + 1e-6)), n, j)
              for n in blocks for j in range(acts["forget"][n].numel())]
    k = math.floor(fraction * len(scores))
    chosen = {n: [] for n in blocks}
    for _, n, j in sorted(scores, key=lambda t: -t[0])[:k]:
        chosen[n].append(j)
    return acts, {n: sorted(v) for n, v in chosen.items()}


def test_selective_pruning_down_in_removes_exactly_the_chosen_neurons(tiny, tokenizer):
    forget, retain = data.load_split("synthetic", "forget10"), data.load_split("synthetic", "retain90")
    cfg = CalibConfig(n=7, max_len=48, batch_size=3)  # batches of 3 unequal lengths: padding present
    variant = "down_in"
    acts, expected = _sp_by_hand(tiny, tokenizer, forget, retain, cfg, 0.05)
    got, used = pruning.neuron_activations(tiny, tokenizer, forget, cfg, variant)
    assert used["sequences"] == 7
    assert all(torch.allclose(got[n].double(), acts["forget"][n], rtol=1e-4, atol=1e-7) for n in got)
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    probe = collate([{"input_ids": e["input_ids"]} for e in calibration.encode_calibration(
        tokenizer, forget[:3], cfg)], tokenizer.pad_token_id)
    with torch.no_grad():
        logits0 = tiny(**probe).logits
    rec = pruning.selective_prune(tiny, tokenizer, forget, retain, fraction=0.05, variant=variant, config=cfg)
    assert rec["removed"] == expected and rec["n_removed"] == rec["requested"] == math.floor(0.05 * 256)
    assert rec["n_forget_used"] == 7 and rec["n_retain_used"] == 7
    after = tiny.state_dict()
    for k, w0 in before.items():  # exactly the chosen down columns and gate/up rows are zero now
        block = k.rsplit(".", 2)[0]
        idx = expected.get(block, [])
        changed = (after[k] != w0)
        if k.endswith("down_proj.weight"):
            assert (after[k][:, idx] == 0).all() and changed.any(dim=0).nonzero().flatten().tolist() == idx
        elif k.endswith(("gate_proj.weight", "up_proj.weight")):
            assert (after[k][idx] == 0).all() and changed.any(dim=1).nonzero().flatten().tolist() == idx
        else:
            assert not changed.any(), k
    # the output no longer depends on the removed neurons: noise injected there changes nothing
    blocks = pruning.mlp_blocks(tiny)

    def inject(n):
        def fn(_m, args):
            x = args[0].clone()
            x[..., expected[n]] = 100 * torch.randn(x[..., expected[n]].shape)
            return (x,)
        return fn

    with torch.no_grad():
        logits1 = tiny(**probe).logits
        hooks = [b.down_proj.register_forward_pre_hook(inject(n)) for n, b in blocks.items()]
        logits2 = tiny(**probe).logits
        for h in hooks:
            h.remove()
    assert torch.equal(logits1, logits2) and not torch.allclose(logits0, logits1)
    tiny.load_state_dict(before)
    with torch.no_grad():  # control: the same injection does move the unpruned model
        hooks = [b.down_proj.register_forward_pre_hook(inject(n)) for n, b in blocks.items()]
        assert not torch.allclose(tiny(**probe).logits, logits0)
        for h in hooks:
            h.remove()


@torch.no_grad()
def released_sp_by_hand(model, tokenizer, forget, retain, fraction, n=500, max_len=256, max_tokens=50_000):
    """baselines/selective_pruning.py --scoring activation_ratio as released, written out on its own:
    the first ``n`` records as "Question: q\nAnswer: a" tokenized with truncation at ``max_len``
    (frp/data.py), the whole model run on one sequence at a time, a hook on each layer's up_proj
    adding the sequence's sum of |output| (in the output's dtype) to a float32 total and counting its
    tokens, stopping once ``max_tokens`` tokens have been run; each neuron's score f / (r + 1e-5) in
    float32; the threshold is the k-th largest score over all layers (k = int(fraction * n_neurons)),
    and each neuron is chosen or not by comparing its own score with it.

    Returns ``(threshold, {MLP name: chosen indices}, {role: sequences run})``.
    """
    layers = model.model.layers

    def collect(recs):
        sums = [torch.zeros(layer.mlp.up_proj.out_features, dtype=torch.float32) for layer in layers]
        count, tokens_seen, sequences = [0], 0, 0

        def hook(output, i):
            act = output.detach().abs()
            sums[i] += act.reshape(-1, act.shape[-1]).sum(dim=0).float()
            if i == 0:
                count[0] += act.shape[0] * act.shape[1]

        handles = [layer.mlp.up_proj.register_forward_hook(lambda m, a, o, i=i: hook(o, i))
                   for i, layer in enumerate(layers)]
        for r in recs[:n]:
            enc = tokenizer(f"Question: {r['question']}\nAnswer: {r['answer']}", return_tensors="pt",
                            truncation=True, max_length=max_len)
            model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
            sequences += 1
            tokens_seen += enc["input_ids"].numel()
            if tokens_seen >= max_tokens:
                break
        for h in handles:
            h.remove()
        return [t / count[0] for t in sums], sequences

    means, used = {}, {}
    for role, recs in (("forget", forget), ("retain", retain)):
        means[role], used[role] = collect(recs)
    scores = []  # (score, layer, neuron), one neuron at a time, float32 as theirs
    for i in range(len(layers)):
        for j in range(means["forget"][i].numel()):
            f, r = means["forget"][i][j], means["retain"][i][j]
            scores.append((float(f / (r + torch.tensor(1e-5, dtype=torch.float32))), i, j))
    k = int(fraction * len(scores))
    threshold = sorted((s for s, _, _ in scores), reverse=True)[k - 1]
    chosen = {f"model.layers.{i}.mlp": [] for i in range(len(layers))}
    for score, i, j in scores:
        if score >= threshold:
            chosen[f"model.layers.{i}.mlp"].append(j)
    return threshold, chosen, used


@pytest.mark.parametrize("max_tokens", [50_000, 900])
def test_released_selective_pruning_is_the_authors_baseline(tiny, tokenizer, monkeypatch, max_tokens):
    """Against the independent transcription above, on the tiny random Llama: the same neurons
    zeroed (gate/up rows, down column), the same sequences run; at 900 tokens the budget binds."""
    monkeypatch.setitem(pruning.SP_RELEASED, "max_tokens", max_tokens)
    forget, retain = data.load_split("synthetic", "forget10"), data.load_split("synthetic", "retain90")
    threshold, expected, used = released_sp_by_hand(tiny, tokenizer, forget, retain, 0.05, max_tokens=max_tokens)
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    rec = pruning.selective_prune(tiny, tokenizer, forget, retain, fraction=0.05)  # the defaults: released
    assert rec["variant"] == "released" and rec["eps"] == 1e-5
    assert rec["removed"] == expected and rec["n_removed"] == rec["requested"] == rec["budget"] == 12
    assert (rec["n_forget_used"], rec["n_retain_used"]) == (used["forget"], used["retain"])
    if max_tokens < 50_000:  # the token budget cut both splits short of their records
        assert used["forget"] < len(forget) and used["retain"] < len(retain) and rec["forget_tokens"] >= 900
    else:
        assert used == {"forget": len(forget), "retain": len(retain)}
    after = tiny.state_dict()
    for name, idx in expected.items():
        others = [j for j in range(128) if j not in idx]
        for proj in ("gate_proj", "up_proj"):
            w0, w1 = before[f"{name}.{proj}.weight"], after[f"{name}.{proj}.weight"]
            assert (w1[idx] == 0).all() and torch.equal(w1[others], w0[others])
        w0, w1 = before[f"{name}.down_proj.weight"], after[f"{name}.down_proj.weight"]
        assert (w1[:, idx] == 0).all() and torch.equal(w1[:, others], w0[:, others])
    assert all(torch.equal(before[k], after[k]) for k in before if ".mlp." not in k)
    assert threshold > 0


def test_released_selective_pruning_removes_every_neuron_tied_at_the_threshold(tiny, tokenizer):
    """Neurons whose up_proj row is zero score exactly 0. With the budget's edge among them, the
    released rule (>= the k-th largest score) removes all of them, more than the budget, as the
    slow transcription does; down_in removes exactly the budget."""
    forget = data.load_split("synthetic", "forget10", limit=6)
    retain = data.load_split("synthetic", "retain90", limit=6)
    with torch.no_grad():
        tiny.model.layers[0].mlp.up_proj.weight[:10] = 0.0
    fraction = 250.5 / 256  # k = 250: the threshold falls among the ten zero scores
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    threshold, expected, _ = released_sp_by_hand(tiny, tokenizer, forget, retain, fraction)
    assert threshold == 0.0 and sum(len(v) for v in expected.values()) == 256
    rec = pruning.selective_prune(tiny, tokenizer, forget, retain, fraction=fraction)
    assert rec["budget"] == 250 and rec["requested"] == rec["n_removed"] == 256 and rec["removed"] == expected
    tiny.load_state_dict(before)
    rec = pruning.selective_prune(tiny, tokenizer, forget, retain, fraction=fraction, variant="down_in",
                                  config=CalibConfig(n=6, max_len=256))
    assert rec["budget"] == rec["n_removed"] == 250


def test_sp_select_keeps_ties_only_in_the_released_rule():
    scores = {"a": torch.tensor([3.0, 1.0, 2.0]), "b": torch.tensor([3.0, 0.5])}
    assert pruning.sp_select(scores, 0.2, keep_ties=True) == {"a": [0], "b": [0]}  # k = 1, two at 3.0
    assert pruning.sp_select(scores, 0.2) == {"a": [0], "b": []}  # exactly k, the earlier MLP first
    assert pruning.sp_select(scores, 0.6, keep_ties=True) == {"a": [0, 2], "b": [0]}  # k = 3: no tie at 2.0


def test_selective_pruning_bad_inputs(tiny, tokenizer):
    forget = data.load_split("synthetic", "forget10", limit=2)
    cfg = CalibConfig(n=2, max_len=16)
    for fraction in (0.0, 1.0, -0.1):
        with pytest.raises(pruning.PruningError, match="fraction must be in"):
            pruning.selective_prune(tiny, tokenizer, forget, forget, fraction, config=cfg)
    with pytest.raises(pruning.PruningError, match="removes none"):
        pruning.selective_prune(tiny, tokenizer, forget, forget, 0.001, config=cfg)
    with pytest.raises(pruning.PruningError, match="forget split is empty"):
        pruning.selective_prune(tiny, tokenizer, [], forget, config=cfg)
    with pytest.raises(pruning.PruningError, match="variant"):
        pruning.selective_prune(tiny, tokenizer, forget, forget, variant="down", config=cfg)

    class NoGates(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 4)

    with pytest.raises(pruning.PruningError, match="gated MLPs"):
        pruning.mlp_blocks(NoGates())
    with pytest.raises(pruning.PruningError, match="out of range"):
        pruning.remove_neurons(pruning.mlp_blocks(tiny), {"model.layers.0.mlp": [128]})


def test_prune_checkpoint_refuses_bad_settings_before_loading(tmp_path):
    for kwargs, msg in (({"method": "wanda"}, "Unknown pruning method"),
                        ({"method": "frp", "variant": "down_in"}, "does not belong"),
                        ({"method": "sp", "variant": "eq6"}, "does not belong"),
                        ({"method": "frp", "precision": "fp16"}, "precision must be one of"),
                        ({"method": "frp", "precision": "bf16"}, "set weights to 'bf16'"),
                        ({"method": "sp", "sparsity": 1.0}, r"sparsity must be in \(0, 1\)"),
                        ({"method": "frp", "lam": math.inf}, "finite")):
        with pytest.raises(pruning.PruningError, match=msg):
            pruning.prune_checkpoint("./does_not_exist", tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


def test_verify_pruned_accepts_the_recorded_prune_and_catches_tampering(tmp_path):
    cfg = CalibConfig(n=4, max_len=64)
    for method, sparsity in (("frp", 0.1), ("sp", 0.05)):
        out = tmp_path / method
        rec = pruning.prune_checkpoint("tiny", out, method=method, sparsity=sparsity, calib=cfg, use_cache=False)
        assert "verified_from_weights" in models.load_record(out)
        original, _ = models.load_model("tiny")
        saved, _ = models.load_model(str(out))
        pruning.verify_pruned(original, saved, rec)
        blocks = pruning.mlp_blocks(saved)
        name = sorted(blocks)[0]
        with torch.no_grad():
            if method == "frp":  # one more entry of one row zeroed: more than the record's k per row
                w = blocks[name].up_proj.weight
                w[0, (w[0] != 0).nonzero()[0]] = 0.0
                match = "newly zeroed"
            else:  # one recorded neuron half restored
                idx = next(i for n, i in rec["removed"].items() if i)[0]
                owner = next(n for n, i in rec["removed"].items() if i)
                pruning.mlp_blocks(saved)[owner].up_proj.weight[idx] = 0.0
                pruning.mlp_blocks(saved)[owner].gate_proj.weight[idx] = 1.0
                match = "non-zero|differ from the record"
        with pytest.raises(pruning.PruningError, match=match):
            pruning.verify_pruned(original, saved, rec)
    # a non-zero change anywhere is not a prune
    saved, _ = models.load_model(str(tmp_path / "frp"))
    with torch.no_grad():
        saved.model.norm.weight[0] += 1.0
    with pytest.raises(pruning.PruningError, match="non-zero"):
        pruning.verify_pruned(original, saved, models.load_record(tmp_path / "frp"))


def test_prune_refuses_splits_that_do_not_oppose_forget_and_retain(tmp_path):
    for forget, retain in (("forget10", "forget10"), ("retain90", "forget10"), ("forget10", "forget05")):
        with pytest.raises(pruning.PruningError, match="forget split must be a forgetXX"):
            pruning.prune_checkpoint("tiny", tmp_path / "out", forget_split=forget, retain_split=retain)


def test_selective_pruning_to_an_update_norm_takes_the_closest_prefix_of_the_score_order(tiny, tokenizer):
    forget, retain = data.load_split("synthetic", "forget10"), data.load_split("synthetic", "retain90")
    cfg = CalibConfig(n=7, max_len=48, batch_size=3)
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    # the score order (as _sp_by_hand ranks), and each neuron's squared norm summed by hand
    acts, _ = _sp_by_hand(tiny, tokenizer, forget, retain, cfg, 0.05)
    blocks = pruning.mlp_blocks(tiny)
    order = sorted(((float(acts["forget"][n][j] / (acts["retain"][n][j] + 1e-6)), i, j, n)
                    for i, n in enumerate(blocks) for j in range(acts["forget"][n].numel())),
                   key=lambda t: (-t[0], t[1], t[2]))
    with torch.no_grad():
        sq = [float(blocks[n].gate_proj.weight[j].double().pow(2).sum()
                    + blocks[n].up_proj.weight[j].double().pow(2).sum()
                    + blocks[n].down_proj.weight[:, j].double().pow(2).sum()) for _, _, j, n in order]
    prefix = np.sqrt(np.cumsum(sq))
    target = float(prefix[20] + prefix[21]) / 2 + 1e-3  # nearer 22 neurons than 21
    try:
        rec = pruning.selective_prune(tiny, tokenizer, forget, retain, variant="down_in", config=cfg, target_l2=target)
        assert rec["n_removed"] == rec["requested"] == 22 and rec["fraction"] == 22 / 256
        assert rec["removed"] == {n: sorted(j for _, _, j, m in order[:22] if m == n) for n in blocks}
        direct = math.sqrt(sum(float((v.double() - before[k].double()).pow(2).sum())
                               for k, v in tiny.state_dict().items()))
        assert rec["l2"] == pytest.approx(direct, rel=1e-9) and direct == pytest.approx(prefix[21], rel=1e-9)
    finally:
        tiny.load_state_dict(before)
    for bad, msg in ((0.0, "positive"), (math.nan, "positive"), (float(prefix[-1]) * 1.01, "cannot reach")):
        with pytest.raises(pruning.PruningError, match=msg):
            pruning.selective_prune(tiny, tokenizer, forget, retain, config=cfg, target_l2=bad)
    with pytest.raises(pruning.PruningError, match="Selective Pruning setting"):
        pruning.prune_checkpoint("./does_not_exist", "unused", method="frp", target_l2=1.0)


# --- FRP's precision: the dtype calibration runs in ----------------------------------------------


def _cpu_bf16_broken() -> bool:
    """torch 2.13's CPU bf16 matmul fails on an AMX CPU when its kernels are capped at AVX2."""
    from frag_utils.records import cpu_description

    return torch.backends.cpu.get_cpu_capability() == "AVX2" and "amx_bf16" in cpu_description().get("cpu_flags", [])


@torch.no_grad()
def seq_norms_by_hand(model, tokenizer, records, n, max_len):
    """Eq. 7 written out as frp/prune.py's collect_input_norms computes it: the model in its own dtype,
    one "Question: q\\nAnswer: a" sequence per forward, each MLP projection's input taken to float32,
    its per-channel L2 norm over the sequence's tokens, the mean over sequences."""
    names = [n_ for n_, m in model.named_modules() if n_.endswith(("gate_proj", "up_proj", "down_proj"))]
    modules = dict(model.named_modules())
    total = {name: torch.zeros(modules[name].in_features, dtype=torch.float64) for name in names}
    seen = {}
    hooks = [modules[name].register_forward_pre_hook(lambda m, a, name=name: seen.__setitem__(name, a[0]))
             for name in names]
    for r in records[:n]:
        ids = tokenizer(f"Question: {r['question']}\nAnswer: {r['answer']}", truncation=True,
                        max_length=max_len)["input_ids"]
        model(input_ids=torch.tensor([ids]))
        for name in names:
            x = seen[name][0].float()  # [T, d_in]
            total[name] += x.pow(2).sum(dim=0).sqrt().double()
    for h in hooks:
        h.remove()
    count = min(n, len(records))
    return {name: (t / count).float() for name, t in total.items()}


RHO = 0.25  # the budget's edge in the middle of the ratio ranking, where bf16 noise can reorder channels


@pytest.mark.skipif(_cpu_bf16_broken(), reason="bf16 on this CPU needs kernels above the AVX2 cap set here")
def test_frp_precision_is_the_dtype_its_norms_are_computed_in(tmp_path, tokenizer, monkeypatch):
    """precision fp32 (the authors' RC, Tables 1 and 3) and bf16 (scripts/frp_tofu.sh) on the same
    bf16 weights: each mask is rank_combo on norms computed directly in that dtype; the bf16 norms
    are the fp32 ones up to bf16 rounding (measured: up to 0.25 %), and that alone moves part of the
    mask (measured: 0.2 % of entries at 25 % sparsity; at 3 % this tiny model's masks agree)."""
    forget, retain = data.load_split("synthetic", "forget10"), data.load_split("synthetic", "retain90")
    cfg = CalibConfig(n=12, max_len=64, batch_size=1)
    w_bf16 = models.build_tiny_model(len(tokenizer), seed=0).to(torch.bfloat16)
    masks, norms = {}, {}
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        record = pruning.prune_checkpoint("tiny", tmp_path / precision, method="frp", calib=cfg, use_cache=False,
                                          weights="bf16", precision=precision, sparsity=RHO)
        assert record["precision"] == precision
        saved = dict(models.load_model(str(tmp_path / precision))[0].named_parameters())
        model = copy.deepcopy(w_bf16).to(dtype)  # the bf16 weights, run in this precision
        xf, xr = (seq_norms_by_hand(model, tokenizer, recs, cfg.n, cfg.max_len) for recs in (forget, retain))
        norms[precision] = xf
        masks[precision] = {}
        for name in xf:
            w0 = w_bf16.get_submodule(name).weight.detach().float()
            expected, _ = rank_combo_by_hand(w0, xf[name], xr[name], rho=RHO, lam=0.05, veto=0.0)
            got = (saved[f"{name}.weight"] == 0).numpy()
            assert np.array_equal(got, expected), (precision, name)
            masks[precision][name] = got
    rel = max(float(((norms["bf16"][k] - norms["fp32"][k]).abs() / norms["fp32"][k]).max()) for k in norms["fp32"])
    assert 0 < rel < 2 ** -5  # bf16 noise (8 bits of mantissa, compounded through the layers)
    moved = np.mean([(masks["fp32"][k] != masks["bf16"][k]).mean() for k in masks["fp32"]])
    assert 0 < moved < 0.03
