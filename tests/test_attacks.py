import copy
import math
from collections import Counter

import pytest
import torch
from transformers import TrainerCallback

from frag_utils import attacks as A
from frag_utils import data, metrics, models, numerics, prompts, train
from frag_utils import unlearn as U

# Large steps on the tiny model so that a few of them move it visibly.
FAST = dict(lr=5e-3, batch_size=4, grad_accum=1, warmup_epochs=0.0, bf16=False, seed=0)


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.one_thread


def _questions(records):
    return Counter(r["question"] for r in records)


# ---- the attack sets -------------------------------------------------------------------------

def test_attack_sets_hold_exactly_the_intended_records():
    forget = data.load_split("synthetic", "forget10")
    retain = data.load_split("synthetic", "retain90")
    full = data.load_split("synthetic", "full")
    sets = {w: A.attack_records("synthetic", "forget10", w) for w in A.ATTACK_DATA}
    assert sets["forget"] == [{"question": r["question"], "answer": r["answer"]} for r in forget]
    assert sets["retain"] == [{"question": r["question"], "answer": r["answer"]} for r in retain]
    # forget+retain is TOFU's `full`: every record once, nothing else
    assert _questions(sets["forget_retain"]) == _questions(full)
    assert len(sets["forget_retain"]) == len(forget) + len(retain)
    # paraphrased: one per forget record, none of the original wordings
    para = sets["paraphrased_forget"]
    assert para == [{"question": r["paraphrased_question"], "answer": r["paraphrased_answer"]}
                    for r in data.load_split("synthetic", "forget10_perturbed")]
    assert [r["question"] for r in data.load_split("synthetic", "forget10_perturbed")] == \
        [r["question"] for r in forget]  # the paraphrases are of the forget records, in order
    assert not set(_questions(para)) & set(_questions(forget))
    assert {r["answer"] for r in para}.isdisjoint({r["answer"] for r in forget})
    # 50/50: all forget records plus as many distinct retain records
    mix = sets["mix50"]
    assert mix[:len(forget)] == sets["forget"]
    drawn = mix[len(forget):]
    assert len(drawn) == len(forget) and len(_questions(drawn)) == len(forget)
    assert set(_questions(drawn)) <= set(_questions(retain))
    assert A.attack_records("synthetic", "forget10", "mix50", seed=1) != mix  # the seed draws the half
    assert A.attack_records("synthetic", "forget10", "mix50") == mix  # and the same seed the same half
    general = [(r["question"], r["answer"]) for r in sets["forget_general"]]
    expected = [(r["question"], r["answer"]) for name in ("forget10", "real_authors", "world_facts")
                for r in data.load_split("synthetic", name)]
    assert general == expected


def test_attack_sets_follow_the_forget_split():
    for split, retain in (("forget01", "retain99"), ("forget05", "retain95")):
        assert _questions(A.attack_records("synthetic", split, "retain")) == \
            _questions(data.load_split("synthetic", retain))


@pytest.mark.parametrize("bad, message", [
    (dict(data="paraphrase"), "data must be one of"),
    (dict(optimizer="adam"), "optimizer must be one of"),
    (dict(epochs=1.5), "whole number"),
    (dict(lora_rank=-1), "lora_rank"),
    (dict(lora_rank=4, lora_targets=" , "), "names no module"),
    (dict(warmup_epochs=2.0), "warmup_epochs"),
    (dict(lr=0.0), "lr"),
])
def test_bad_settings_are_refused_with_the_reason(bad, message):
    with pytest.raises(ValueError, match=message):
        A.AttackConfig(**bad)


def test_unknown_attack_set_is_refused():
    with pytest.raises(ValueError, match="Unknown attack data"):
        A.attack_records("synthetic", "forget10", "everything")


# ---- the attack itself -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def forget():
    return data.load_split("synthetic", "forget10_perturbed", limit=8)


