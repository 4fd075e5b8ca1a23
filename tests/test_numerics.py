"""Deterministic mode and bf16 weight storage (frag_utils.numerics), checked against direct
computations: bf16 rounding by bit arithmetic, a half-ulp update, a native bf16 optimizer step."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from frag_utils import frag, models, numerics, train

from conftest import same_weights


def bf16_by_bits(x: torch.Tensor) -> torch.Tensor:
    """Round fp32 to the nearest bf16 value (ties to even) by integer arithmetic on the bit pattern."""
    u = x.contiguous().numpy().view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return torch.from_numpy((r & 0xFFFFFFFF).astype(np.uint32).view(np.float32))


def test_round_to_bf16_is_round_to_nearest_even():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4096, generator=gen) * torch.logspace(-6, 2, 4096)
    ties = torch.tensor([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, -(1.0 + 2 ** -8)])  # exactly half an ulp above 1, 1+2^-7
    for t in (x, ties):
        p = nn.Parameter(t.clone())
        changed = numerics.round_to_bf16_([p])
        assert torch.equal(p.data, bf16_by_bits(t))
        assert changed == int((bf16_by_bits(t) != t).sum())
        assert numerics.is_bf16_representable(p.data)
    assert bf16_by_bits(ties).tolist() == [1.0, 1.0 + 2 ** -6, -1.0]  # ties go to the even mantissa


def test_an_update_below_half_an_ulp_is_lost_and_one_above_is_kept():
    w = torch.tensor([0.75, 0.75, 0.75])  # bf16 ulp in [0.5, 1) is 2^-8
    p = nn.Parameter(w.clone())
    with torch.no_grad():
        p.add_(torch.tensor([0.49 * 2 ** -8, -0.49 * 2 ** -8, 0.51 * 2 ** -8]))
    numerics.round_to_bf16_([p])
    assert p.data.tolist() == [0.75, 0.75, 0.75 + 2 ** -8]


def test_emulated_bf16_storage_equals_a_native_bf16_sgd_step():
    """fp32 compute, then rounding, is what a bf16 parameter's own update does (torch computes a
    bf16 add in fp32 and rounds once), given the same gradient. The learning rate is a bf16 value:
    torch's bf16 kernel rounds the scalar to bf16 first (3e-3 becomes 0.0029984), a difference of
    the native path, not of the storage."""
    gen = torch.Generator().manual_seed(1)
    w = (torch.randn(64, 32, generator=gen) * 0.05).to(torch.bfloat16)
    g = torch.randn(64, 32, generator=gen).to(torch.bfloat16)
    for foreach in (False, True):
        native, emulated = nn.Parameter(w.clone()), nn.Parameter(w.float())
        native.grad, emulated.grad = g.clone(), g.float()
        for p in (native, emulated):
            torch.optim.SGD([p], lr=2 ** -9, foreach=foreach).step()
        numerics.round_to_bf16_([emulated])
        assert torch.equal(native.data.float(), emulated.data)
        moved = native.data.float() != w.float()
        assert 0 < int(moved.sum()) < moved.numel()  # some steps below half an ulp were lost, some kept


def test_training_with_bf16_storage_keeps_every_weight_a_bf16_value(tokenizer, qa_records, tmp_path):
    cfg = train.TrainConfig(epochs=2, lr=1e-3, batch_size=4, warmup_epochs=0.0, bf16=False, seed=0, weights="bf16")
    model = models.build_tiny_model(len(tokenizer), seed=0)
    start = {n: p.detach().to(torch.bfloat16).float() for n, p in model.named_parameters()}
    train.finetune(model, tokenizer, qa_records[:8], cfg, tmp_path / "work")
    assert all(numerics.is_bf16_representable(p) for p in model.parameters())
    moved = sum(int((p.detach() != start[n]).sum()) for n, p in model.named_parameters())
    total = sum(p.numel() for p in model.parameters())
    assert 0 < moved < total  # some updates survive the rounding, not all (lr 1e-3 is near the ulp)
    fp32 = models.build_tiny_model(len(tokenizer), seed=0)
    train.finetune(fp32, tokenizer, qa_records[:8], train.TrainConfig(**{**cfg.as_dict(), "weights": "fp32"}),
                   tmp_path / "work32")
    assert not same_weights(model, fp32)


def test_bf16_checkpoints_are_saved_as_bf16_and_refused_when_not_bf16_values(tokenizer, tmp_path):
    model = models.build_tiny_model(len(tokenizer), seed=0)
    with pytest.raises(ValueError, match="not bf16 values"):
        models.save_checkpoint(model, tokenizer, tmp_path / "refused", weights="bf16")
    numerics.round_to_bf16_(model.parameters())
    expected = {n: p.detach().clone() for n, p in model.named_parameters()}
    models.save_checkpoint(model, tokenizer, tmp_path / "b", weights="bf16")
    loaded = frag.SafetensorsCheckpoint(tmp_path / "b")
    assert all(loaded.get(k).dtype == torch.bfloat16 for k in loaded.keys())
    back, _ = models.load_model(str(tmp_path / "b"))
    assert all(torch.equal(p.detach(), expected[n]) for n, p in back.named_parameters())


def test_weights_sha256_sees_one_changed_bit_and_nothing_else(tokenizer, tmp_path):
    model = models.build_tiny_model(len(tokenizer), seed=0)
    models.save_checkpoint(model, tokenizer, tmp_path / "a", record={"note": "one"})
    models.save_checkpoint(model, tokenizer, tmp_path / "b", record={"note": "two"})  # same weights, other record
    assert models.weights_sha256(tmp_path / "a") == models.weights_sha256(tmp_path / "b")
    with torch.no_grad():
        w = model.model.layers[0].mlp.down_proj.weight
        w.view(torch.int32)[0, 0] ^= 1  # the lowest mantissa bit of one weight
    models.save_checkpoint(model, tokenizer, tmp_path / "c")
    assert models.weights_sha256(tmp_path / "c") != models.weights_sha256(tmp_path / "a")
    assert models.weights_sha256("tiny") is None and models.weights_sha256(tmp_path / "missing") is None


def test_bf16_autocast_is_refused_on_the_cpu_where_runs_compute_in_fp32():
    with pytest.raises(numerics.NumericsError, match="fp32"):
        numerics.check_autocast(True, "cpu")
    numerics.check_autocast(True, "cuda:0")
    numerics.check_autocast(False, "cpu")
    with pytest.raises(numerics.NumericsError, match="weights must be one of"):
        numerics.check_weights("fp16")


def test_the_thread_count_is_pinned_whatever_it_was():
    """Another thread count splits reductions otherwise and gives other bits: a fresh process that
    imports frag_utils runs with FRAG_THREADS (default 2) threads, whatever OMP_NUM_THREADS said
    (torch itself never takes more threads than the machine has cores)."""
    assert numerics.pin_threads({"OMP_NUM_THREADS": "1"}) == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    assert numerics.pin_threads({"FRAG_THREADS": "4"})["MKL_NUM_THREADS"] == "4"
    with pytest.raises(numerics.NumericsError, match="FRAG_THREADS"):
        numerics.pin_threads({"FRAG_THREADS": "many"})
    code = "import frag_utils, torch; print(torch.get_num_threads())"
    env = {**os.environ, "OMP_NUM_THREADS": "2", "FRAG_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"


def test_device_and_dtype_resolve_as_documented(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert numerics.resolve_device("auto") == "cpu" and numerics.resolve_device("cpu") == "cpu"
    with pytest.raises(numerics.NumericsError, match="no usable CUDA device"):
        numerics.resolve_device("cuda:0")
    assert numerics.resolve_dtype("auto", "cpu") == torch.float32
    assert numerics.resolve_dtype("auto", "cuda") == torch.bfloat16  # a GPU computes in bf16, as the authors
    assert numerics.resolve_dtype("fp32", "cuda") == torch.float32
    with pytest.raises(numerics.NumericsError, match="dtype must be one of"):
        numerics.resolve_dtype("fp16", "cpu")
    assert numerics.resolve_dtype("bf16", "cpu") == torch.bfloat16  # asked for: the CPU's bf16 kernels
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert numerics.resolve_device("auto") == "cuda"
    with pytest.raises(numerics.NumericsError, match="only 1 CUDA device"):
        numerics.resolve_device("cuda:1")
