import shutil

import pytest
import torch
from transformers import TrainerCallback

from frag_utils import data, metrics, models, paths, runs, train

from conftest import native_bf16, same_weights

CFG = train.TrainConfig(epochs=3, lr=1e-2, batch_size=4, grad_accum=1, warmup_epochs=0.5,
                        bf16=False, seed=0)


def _answer_nll(model, tokenizer, recs):
    return sum(s.avg_nll for s in metrics.answer_stats(model, tokenizer,
                                                        [(r["question"], r["answer"]) for r in recs]))


def test_finetune_lowers_answer_loss_and_is_seeded(tokenizer, qa_records, tmp_path):
    recs = qa_records[:8]
    a = models.build_tiny_model(len(tokenizer), seed=0)
    before = _answer_nll(a, tokenizer, recs)
    summary = train.finetune(a, tokenizer, recs, CFG, tmp_path / "a")
    assert _answer_nll(a.eval(), tokenizer, recs) < 0.9 * before
    assert summary["global_steps"] == 3 * train.steps_per_epoch(8, CFG) == 6
    b = models.build_tiny_model(len(tokenizer), seed=0)
    train.finetune(b, tokenizer, recs, CFG, tmp_path / "b")
    assert same_weights(a, b)


class _Killed(Exception):
    pass


class _KillAfterFirstSave(TrainerCallback):
    def on_save(self, args, state, control, **kwargs):
        raise _Killed()


def test_interrupted_training_resumes_to_the_same_weights(tokenizer, qa_records, tmp_path):
    recs = qa_records[:8]
    full = models.build_tiny_model(len(tokenizer), seed=0)
    train.finetune(full, tokenizer, recs, CFG, tmp_path / "uninterrupted")

    killed = models.build_tiny_model(len(tokenizer), seed=0)
    trainer = train.make_trainer(killed, tokenizer, train.QADataset(tokenizer, recs), CFG, tmp_path / "w",
                                 callbacks=[_KillAfterFirstSave()])
    with pytest.raises(_Killed):
        trainer.train()
    assert list((tmp_path / "w").glob("checkpoint-*"))
    restarted = models.build_tiny_model(len(tokenizer), seed=0)  # a fresh process starts from the base
    summary = train.finetune(restarted, tokenizer, recs, CFG, tmp_path / "w")
    assert summary["resumed_from"] is not None
    sa, sb = full.state_dict(), restarted.state_dict()
    assert all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)


def test_a_checkpoint_cut_off_while_written_is_dropped_and_the_run_resumes_before_it(
        tokenizer, qa_records, tmp_path, monkeypatch):
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "cache"))
    recs = qa_records[:8]
    full = models.build_tiny_model(len(tokenizer), seed=0)
    train.finetune(full, tokenizer, recs, CFG, tmp_path / "uninterrupted")

    spec = runs.RunSpec(paths.NOTEBOOKS_DIR / "05_unlearn.ipynb", {"profile": "t"}, "t__method=ga")
    work = tmp_path / "cache" / "checkpoints" / "t" / "unlearned_forget10--t__method=ga.work"
    killed = models.build_tiny_model(len(tokenizer), seed=0)
    trainer = train.make_trainer(killed, tokenizer, train.QADataset(tokenizer, recs), CFG, work,
                                 callbacks=[_KillAfterFirstSave()])
    with pytest.raises(_Killed):
        trainer.train()
    # what a kill while writing the next one leaves: the weights, part of the optimizer state, and
    # no RNG or trainer state (the Trainer writes trainer_state.json last)
    shutil.copytree(work / "checkpoint-2", work / "checkpoint-4")
    (work / "checkpoint-4" / "trainer_state.json").unlink()
    (work / "checkpoint-4" / "rng_state.pth").unlink()
    optimizer = work / "checkpoint-4" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])
    other = tmp_path / "cache" / "checkpoints" / "t" / "attacks--t.x__unlearned_run=t__method=ga.work" / "checkpoint-4"
    shutil.copytree(work / "checkpoint-4", other)  # another run's, perhaps being written by another runner
    with pytest.raises(FileNotFoundError, match="trainer_state.json"):
        train.finetune(models.build_tiny_model(len(tokenizer), seed=0), tokenizer, recs, CFG, work)
    (work / "checkpoint-6").mkdir()  # a trainer state cut off mid-write
    (work / "checkpoint-6" / "trainer_state.json").write_text('{"global_step": ')

    assert runs.drop_torn_checkpoints(spec) == [work / "checkpoint-4", work / "checkpoint-6"]
    assert other.is_dir()
    assert sorted(c.name for c in work.glob("checkpoint-*")) == ["checkpoint-2"]
    restarted = models.build_tiny_model(len(tokenizer), seed=0)
    summary = train.finetune(restarted, tokenizer, recs, CFG, work)
    assert summary["resumed_from"].endswith("checkpoint-2")
    sa, sb = full.state_dict(), restarted.state_dict()
    assert all(torch.allclose(sa[k], sb[k], atol=1e-6) for k in sa)
    assert runs.drop_torn_checkpoints(spec) == []