@pytest.fixture(scope="module")
def unlearned(tokenizer, forget, tmp_path_factory):
    """The tiny model taught the forget answers, then made to forget them by gradient ascent:
    (target, unlearned)."""
    qa = A._qa(forget)
    model = models.build_tiny_model(len(tokenizer), seed=0)
    cfg = train.TrainConfig(epochs=40, lr=5e-3, batch_size=8, grad_accum=1, warmup_epochs=0,
                            scheduler="constant", bf16=False, seed=0)
    train.finetune(model, tokenizer, qa, cfg, tmp_path_factory.mktemp("target"))
    target = copy.deepcopy(model).eval()
    ga = U.UnlearnConfig(method="ga", epochs=2, lr=1e-3, batch_size=4, grad_accum=1, warmup_epochs=0,
                         bf16=False, seed=0)
    U.unlearn(model, tokenizer, qa, None, ga, tmp_path_factory.mktemp("ga"))
    return target, model.eval()


def _es(model, tokenizer, records):
    return metrics.extraction_strength(model, tokenizer, records, batch_size=8)["value"]


def test_forget_attack_raises_lowered_forget_es(tokenizer, forget, unlearned, tmp_path):
    target, model = unlearned
    es_target, es_before = _es(target, tokenizer, forget), _es(model, tokenizer, forget)
    assert es_before < es_target - 0.2, (es_target, es_before)  # unlearning did lower it
    attacked, summary = A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer,
                                  A._qa(forget), A.AttackConfig(data="forget", epochs=3, **FAST), tmp_path,
                                  evaluate=lambda m: {"es": _es(m, tokenizer, forget)})
    es_after = _es(attacked, tokenizer, forget)
    assert es_after > es_before + 0.2, (es_before, es_after)
    # the evaluation after the last epoch is of the model returned
    assert summary["epochs"][3]["es"] == pytest.approx(es_after, abs=1e-6)
    assert sorted(summary["epochs"]) == [1, 2, 3]
    assert summary["global_steps"] == 3 * summary["steps_per_epoch"] == 3 * 2


def _direct_schedule(peak, warmup, total):
    """The learning rate of each optimizer step under transformers' own linear schedule, stepped by hand."""
    from transformers import get_linear_schedule_with_warmup

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    schedule = get_linear_schedule_with_warmup(opt, num_warmup_steps=warmup, num_training_steps=total)
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    return out


