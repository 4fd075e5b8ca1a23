import math

import numpy as np
import pytest
import torch
from scipy import stats as sstats

from frag_utils import data, metrics, models, prompts


def _nll_slow(model, tokenizer, question, answer):
    """Per-token NLL of answer (+ end of turn) by a plain forward pass over one unpadded example."""
    enc = prompts.encode_qa(tokenizer, question, answer)
    ids = torch.tensor([enc["input_ids"]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    total, n = 0.0, 0
    for t in range(enc["prompt_len"], len(enc["input_ids"])):
        logp = torch.log_softmax(logits[t - 1].double(), -1)
        total -= float(logp[enc["input_ids"][t]])
        n += 1
    return total / n


@pytest.mark.parametrize("hits,expected", [
    ([1, 1, 1], 1.0),  # whole answer reproduced from the prompt: k = 0
    ([0, 1, 1], 1 - 1 / 3),  # from the first answer token on: k = 1
    ([1, 0, 1], 1 - 2 / 3),
    ([1, 1, 0], 1 / 3),  # not even the last token: ES = 1/|y|
    ([0, 0, 0], 1 / 3),
    ([1], 1.0),
])
def test_es_from_hits_hand_cases(hits, expected):
    assert metrics.es_from_hits(torch.tensor(hits, dtype=torch.bool)) == pytest.approx(expected)


def test_es_one_pass_equals_generation_definition(partly_trained, tokenizer, qa_records):
    fast = metrics.extraction_strength(partly_trained, tokenizer, qa_records, batch_size=8)
    slow = metrics.extraction_strength_by_generation(partly_trained, tokenizer, qa_records)
    assert fast["per_example"] == pytest.approx(slow["per_example"])
    # the model gets some answers partly right: the test is not all-zero or all-one
    assert len({round(v, 6) for v in fast["per_example"]}) >= 3
    assert 0 < fast["value"] < 1


def test_probability_and_truth_ratio_against_slow_definition(partly_trained, tokenizer, qa_records):
    recs = qa_records[:4]
    prob = metrics.probability(partly_trained, tokenizer, recs, batch_size=3)
    for r, p in zip(recs, prob["per_example"]):
        assert p == pytest.approx(math.exp(-_nll_slow(partly_trained, tokenizer, r["question"], r["answer"])), rel=1e-4)

    tr = metrics.truth_ratio(partly_trained, tokenizer, recs, "true_better", batch_size=3)
    tr1 = metrics.truth_ratio(partly_trained, tokenizer, recs, "closer_to_1_better", batch_size=5)
    expected = []
    for r in recs:
        pc = math.exp(-_nll_slow(partly_trained, tokenizer, r["question"], r["paraphrased_answer"]))
        wrong = [_nll_slow(partly_trained, tokenizer, r["question"], w) for w in r["perturbed_answer"]]
        pw = math.prod(math.exp(-x) for x in wrong) ** (1 / len(wrong))  # geometric mean
        expected.append(pw / pc)
    assert tr["per_example"] == pytest.approx(expected, rel=1e-4)
    assert tr["value"] == pytest.approx(np.mean([max(0, 1 - x) for x in expected]), rel=1e-4)
    assert tr1["value"] == pytest.approx(np.mean([min(x, 1 / x) for x in expected]), rel=1e-4)


def test_probability_with_options_against_slow_definition(partly_trained, tokenizer):
    recs = [{"question": "What is the capital of France?", "answer": "Paris",
             "perturbed_answer": ["Lyon", "Nice", "Marseille"]}]
    got = metrics.probability_with_options(partly_trained, tokenizer, recs)["value"]
    p = [math.exp(-_nll_slow(partly_trained, tokenizer, recs[0]["question"], a))
         for a in ["Paris", "Lyon", "Nice", "Marseille"]]
    assert got == pytest.approx(p[0] / sum(p), rel=1e-4)


def test_rouge_l_recall_hand_cases():
    assert metrics.rouge_l_recall("the cat", "the cat sat on the mat") == pytest.approx(2 / 6)
    assert metrics.rouge_l_recall("Paris is the capital", "Paris") == 1.0
    assert metrics.rouge_l_recall("he was running", "he runs") == 1.0  # Porter stemmer
    assert metrics.rouge_l_recall("", "Paris") == 0.0


def test_harmonic_mean_matches_scipy():
    vals = [0.2, 0.5, 0.9, 0.33]
    assert metrics.harmonic_mean(vals) == pytest.approx(sstats.hmean(vals))
    assert metrics.harmonic_mean([0.0, 0.5]) == 0.0
    with pytest.raises(ValueError):
        metrics.harmonic_mean([-0.1, 0.5])


def test_model_utility_is_harmonic_mean_of_nine(partly_trained, tokenizer):
    from frag_utils import data

    sets = data.load_utility_sets("synthetic", limit=3)
    mu = metrics.model_utility(partly_trained, tokenizer, sets, max_new_tokens=6)
    assert len(mu["components"]) == 9
    assert all(0 <= v <= 1 for v in mu["components"].values())
    assert mu["model_utility"] == pytest.approx(metrics.harmonic_mean(list(mu["components"].values())))
    with pytest.raises(ValueError, match="missing"):
        metrics.model_utility(partly_trained, tokenizer, {"retain_perturbed": sets["retain_perturbed"]})


def test_truth_ratio_needs_equal_perturbed_counts(tiny, tokenizer):
    recs = [{"question": "q?", "answer": "a", "perturbed_answer": ["b"]},
            {"question": "r?", "answer": "c", "perturbed_answer": ["d", "e"]}]
    with pytest.raises(ValueError, match="same number of perturbed answers"):
        metrics.truth_ratio(tiny, tokenizer, recs)


def test_truth_ratio_and_option_probability_survive_very_high_nll():
    c = np.array([900.0, 2.0])  # an unlearned model can put ~0 probability on an answer
    w = np.array([[901.0, 903.0], [1.0, 3.0]])
    tr = metrics.truth_ratio_from_nll(c, w, "true_better")["per_example"]
    assert tr == pytest.approx([math.exp(900 - 902), math.exp(2 - 2)])
    p = metrics.probability_with_options_from_nll(c, w)["per_example"]
    assert p == pytest.approx([1 / (1 + math.exp(-1) + math.exp(-3)), 1 / (1 + math.exp(1) + math.exp(-1))])
    assert all(np.isfinite(tr)) and all(np.isfinite(p))


def test_paraphrase_fallback_is_per_record(partly_trained, tokenizer, qa_records):
    mixed = [dict(qa_records[0]), {k: v for k, v in qa_records[1].items() if k != "paraphrased_answer"}]
    got = metrics.truth_ratio(partly_trained, tokenizer, mixed)["per_example"]
    for r, tr in zip(mixed, got):
        pc = math.exp(-_nll_slow(partly_trained, tokenizer, r["question"], r.get("paraphrased_answer", r["answer"])))
        pw = math.exp(-np.mean([_nll_slow(partly_trained, tokenizer, r["question"], x) for x in r["perturbed_answer"]]))
        assert tr == pytest.approx(pw / pc, rel=1e-4)


def test_nan_or_empty_inputs_raise(tiny, tokenizer):
    with pytest.raises(ValueError, match="finite"):
        metrics.harmonic_mean([0.5, float("nan")])
    with pytest.raises(ValueError, match="empty"):
        metrics.extraction_strength(tiny, tokenizer, [])


def test_end_of_turn_is_read_from_the_template(tokenizer):
    assert tokenizer.convert_ids_to_tokens(prompts.end_of_turn_id(tokenizer)) == "<|im_end|>"


def test_cached_evaluation_is_reused_only_for_the_same_model_data_and_settings(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("FRAG_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "m"
    models.save_checkpoint(models.build_tiny_model(len(tokenizer), seed=0), tokenizer, folder)
    direct = metrics.evaluate_on_source(*models.load_model(str(folder)), "synthetic", "forget10", 2, 4, 4)
    calls = {"forget": 0, "utility": 0}
    forget_half, utility_half = metrics.evaluate_forget, metrics.model_utility

    def count(name, fn):
        return lambda *a, **k: calls.__setitem__(name, calls[name] + 1) or fn(*a, **k)

    monkeypatch.setattr(metrics, "evaluate_forget", count("forget", forget_half))
    monkeypatch.setattr(metrics, "model_utility", count("utility", utility_half))
    kw = dict(data_source="synthetic", forget_split="forget10", limit=2, max_new_tokens=4, batch_size=4)
    first = metrics.evaluate_model_cached(str(folder), **kw)
    again = metrics.evaluate_model_cached(str(folder), **kw)
    assert calls == {"forget": 1, "utility": 1} and again == first
    assert again == direct  # the same numbers as evaluating it here, the per-example lists too
    metrics.evaluate_model_cached(str(folder), **{**kw, "forget_split": "forget05"})
    assert calls == {"forget": 2, "utility": 1}  # Model Utility does not depend on the forget split
    metrics.evaluate_model_cached(str(folder), **{**kw, "max_new_tokens": 5})
    assert calls == {"forget": 3, "utility": 2}  # other settings
    # a retrained (re-saved) model is evaluated afresh
    models.save_checkpoint(models.build_tiny_model(len(tokenizer), seed=1), tokenizer, folder)
    metrics.evaluate_model_cached(str(folder), **kw)
    assert calls == {"forget": 4, "utility": 3}
    # Model Utility alone missing (its cache file removed): only that half is computed
    for file in (tmp_path / "cache" / "model_utility").glob("*.json"):
        file.unlink()
    assert metrics.evaluate_model_cached(str(folder), **kw) == metrics.evaluate_model_cached(str(folder), **kw)
    assert calls == {"forget": 4, "utility": 4}


def test_es_only_evaluation_matches_the_full_evaluation(partly_trained, tokenizer):
    full = metrics.evaluate_on_source(partly_trained, tokenizer, "synthetic", "forget10", 8, 4, 4)
    only = metrics.es_on_source(partly_trained, tokenizer, "synthetic", "forget10", 8, 4)
    assert 0 < full["es"] < 1  # something to compare
    assert only["es"] == pytest.approx(full["es"]) and only["es_retain"] == pytest.approx(full["es_retain"])
    assert only["per_example"]["es"] == pytest.approx(full["per_example"]["es"])


def test_the_grouped_evaluation_equals_every_metric_computed_answer_by_answer(partly_trained, tokenizer):
    forget = data.load_split("synthetic", "forget10_perturbed", 20)
    sets = data.load_utility_sets("synthetic", 20)
    fast = metrics.evaluate(partly_trained, tokenizer, forget, sets, max_new_tokens=6)
    slow = metrics.evaluate_metric_by_metric(partly_trained, tokenizer, forget, sets, max_new_tokens=6)
    assert 0 < fast["es"] < 1 and 0 < fast["retain_perturbed/truth_ratio"] < 1  # something to compare
    for key, value in slow.items():
        assert fast[key] == pytest.approx(value, abs=1e-5), key


def test_grouped_scoring_of_smollm2_equals_scoring_each_answer_alone(tokenizer):
    """On the real model: 8 forget questions, each with its answer, paraphrase and five perturbed
    answers, scored behind one prompt against each behind its own."""
    model, tok = models.load_model(models.SMOLLM2)
    records = data.load_split("synthetic", "forget10_perturbed", 8)
    scored = metrics.scored_records(model, tok, records)
    answers = [(r["question"], a) for r in records
               for a in (r["answer"], r["paraphrased_answer"], *r["perturbed_answer"])]
    alone = iter(metrics.answer_stats(model, tok, answers))
    for x in scored:
        for grouped in (x["answer"], x["correct"], *x["perturbed"]):
            one = next(alone)
            assert grouped.avg_nll == pytest.approx(one.avg_nll, abs=1e-5)
            assert torch.equal(grouped.hits, one.hits)


def test_greedy_answers_equal_those_of_generate(tokenizer, partly_trained):
    """The lean greedy loop (finished rows leave the batch) answers as ``generate`` does: on the
    embedded SmolLM2 (some answers end early, some run to the limit) and on the tiny model. On
    SmolLM2 as the evaluation runs it: the 36 prompts run 8 at a time into one cache (left-padded
    to the longest), the answers scored behind it first, then the greedy answers decoded from it."""
    model, tok = models.load_model(models.SMOLLM2)
    records = [r for name in ("real_authors_perturbed", "world_facts_perturbed", "forget10_perturbed")
               for r in data.load_split("synthetic", name, 12)]
    questions = [r["question"] for r in records]
    stats, ours = metrics.score_and_generate(model, tok, [(r["question"], [r["answer"]]) for r in records], 32,
                                             batch_size=8)
    assert ours == metrics.generate_answers_by_generate(model, tok, questions, 32, 16)
    assert [len(s) for s in stats] == [1] * len(records)
    lengths = [len(tok(a, add_special_tokens=False)["input_ids"]) for a in ours]
    assert min(lengths) < 20 and max(lengths) >= 30  # rows did leave early while others ran on
    tiny_questions = questions[:8]
    assert metrics.generate_answers(partly_trained, tokenizer, tiny_questions, 12, batch_size=8) == \
        metrics.generate_answers_by_generate(partly_trained, tokenizer, tiny_questions, 12, 8)


def test_several_passes_give_what_one_pass_gives_in_the_input_order(partly_trained, tokenizer):
    """Questions taken 3 per pass (sorted by prompt length, so passes mix the input order), against
    all in one pass: the same statistics and greedy answers for every question, in input order."""
    records = (data.load_split("synthetic", "retain_perturbed", 5)
               + data.load_split("synthetic", "world_facts_perturbed", 4))
    groups = [(r["question"], [r["answer"], *r["perturbed_answer"][:2]]) for r in records]
    assert len({len(prompts.prompt_ids(tokenizer, q)) for q, _ in groups}) > 3  # lengths differ: sorting reorders
    one = metrics.score_and_generate(partly_trained, tokenizer, groups, 6, batch_size=4)
    three = metrics.score_and_generate(partly_trained, tokenizer, groups, 6, batch_size=2, questions_per_pass=3)
    assert three[1] == one[1] and len(one[1]) == len(groups)
    for a, b, (_, answers) in zip(one[0], three[0], groups):
        assert len(a) == len(b) == len(answers)
        for x, y in zip(a, b):
            assert torch.equal(x.hits, y.hits) and torch.allclose(x.logprobs, y.logprobs, atol=1e-5)


def test_rouge_of_a_base_model_without_the_chat_template(partly_trained, tokenizer):
    """MUSE's retain-ROUGE as docs/methods.md calls it (``chat=False``): the plain-prompt greedy
    answers, equal to ``generate``'s from the same plain prompts."""
    recs = data.load_split("synthetic", "forget10", 6)
    plain = metrics.rouge(partly_trained, tokenizer, recs, 8, chat=False)
    slow = metrics.generate_answers_by_generate(partly_trained, tokenizer, [r["question"] for r in recs], 8, chat=False)
    assert plain["generations"] == slow
    chat = metrics.rouge(partly_trained, tokenizer, recs, 8)["generations"]
    assert plain["generations"] != chat  # the template matters
    by_hand = [metrics.rouge_l_recall(g, r["answer"]) for g, r in zip(slow, recs)]
    assert plain["value"] == pytest.approx(np.mean(by_hand))


def test_generation_refuses_a_config_that_is_not_plain_greedy(tiny, tokenizer):
    tiny.generation_config.repetition_penalty = 1.3
    with pytest.raises(ValueError, match="repetition_penalty"):
        metrics.generate_answers(tiny, tokenizer, ["Who?"], 4)