def test_train_or_reuse_reuses_only_matching_checkpoints(tokenizer, qa_records, tmp_path, monkeypatch):
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "cache"))
    recs = qa_records[:4]
    cfg = train.TrainConfig(epochs=1, lr=1e-3, batch_size=4, grad_accum=1, warmup_epochs=0, bf16=False)
    out = tmp_path / "ckpt"
    first = train.train_or_reuse("tiny", recs, cfg, out, {"split": "x"})
    assert first["reused"] is False and models.is_checkpoint(out)
    assert train.train_or_reuse("tiny", recs, cfg, out, {"split": "x"})["reused"] is True
    assert train.train_or_reuse("tiny", recs, cfg, out, {"split": "y"})["reused"] is False
    assert not (tmp_path / "ckpt.work").exists()


def test_bad_training_settings():
    with pytest.raises(ValueError, match="lr"):
        train.TrainConfig(lr=0)
    with pytest.raises(ValueError, match="warmup_epochs"):
        train.TrainConfig(epochs=1, warmup_epochs=2)
    with pytest.raises(ValueError, match="empty"):
        train.QADataset(None, [])


def test_training_on_several_visible_gpus_is_refused_not_wrapped_in_dataparallel(tokenizer, qa_records, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    model = models.build_tiny_model(len(tokenizer), seed=0)
    dataset = train.QADataset(tokenizer, qa_records[:4], max_len=64)
    with pytest.raises(ValueError, match="2 GPUs are visible.*CUDA_VISIBLE_DEVICES=0"):
        train.make_trainer(model, tokenizer, dataset, CFG, tmp_path / "work")
    # the device is where a run computes, not what: the recorded settings do not name it
    assert "device" not in train.TrainConfig(device="cpu").as_dict()
    with pytest.raises(Exception, match="not a device"):
        train.TrainConfig(device="gpu0")


def test_steps_per_epoch_count_every_process_of_a_launch(monkeypatch):
    cfg = train.TrainConfig(batch_size=4, grad_accum=2)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert train.steps_per_epoch(30, cfg) == 4  # ceil(ceil(30 / 4) / 2): one process
    monkeypatch.setenv("WORLD_SIZE", "2")  # accelerate launch / torchrun with two processes
    assert train.steps_per_epoch(30, cfg) == 2  # ceil(ceil(30 / 8) / 2)
    assert train.steps_per_epoch(30, cfg, devices=1) == 4
    # OpenUnlearning's warmup count floors the records over the effective batch of every process
    warm = train.TrainConfig(epochs=2, batch_size=4, grad_accum=2, warmup_epochs=1.5)
    assert train.warmup_steps(30, warm) == 2 and train.warmup_steps(30, warm, devices=1) == 5  # 45 // 16, 45 // 8


def _trainers(model, tokenizer, recs, tmp_path):
    """The Trainer's default loss and :class:`train.AnswerLossTrainer` on one batch of ``recs``."""
    from transformers import Trainer

    ds = train.QADataset(tokenizer, recs)
    cfg = train.TrainConfig(batch_size=len(recs), grad_accum=1, seed=0, device="cpu")
    default = train.make_trainer(model, tokenizer, ds, cfg, tmp_path / "d", trainer_cls=Trainer)
    ours = train.make_trainer(model, tokenizer, ds, cfg, tmp_path / "o")
    batch = default.data_collator([ds[i] for i in range(len(ds))])
    return default, ours, batch


# bf16 autocast on SmolLM2 runs only where the CPU computes bf16 in hardware: emulated, this one
# test ran for over 20 minutes on an AVX2-only Zen 3; the tiny model under autocast checks the same
# code path on any CPU in a second.
_SMOLLM2_AUTOCAST = pytest.param("smollm2_autocast", marks=[pytest.mark.kernel_paths, pytest.mark.skipif(
    not native_bf16(), reason="this CPU has no native bf16 (AVX512-BF16 or AMX): torch would emulate SmolLM2's "
    "bf16 matrix products, for over 20 minutes; tiny_autocast covers the same path")])
# bf16 products round as the kernels block them (AMX tiles, AVX512-BF16, emulated): tests/test_kernel_paths.py
_TINY_AUTOCAST = pytest.param("tiny_autocast", marks=pytest.mark.kernel_paths)


@pytest.mark.parametrize("which", ["tiny", _TINY_AUTOCAST, "smollm2", _SMOLLM2_AUTOCAST, "smollm2_lora"])
def test_label_position_loss_equals_the_trainers_default_loss(which, tokenizer, qa_records, tmp_path):
    """The loss from logits at label positions only equals the Trainer's causal-LM loss on full
    logits (batch mean, and the sum over the accumulated batch's label tokens), and so do its
    gradients; on the tiny model and on the embedded SmolLM2, plain and with LoRA adapters, and
    with the model's forward wrapped in bf16 autocast as accelerate wraps it for ``bf16=True``
    training (the projection must run inside it, as the full logits do): the tiny model on any
    CPU, SmolLM2 where the CPU has native bf16."""
    if which.startswith("tiny"):
        model = models.build_tiny_model(len(tokenizer), seed=0)
    else:
        model, _ = models.load_model(models.SMOLLM2)
    if which.endswith("lora"):
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    if which.endswith("autocast"):
        model.forward = torch.autocast("cpu", dtype=torch.bfloat16)(model.forward)
    model.train()
    recs = [dict(r) for r in data.load_split("synthetic", "forget10", limit=8)]
    default, ours, batch = _trainers(model, tokenizer, recs, tmp_path)
    labelled = int((batch["labels"][:, 1:] != -100).sum())
    assert labelled < 0.5 * batch["labels"].numel()  # the saving is real: most positions carry no label
    for n_items in (None, torch.tensor(3 * labelled)):
        grads = []
        for trainer in (default, ours):
            model.zero_grad()
            loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=n_items)
            loss.backward()
            grads.append((float(loss.detach()),
                          {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
        (a, ga), (b, gb) = grads
        # bf16 logits: a projection in fp32 outside autocast differs by about 1e-3 here
        loose = which.endswith("autocast")
        assert abs(a - b) <= (1e-5 if loose else 1e-6) * max(1.0, abs(a)), (n_items, a, b)
        assert ga.keys() == gb.keys() and ga
        if loose:
            # bf16 logits: the same to a bf16 GEMM's rounding, which depends on how the kernel blocks the rows
            # it is given (all positions against the label positions): per tensor, the difference's norm within
            # 2^-6 (four bf16 ulps) of the gradient's. Measured on an Intel Xeon (family 6 model 167), worst
            # tensor: SmolLM2 0.0076 with AMX, 3.5e-5 with AMX capped (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, the
            # AVX512-BF16 kernels of a Zen 4); the tiny model 0.0019 and 1.7e-7.
            worst = max(float((ga[k] - gb[k]).norm() / ga[k].norm().clamp_min(1e-12)) for k in ga)
            assert worst < 2 ** -6, worst
        else:  # fp32: the same numbers to rounding, element by element
            worst = max(float((ga[k] - gb[k]).abs().max() / ga[k].abs().max().clamp_min(1e-12)) for k in ga)
            assert worst < 1e-4, worst