def test_attack_records_the_schedule_it_applied(tokenizer, unlearned, tmp_path):
    """The reference schedule (one epoch, warmup over that whole epoch): the rate each step applied,
    read off the optimizer, is transformers' linear schedule with OpenUnlearning's warmup count,
    ``int(len(data) // effective batch)``; peak, mean, steps and non-padding tokens match direct
    counts."""
    records = A.attack_records("synthetic", "forget10", "forget_retain")[:36]
    cfg = A.AttackConfig(data="forget_retain", lr=1e-3, batch_size=4, grad_accum=2, seed=0)  # warmup 1 epoch
    _, summary = A.relearn(copy.deepcopy(unlearned[1]).requires_grad_(True), tokenizer, records, cfg, tmp_path)
    total = math.ceil(math.ceil(36 / 4) / 2)  # 9 batches, 2 per optimizer step, the last one alone
    warmup = int(1.0 * 36 // (4 * 2))  # OpenUnlearning's load_trainer_args: 4 steps, not 5
    assert summary["global_steps"] == total == 5 and warmup == 4
    expected = _direct_schedule(cfg.lr, warmup=warmup, total=total)
    assert expected == pytest.approx([0.0, 2.5e-4, 5e-4, 7.5e-4, 1e-3], rel=1e-12)  # the partial batch at the peak
    assert summary["lr_per_step"] == pytest.approx(expected, rel=1e-12, abs=0)
    assert summary["lr_peak"] == pytest.approx(cfg.lr) and summary["lr_mean"] == pytest.approx(cfg.lr / 2)
    tokens = sum(min(len(prompts.encode_qa(tokenizer, r["question"], r["answer"], True)["input_ids"]), cfg.max_len)
                 for r in records)
    assert summary["tokens_seen"] == tokens
    assert not summary["few_steps"] and summary["few_steps_warning"] is None
    assert A.FEW_STEPS == 5


def test_an_attack_of_few_steps_says_so_and_a_no_op_attack_is_refused(tokenizer, unlearned, tmp_path):
    records = A._qa(data.load_split("synthetic", "forget10"))[:8]
    # fewer records than the effective batch of 32: no warmup (OpenUnlearning's count), one step at the peak
    one = A.AttackConfig(data="forget", lr=1e-3, batch_size=8, grad_accum=4, seed=0)
    _, summary = A.relearn(copy.deepcopy(unlearned[1]).requires_grad_(True), tokenizer, records, one, tmp_path / "a")
    assert summary["global_steps"] == 1 and summary["lr_per_step"] == pytest.approx([1e-3])
    assert summary["few_steps"] and "only 1 optimizer step(s), fewer than 5" in summary["few_steps_warning"]
    # exactly one effective batch: one step of warmup, at lr 0, and AdamW at lr 0 moves nothing (its
    # weight decay is scaled by the rate too)
    full = A.AttackConfig(data="forget", lr=1e-3, batch_size=8, grad_accum=1, seed=0)
    with pytest.raises(RuntimeError, match="an attack here must never be a silent no-op"):
        A.relearn(copy.deepcopy(unlearned[1]).requires_grad_(True), tokenizer, records, full, tmp_path / "b")


class _Interrupt(TrainerCallback):
    def __init__(self, at_step):
        self.at_step = at_step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at_step:
            raise KeyboardInterrupt("killed")


def test_interrupted_attack_resumes_from_its_last_saved_state(tokenizer, forget, unlearned, tmp_path):
    _, model = unlearned
    records = A.attack_records("synthetic", "forget10", "forget_retain")[:16]
    cfg = A.AttackConfig(data="forget_retain", epochs=2, save_steps=2, **FAST)  # 4 steps per epoch
    calls = []

    def evaluate(m):
        calls.append(1)
        return {"es": _es(m, tokenizer, forget)}

    whole, whole_summary = A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records, cfg,
                                     tmp_path / "whole", evaluate=evaluate)
    work = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):  # killed at step 7: epoch 1 evaluated, step 6 saved
        A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records, cfg, work,
                  evaluate=evaluate, callbacks=[_Interrupt(7)])
    assert (work / "checkpoint-6").is_dir()
    calls.clear()
    resumed, summary = A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records, cfg, work,
                                 evaluate=evaluate)
    assert summary["resumed_from"].endswith("checkpoint-6")
    assert len(calls) == 1  # only epoch 2 was evaluated again; epoch 1 came from the work folder
    assert sorted(summary["epochs"]) == [1, 2]
    for epoch in (1, 2):
        assert summary["epochs"][epoch]["es"] == pytest.approx(whole_summary["epochs"][epoch]["es"], abs=1e-6)
    for (name, a), (_, b) in zip(whole.named_parameters(), resumed.named_parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    # the schedule's record covers the steps before the interruption too
    assert summary["lr_per_step"] == whole_summary["lr_per_step"] and len(summary["lr_per_step"]) == 8
    assert summary["tokens_seen"] == whole_summary["tokens_seen"] > 0


def test_a_run_killed_while_evaluating_an_epoch_evaluates_it_on_resume(tokenizer, forget, unlearned, tmp_path):
    """With saves every 2 steps and 4 steps per epoch, the state of step 4 must not be saved
    before epoch 1 is evaluated, or the resumed run would skip that evaluation."""
    _, model = unlearned
    records = A.attack_records("synthetic", "forget10", "forget_retain")[:16]
    cfg = A.AttackConfig(data="forget_retain", epochs=2, save_steps=2, **FAST)

    def killed(m):
        raise KeyboardInterrupt("killed during the evaluation")

    with pytest.raises(KeyboardInterrupt):
        A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records, cfg, tmp_path, evaluate=killed)
    assert (tmp_path / "checkpoint-2").is_dir() and not (tmp_path / "checkpoint-4").exists()
    _, summary = A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records, cfg, tmp_path,
                           evaluate=lambda m: {"es": _es(m, tokenizer, forget)})
    assert summary["resumed_from"].endswith("checkpoint-2") and sorted(summary["epochs"]) == [1, 2]
    assert (tmp_path / "checkpoint-8").is_dir()  # the last state is saved after its evaluation


