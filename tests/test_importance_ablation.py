"""The importance terms the FRAG ablation swaps in (Fisher, integrated gradients, OBD, influence), each
checked against its definition computed directly."""
import copy

import pytest
import torch

from frag_utils import calibration, data, frag, models
from frag_utils.frag import FragError
from frag_utils.prompts import IGNORE, batches, collate

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.one_thread


@pytest.fixture(scope="module")
def setup(tokenizer):
    model = models.build_tiny_model(len(tokenizer), seed=0).eval()
    modules = dict(list(calibration.select_modules(model, "mlp").items())[:3])
    cfg = calibration.CalibConfig(n=4, batch_size=2, max_len=32)
    recs = data.load_split("synthetic", "forget10", limit=4)
    return model, modules, cfg, recs


def _grads(model, names, batch):
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE)
    model.zero_grad()
    model(**batch, labels=labels).loss.backward()
    params = dict(model.named_parameters())
    return {n: params[f"{n}.weight"].grad.double().clone() for n in names}


def test_gradient_stats_match_per_batch_gradients_and_leave_the_model_alone(setup, tokenizer):
    model, modules, cfg, recs = setup
    before = copy.deepcopy(model.state_dict())
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    stats = calibration.gradient_stats(model, tokenizer, recs, modules, cfg, ig_steps=2)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert flags == {n: p.requires_grad for n, p in model.named_parameters()} and not model.training
    # the slow way: every batch's gradient, and along the path at alpha 1/2 and 1
    ref = copy.deepcopy(model).requires_grad_(True)
    enc = calibration.encode_calibration(tokenizer, calibration.select_records(recs, cfg), cfg)
    chunks = [collate(c, tokenizer.pad_token_id) for c in batches(enc, cfg.batch_size)]
    per_batch = [_grads(ref, modules, b) for b in chunks]
    path = []
    for b in chunks:
        acc = {n: 0 for n in modules}
        for alpha in (0.5, 1.0):
            scaled = copy.deepcopy(ref)
            with torch.no_grad():
                for n in modules:
                    dict(scaled.named_parameters())[f"{n}.weight"].mul_(alpha)
            for n, g in _grads(scaled, modules, b).items():
                acc[n] = acc[n] + g / 2
        path.append(acc)
    for n in modules:
        assert torch.allclose(stats[n]["g"], sum(g[n] for g in per_batch) / len(chunks), atol=1e-10)
        assert torch.allclose(stats[n]["g2"], sum(g[n] ** 2 for g in per_batch) / len(chunks), atol=1e-12)
        assert torch.allclose(stats[n]["ig"], sum(p[n] for p in path) / len(chunks), atol=1e-10)


def test_frag_with_gradient_importance_equals_the_direct_cosines(setup, tokenizer):
    model, modules, cfg, recs = setup
    sf = calibration.gradient_stats(model, tokenizer, recs, modules, cfg, ig_steps=1)
    sr = calibration.gradient_stats(model, tokenizer, data.load_split("synthetic", "retain90", limit=4), modules, cfg,
                                    ig_steps=1)
    w0 = frag.state_dict_of(model)
    gen = torch.Generator().manual_seed(0)
    wu = {k: v + 1e-3 * torch.randn(v.shape, generator=gen) for k, v in w0.items()}
    for kind in ("fisher", "ig", "obd", "influence"):
        res = frag.compute_frag(w0, wu, sf, sr, importance_kind=kind)
        fs, rs, ds = [], [], []
        for n in sorted(modules):
            w, d = w0[f"{n}.weight"].double(), (wu[f"{n}.weight"].double() - w0[f"{n}.weight"].double()) ** 2
            # influence's H + lambda
            h = (sf[n]["g2"] + sr[n]["g2"]) / 2 + 0.01 * (sf[n]["g2"] + sr[n]["g2"]).mean() / 2
            f, r = {"fisher": (sf[n]["g2"], sr[n]["g2"]), "ig": ((w * sf[n]["ig"]).abs(), (w * sr[n]["ig"]).abs()),
                    "obd": (sf[n]["g2"] * w ** 2, sr[n]["g2"] * w ** 2),
                    "influence": (sf[n]["g"] ** 2 / h, sr[n]["g"] ** 2 / h)}[kind]
            fs.append(f.flatten()), rs.append(r.flatten()), ds.append(d.flatten())
        f, r, d = torch.cat(fs), torch.cat(rs), torch.cat(ds)
        cos = lambda a, b: float(a @ b / (a.norm() * b.norm()))  # noqa: E731
        assert res.a_f == pytest.approx(cos(f, d), rel=1e-9) and res.a_r == pytest.approx(cos(r, d), rel=1e-9), kind


def test_unknown_importance_and_missing_path_gradients_are_refused(setup, tokenizer):
    model, modules, cfg, recs = setup
    stats = calibration.gradient_stats(model, tokenizer, recs, modules, cfg)
    w0 = frag.state_dict_of(model)
    wu = {k: v + 0.01 for k, v in w0.items()}
    with pytest.raises(FragError, match="ig_steps > 0"):
        frag.compute_frag(w0, wu, stats, stats, importance_kind="ig")
    with pytest.raises(FragError, match="Unknown importance"):
        frag.compute_frag(w0, wu, stats, stats, importance_kind="hessian")
    with pytest.raises(calibration.CalibrationError):
        calibration.gradient_stats(model, tokenizer, recs, modules, cfg, ig_steps=-1)
