"""The measures of how fast the attack's loss can fall from a checkpoint (frag_utils.sharpness), each against its
definition computed the slow way on the tiny model: the loss token by token, the gradient's norm against a finite
difference of the loss along the gradient, SAM's rise against its first-order value; every weight put back; the
probe against one AdamW step written out."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from frag_utils import attacks, prompts, sharpness, train


def _weights(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture()
def setup(partly_trained, tokenizer, qa_records):
    batches = sharpness.answer_batches(tokenizer, qa_records, batch_size=3)
    params = [p for p in partly_trained.parameters() if p.requires_grad]
    return partly_trained, tokenizer, qa_records, batches, params


def test_the_loss_is_the_mean_nll_of_every_answer_token_over_the_whole_set(setup):
    model, tokenizer, records, batches, _ = setup
    nll = []
    with torch.no_grad():
        for r in records:  # one example at a time, the full logits, every answer token
            enc = prompts.encode_qa(tokenizer, r["question"], r["answer"])
            ids = torch.tensor([enc["input_ids"]])
            logits = model(input_ids=ids).logits[0, :-1].float()
            labels = torch.tensor(enc["labels"][1:])
            keep = labels != prompts.IGNORE
            nll += F.cross_entropy(logits[keep], labels[keep], reduction="none").tolist()
    assert sharpness.mean_answer_loss(model, batches) == pytest.approx(np.mean(nll), rel=1e-5)
    # three batches of unequal answer lengths: a mean over tokens, not over batches
    assert len(batches) == 3


def test_the_gradient_norm_is_the_slope_of_the_loss_along_the_gradient(setup):
    model, _, _, batches, params = setup
    before = _weights(model)
    loss, grads = sharpness.loss_gradient(model, batches, params)
    assert loss == pytest.approx(sharpness.mean_answer_loss(model, batches), rel=1e-6)
    g = sharpness.norm(grads)
    h = 1e-3
    up = sharpness._shifted_loss(model, batches, params, [d * (h / g) for d in grads])
    down = sharpness._shifted_loss(model, batches, params, [d * (-h / g) for d in grads])
    assert (up - down) / (2 * h) == pytest.approx(g, rel=2e-2)
    assert _same(before, _weights(model))  # every weight put back, bit for bit


def test_random_sharpness_is_seeded_and_leaves_the_weights_as_they_were(setup):
    model, _, _, batches, params = setup
    before = _weights(model)
    a = sharpness.random_sharpness(model, batches, params, radius=0.05, seeds=(0, 1))
    b = sharpness.random_sharpness(model, batches, params, radius=0.05, seeds=(0, 1))
    assert a == b and len(a["rises"]) == 2 and a["sharpness"] == pytest.approx(np.mean(a["rises"]))
    assert a["rises"][0] != a["rises"][1]  # two directions
    assert _same(before, _weights(model))
    with pytest.raises(ValueError, match="radius must be > 0"):
        sharpness.random_sharpness(model, batches, params, radius=0.0)


def test_sam_sharpness_rises_by_r_times_the_gradient_norm_to_first_order(setup):
    model, _, _, batches, params = setup
    before = _weights(model)
    loss, grads = sharpness.loss_gradient(model, batches, params)
    small = sharpness.sam_sharpness(model, batches, params, grads, loss, radius=1e-6)
    assert small["r"] == pytest.approx(1e-6 * sharpness.norm([p.detach() for p in params]))
    assert small["sharpness"] == pytest.approx(small["r"] * sharpness.norm(grads), rel=5e-2)
    assert _same(before, _weights(model))


def _manual_adamw_step(model, batch, lr, weight_decay, max_grad_norm=1.0, eps=1e-8, betas=(0.9, 0.999)):
    """One AdamW step written out: the batch's mean answer-token loss, its gradient clipped to ``max_grad_norm``,
    Adam's bias-corrected first step m̂/(√v̂ + eps) = g/(|g| + eps), decoupled weight decay on every weight but
    biases and norms (as Hugging Face's Trainer groups them)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    nll, _ = train.answer_token_nll(model, batch)
    loss = nll.sum() / (batch["labels"][:, 1:] != train.IGNORE).sum()
    grads = torch.autograd.grad(loss, [p for _, p in named])
    total = torch.sqrt(sum(g.double().pow(2).sum() for g in grads))
    clip = min(1.0, max_grad_norm / (float(total) + 1e-6))
    with torch.no_grad():
        for (name, p), g in zip(named, grads):
            g = g * clip
            m, v = (1 - betas[0]) * g, (1 - betas[1]) * g * g
            m_hat, v_hat = m / (1 - betas[0]), v / (1 - betas[1])
            if "bias" not in name and "norm" not in name.lower():
                p.mul_(1 - lr * weight_decay)
            p.sub_(lr * m_hat / (v_hat.sqrt() + eps))
    return model


def test_the_probe_is_one_adamw_step_of_the_attack_at_its_peak_rate(partly_trained, tokenizer, qa_records, tmp_path):
    records = [{"question": r["question"], "answer": r["answer"]} for r in qa_records]
    config = attacks.AttackConfig(lr=1e-3, batch_size=len(records), grad_accum=1, seed=42, device="cpu")
    probed, summary = sharpness.probe(copy.deepcopy(partly_trained), tokenizer, records, config, tmp_path / "w")
    assert summary["global_steps"] == 1 and summary["lr_per_step"] == [1e-3]  # the peak from the first step
    # the whole set is the one batch, so the batch the attack draws first is known
    batch = sharpness.answer_batches(tokenizer, records, batch_size=len(records))[0]
    manual = _manual_adamw_step(copy.deepcopy(partly_trained).train(), batch, lr=1e-3, weight_decay=0.01)
    pairs = [(a.detach(), b.detach(), c.detach()) for a, b, c in
             zip(probed.parameters(), manual.parameters(), partly_trained.parameters())]
    assert max(float((a - c).abs().max()) for a, _, c in pairs) == pytest.approx(1e-3, rel=0.05)  # Adam: about lr
    # the probe's step is the manual one: to float rounding, which g/(|g| + eps) magnifies where |g| is near eps
    assert max(float((a - b).abs().max()) for a, b, _ in pairs) < 5e-3 * 1e-3
    assert np.mean([float((a - b).abs().mean()) for a, b, _ in pairs]) < 1e-8
    assert not (tmp_path / "w").exists()  # no state kept: a probe is never resumed
    with pytest.raises(ValueError, match="steps must be at least 1"):
        sharpness.probe(partly_trained, tokenizer, records, config, tmp_path / "w", steps=0)


def test_the_probes_step_is_on_the_batch_the_attack_draws_first(partly_trained, tokenizer, tmp_path, monkeypatch):
    from frag_utils import data

    records = [{"question": r["question"], "answer": r["answer"]} for r in data.load_split("synthetic", "full")[:48]]
    seen = []
    step = train.AnswerLossTrainer.compute_loss

    def recording(self, model, inputs, *args, **kwargs):
        seen.append(inputs["input_ids"].clone())
        return step(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(train.AnswerLossTrainer, "compute_loss", recording)
    config = attacks.AttackConfig(lr=1e-3, batch_size=16, grad_accum=1, seed=42, device="cpu")
    attacks.relearn(copy.deepcopy(partly_trained), tokenizer, records, config, tmp_path / "attack")
    first_of_attack, seen[:] = seen[0], []
    sharpness.probe(copy.deepcopy(partly_trained), tokenizer, records, config, tmp_path / "probe")
    assert len(seen) == 1 and torch.equal(seen[0], first_of_attack)  # one step, on the attack's first batch of 16
    other_seed = attacks.AttackConfig(lr=1e-3, batch_size=16, grad_accum=1, seed=1, device="cpu")
    seen.clear()
    sharpness.probe(copy.deepcopy(partly_trained), tokenizer, records, other_seed, tmp_path / "probe")
    assert not torch.equal(seen[0], first_of_attack)  # the seed draws the batch