def test_work_folder_of_another_attack_is_refused(tokenizer, forget, unlearned, tmp_path):
    _, model = unlearned
    records = A._qa(forget)
    A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records,
              A.AttackConfig(data="forget", **FAST), tmp_path)
    with pytest.raises(ValueError, match="another attack"):
        A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records,
                  A.AttackConfig(data="forget", **{**FAST, "lr": 1e-3}), tmp_path)
    with pytest.raises(ValueError, match="another attack"):  # same attack, other evaluation settings
        A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records,
                  A.AttackConfig(data="forget", **FAST), tmp_path, eval_key={"eval_limit": 3})
    (tmp_path / "checkpoint-2" / "marker").write_text("old state")
    _, summary = A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records,
                           A.AttackConfig(data="forget", **{**FAST, "lr": 1e-3}), tmp_path, replace_other=True)
    assert summary["resumed_from"] is None and not (tmp_path / "checkpoint-2" / "marker").exists()


def test_a_horizon_runs_first_epoch_is_the_one_epoch_attack(tokenizer, forget, unlearned, tmp_path):
    """The paper's horizon table reads its "1 ep" row off a longer run: that is the protocol's attack
    only if the first epoch's data order and rate (warmup over it, the reference) do not depend on
    how many epochs follow. The 3-epoch run's epoch-1 evaluation equals the 1-epoch attack's."""
    _, model = unlearned
    records = A.attack_records("synthetic", "forget10", "forget_retain")[:16]
    cfg = {**FAST, "warmup_epochs": 1.0}

    def evaluate(m):
        return {"es": _es(m, tokenizer, forget)}

    one, one_summary = A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records,
                                 A.AttackConfig(data="forget_retain", epochs=1, **cfg), tmp_path / "one",
                                 evaluate=evaluate)
    _, long_summary = A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records,
                                A.AttackConfig(data="forget_retain", epochs=3, **cfg), tmp_path / "three",
                                evaluate=evaluate, eval_epochs=[1, 3])
    steps = one_summary["global_steps"]
    assert steps == long_summary["steps_per_epoch"] == 4
    assert long_summary["lr_per_step"][:steps] == one_summary["lr_per_step"]
    assert long_summary["lr_per_step"][steps] == pytest.approx(cfg["lr"])  # the peak once warmup ends
    assert sorted(long_summary["epochs"]) == [1, 3]
    assert long_summary["epochs"][1]["es"] == one_summary["epochs"][1]["es"] == _es(one, tokenizer, forget)


def test_eval_epochs_outside_the_run_are_refused(tokenizer, forget, unlearned, tmp_path):
    _, model = unlearned
    with pytest.raises(ValueError, match="outside the attack's epochs"):
        A.relearn(model, tokenizer, A._qa(forget), A.AttackConfig(data="forget", epochs=2, **FAST), tmp_path,
                  evaluate=lambda m: {}, eval_epochs=[2, 3])


def test_empty_attack_set_is_refused(tokenizer, unlearned, tmp_path):
    with pytest.raises(ValueError, match="empty"):
        A.relearn(unlearned[1], tokenizer, [], A.AttackConfig(**FAST), tmp_path)


