import pytest
import torch
from torch import nn

from frag_utils import calibration, data
from frag_utils.calibration import CalibConfig, CalibrationError


def _slow_norms(model, tokenizer, records, modules, cfg):
    """Per-sequence inputs captured one unpadded sequence at a time, norms computed directly."""
    per_seq = {n: [] for n in modules}
    handles = [m.register_forward_pre_hook(lambda mod, args, n=n: per_seq[n].append(args[0][0].double()))
               for n, m in modules.items()]
    with torch.no_grad():
        for enc in calibration.encode_calibration(tokenizer, calibration.select_records(records, cfg), cfg):
            model(input_ids=torch.tensor([enc["input_ids"]]))
    for h in handles:
        h.remove()
    seq_norm = {n: torch.stack([x.pow(2).sum(0).sqrt() for x in xs]).mean(0) for n, xs in per_seq.items()}
    wanda = {n: (torch.stack([x.pow(2).sum(0) for x in xs]).sum(0) / len(xs)).sqrt() for n, xs in per_seq.items()}
    return seq_norm, wanda


def test_norms_match_direct_computation_and_ignore_padding(tiny, tokenizer):
    recs = data.load_split("synthetic", "forget10", limit=6)
    modules = calibration.select_modules(tiny, "all")
    cfg = CalibConfig(n=5, max_len=40, batch_size=3)
    seq_norm, wanda = _slow_norms(tiny, tokenizer, recs, modules, cfg)
    got = calibration.activation_norms(tiny, tokenizer, recs, modules, cfg)
    got_w = calibration.activation_norms(tiny, tokenizer, recs, modules, CalibConfig(n=5, max_len=40, batch_size=3,
                                                                                      statistic="wanda"))
    for n in modules:
        assert torch.allclose(got[n].double(), seq_norm[n], rtol=1e-4, atol=1e-6), n
        assert torch.allclose(got_w[n].double(), wanda[n], rtol=1e-4, atol=1e-6), n
    assert not torch.allclose(got[next(iter(modules))], got_w[next(iter(modules))])  # different statistics


def test_selection_and_max_len(tokenizer):
    recs = data.load_split("synthetic", "retain90")
    assert calibration.select_records(recs, CalibConfig(n=3)) == recs[:3]
    a = calibration.select_records(recs, CalibConfig(n=3, selection="sample", seed=1))
    assert a == calibration.select_records(recs, CalibConfig(n=3, selection="sample", seed=1)) and a != recs[:3]
    enc = calibration.encode_calibration(tokenizer, recs[:2], CalibConfig(max_len=10))
    assert all(len(e["input_ids"]) == 10 for e in enc)
    text = tokenizer.decode(calibration.encode_calibration(tokenizer, recs[:1], CalibConfig())[0]["input_ids"])
    assert text.startswith("Question: ") and "\nAnswer: " in text
    with pytest.raises(CalibrationError, match="empty"):
        calibration.select_records([], CalibConfig())
    with pytest.raises(CalibrationError, match="selection"):
        CalibConfig(selection="random")


def test_module_scopes(tiny):
    assert len(calibration.select_modules(tiny, "all")) == 2 * 7
    assert len(calibration.select_modules(tiny, "mlp")) == 2 * 3
    assert all(n.split(".")[-1] in ("q_proj", "k_proj", "v_proj", "o_proj")
               for n in calibration.select_modules(tiny, "attn"))
    assert "lm_head" not in calibration.select_modules(tiny, "all")
    with pytest.raises(CalibrationError, match="scope"):
        calibration.select_modules(tiny, "ffn")

    class Other(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 9)

        def get_output_embeddings(self):
            return self.head

    assert sorted(calibration.select_modules(Other(), "all")) == ["fc1", "fc2"]
    with pytest.raises(CalibrationError, match="no .*gate_proj"):
        calibration.select_modules(Other(), "mlp")


def test_norms_are_cached_on_disk(tiny, tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path))
    recs = data.load_split("synthetic", "forget10", limit=4)
    modules = calibration.select_modules(tiny, "mlp")
    cfg = CalibConfig(n=4, max_len=32)
    first, cached = calibration.calibrate(tiny, tokenizer, "tiny", "synthetic", "forget10", recs, modules, cfg)
    assert not cached
    again, cached = calibration.calibrate(tiny, tokenizer, "tiny", "synthetic", "forget10", recs, modules, cfg)
    assert cached and all(torch.equal(first[k], again[k]) for k in first)
    _, cached = calibration.calibrate(tiny, tokenizer, "tiny", "synthetic", "forget10", recs, modules,
                                      CalibConfig(n=3, max_len=32))
    assert not cached  # a different N is a different key