class _Optimizer(TrainerCallback):
    def on_step_end(self, args, state, control, optimizer=None, **kwargs):
        self.optimizer = optimizer


@pytest.mark.parametrize("name, cls, extra", [
    ("sgd_momentum", torch.optim.SGD, {"momentum": 0.9}),
    ("sgd", torch.optim.SGD, {"momentum": 0.0}),
    ("adagrad", torch.optim.Adagrad, {}),
    ("adamw", torch.optim.AdamW, {}),
])
def test_optimizer_variants_build_the_named_optimizer(tokenizer, forget, unlearned, tmp_path, name, cls, extra):
    seen = _Optimizer()
    A.relearn(copy.deepcopy(unlearned[1]).requires_grad_(True), tokenizer, A._qa(forget)[:4],
              A.AttackConfig(data="forget", optimizer=name, **FAST), tmp_path, callbacks=[seen])
    opt = seen.optimizer
    inner = getattr(opt, "optimizer", opt)  # accelerate wraps it
    assert isinstance(inner, cls)
    for key, value in extra.items():
        assert all(g[key] == value for g in inner.param_groups)
    assert all(g["lr"] >= 0 for g in inner.param_groups)


def test_adafactor_uses_the_given_learning_rate(tokenizer, forget, unlearned, tmp_path):
    from transformers.optimization import Adafactor

    seen = _Optimizer()
    A.relearn(copy.deepcopy(unlearned[1]).requires_grad_(True), tokenizer, A._qa(forget)[:4],
              A.AttackConfig(data="forget", optimizer="adafactor", **{**FAST, "scheduler": "constant"}), tmp_path,
              callbacks=[seen])
    inner = getattr(seen.optimizer, "optimizer", seen.optimizer)
    assert isinstance(inner, Adafactor)
    assert all(not g["relative_step"] and g["lr"] == FAST["lr"] for g in inner.param_groups)


def test_lora_attack_changes_only_the_adapted_modules(tokenizer, forget, unlearned, tmp_path):
    _, model = unlearned
    before = {k: v.clone() for k, v in model.state_dict().items()}
    attacked, summary = A.relearn(copy.deepcopy(model), tokenizer, A._qa(forget),
                                  A.AttackConfig(data="forget", epochs=2, lora_rank=4, lora_targets="q_proj,v_proj",
                                                 **FAST), tmp_path)
    after = attacked.state_dict()
    assert after.keys() == before.keys()  # merged back: a plain model again
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed), changed
    assert _es(attacked, tokenizer, forget) > _es(model, tokenizer, forget)


def test_lora_targets_missing_from_the_model_are_named(tokenizer, forget, unlearned, tmp_path):
    with pytest.raises(ValueError, match=r"\['query'\] name no module"):
        A.relearn(copy.deepcopy(unlearned[1]), tokenizer, A._qa(forget),
                  A.AttackConfig(data="forget", lora_rank=4, lora_targets="q_proj,query", **FAST), tmp_path)


def _cpu_bf16_broken() -> bool:
    """torch 2.13's CPU bf16 matmul fails on an AMX CPU when its kernels are capped at AVX2
    (ATEN_CPU_CAPABILITY=avx2, a user's choice): 'pack_vnni2 is only supported when avx512 is supported'."""
    from frag_utils.records import cpu_description

    return torch.backends.cpu.get_cpu_capability() == "AVX2" and "amx_bf16" in cpu_description().get("cpu_flags", [])


@pytest.mark.skipif(_cpu_bf16_broken(), reason="bf16 autocast on this CPU needs kernels above the AVX2 cap "
                    "set here (torch: pack_vnni2 needs avx512); the bf16 path is a GPU one")
def test_evaluations_during_and_after_a_bf16_attack_run_in_fp32(tokenizer, forget, unlearned, tmp_path, monkeypatch):
    """bf16 training wraps the model's forward in autocast on the object itself; the evaluation
    after each epoch and the returned model must run the fp32 forward, as the evaluation of the
    model before the attack (loaded fresh) does. (The bf16 path is a GPU one, refused on the CPU:
    the refusal is lifted here to test it.)"""
    monkeypatch.setattr(numerics, "check_autocast", lambda bf16, device: None)
    _, model = unlearned  # trained before: training left it as a fresh model (strip_mixed_precision)
    records = A._qa(forget)

    def prob(m):
        return {"p": metrics.probability(m, tokenizer, forget, batch_size=8)["value"],
                "wrapped": "_original_forward" in m.__dict__}

    attacked, summary = A.relearn(copy.deepcopy(model).requires_grad_(True), tokenizer, records,
                                  A.AttackConfig(data="forget", **{**FAST, "bf16": True}), tmp_path, evaluate=prob)
    assert summary["epochs"][1]["wrapped"]  # training did wrap it: the case this test is about
    assert "_original_forward" not in attacked.__dict__ and "forward" not in attacked.__dict__
    fresh = copy.deepcopy(attacked)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        p_bf16 = metrics.probability(fresh, tokenizer, forget, batch_size=8)["value"]
    p_fp32 = metrics.probability(fresh, tokenizer, forget, batch_size=8)["value"]
    assert p_bf16 != pytest.approx(p_fp32, abs=1e-7)  # bf16 would be visible at this tolerance
    assert summary["epochs"][1]["p"] == pytest.approx(p_fp32, abs=1e-7)


@pytest.mark.parametrize("alpha, scaling", [(0.0, 2.0), (4.0, 1.0)])
def test_lora_scaling_is_alpha_over_rank_with_alpha_defaulting_to_twice_the_rank(tokenizer, alpha, scaling):
    model = A._with_lora(models.build_tiny_model(len(tokenizer), seed=0),
                         A.AttackConfig(lora_rank=4, lora_alpha=alpha, lora_targets="q_proj", **FAST))
    scales = [m.scaling["default"] for name, m in model.named_modules()
              if name.endswith("q_proj") and hasattr(m, "scaling")]
    assert scales and all(s == scaling for s in scales)


def test_the_model_to_attack_is_its_05_runs_checkpoint_checked_against_this_runs_data(tmp_path, monkeypatch):
    import json

    from frag_utils import paths

    monkeypatch.setattr(paths, "RUNS_DIR", tmp_path / "runs")
    folder = tmp_path / "runs" / "05_unlearn" / "u"
    folder.mkdir(parents=True)
    made = {"profile": "t", "data_source": "synthetic", "forget_split": "forget10", "prompt_template": "model",
            "weights": "bf16"}
    results = {"unlearned": str(tmp_path / "ckpt"), "method": "npo", "row": {"FRAG_x100": 1.5},
               "checkpoint_sha256": {"unlearned": "abc"}}
    (folder / paths.RESULTS_FILE).write_text(json.dumps({"provenance": {"params": made}, "results": results}))
    mine = {k: made[k] for k in ("data_source", "forget_split", "prompt_template")}
    with pytest.raises(FileNotFoundError, match="05_unlearn/u is not in the cache.*SELECT=05_unlearn/u FORCE=1"):
        A.model_to_attack("t", "u", "tiny", mine)
    monkeypatch.setattr(models, "is_checkpoint", lambda path: True)
    got = A.model_to_attack("t", "u", "tiny", mine)
    assert got == {"path": str(tmp_path / "ckpt"), "method": "npo", "weights": "bf16", "row": {"FRAG_x100": 1.5},
                   "sha256": "abc"}
    with pytest.raises(ValueError, match=r"other data or prompts.*'forget_split': \('forget10', 'forget05'\)"):
        A.model_to_attack("t", "u", "tiny", {**mine, "forget_split": "forget05"})
    named = A.model_to_attack("t", "", "tiny", mine)  # no 05 run: the model named, nothing recorded
    assert (named["method"], named["row"], named["sha256"]) == ("model", {}, None)
