"""TOFU metrics as the OpenUnlearning evaluator defines them.

* Extraction Strength (ES): ``1 - k/|y|``, ``k`` the smallest prefix length of the answer ``y``
  from which greedy continuation reproduces the rest. Computed in one teacher-forced pass:
  greedy continuation from ``y[:k]`` reproduces ``y[k:]`` exactly when every argmax from
  position ``k`` on equals the next answer token. The final end-of-turn token is not part of
  ``y``. When not even the last token matches, ``ES = 1/|y|`` (as OpenUnlearning).
  :func:`extraction_strength_by_generation` is the slow definition, for tests and benchmarks.
* Probability: ``exp(-mean answer-token NLL)`` (answer tokens + end of turn).
* Truth Ratio: ``P_w / P_c`` with ``P_c`` from the paraphrased answer (the answer itself where no
  paraphrase exists) and ``P_w`` the geometric mean over perturbed answers, all per-token
  normalised. Retain-side aggregate ``mean(max(0, 1 - TR))``; forget-side ``mean(min(TR, 1/TR))``.
* ROUGE-L recall of the greedy answer (``rouge-score`` with a stemmer).
* Model Utility: harmonic mean of {probability, ROUGE-L recall, Truth Ratio} on
  {retain_perturbed, real_authors_perturbed, world_facts_perturbed}; on the last two the
  probability is normalised against the perturbed answers, ``P_c / (P_c + sum P_w)``.

Every metric returns per-example values and the aggregate.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from transformers import DynamicCache

from . import models, prompts
from .prompts import IGNORE, batches, collate, encode_qa, end_of_turn_id, prompt_ids

UTILITY_SETS = ("retain_perturbed", "real_authors_perturbed", "world_facts_perturbed")


@dataclass
class AnswerStats:
    """Teacher-forced statistics of one answer: per-token log-probs and argmax hits, [n]."""

    logprobs: torch.Tensor  # [n] log p(y_t | prompt, y_<t), answer tokens then end of turn
    hits: torch.Tensor  # [n] bool, argmax == y_t

    @property
    def avg_nll(self) -> float:
        return float(-self.logprobs.mean())


def _autocast(enabled: bool, device: torch.device):
    # bf16 autocast rounds the logits too: faster, but probabilities can move by a few percent
    # per token and argmax near ties; the recorded runs evaluate in fp32.
    if not enabled:
        return contextlib.nullcontext()
    from .numerics import check_autocast

    check_autocast(True, device.type)  # bf16 autocast is refused on the CPU, which computes in fp32
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


@torch.no_grad()
def answer_stats(model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], batch_size: int = 16,
                 chat: bool = True, bf16: bool = False) -> list[AnswerStats]:
    """One teacher-forced pass per batch over (question, answer) pairs.

    Returns:
        One :class:`AnswerStats` per pair, in order.
    """
    if len(pairs) == 0:
        raise ValueError("No records to score: the split is empty.")
    device = next(model.parameters()).device
    encoded = [encode_qa(tokenizer, q, a, chat) for q, a in pairs]
    out: list[AnswerStats] = []
    for chunk in batches(encoded, batch_size):
        batch = collate(chunk, tokenizer.pad_token_id, side="right")
        batch = {k: v.to(device) for k, v in batch.items()}
        with _autocast(bf16, device):
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        logits = logits[:, :-1].float()  # position t predicts token t+1
        targets = batch["labels"][:, 1:]
        logp = torch.log_softmax(logits, dim=-1)
        for i in range(len(chunk)):
            keep = targets[i] != IGNORE
            tgt = targets[i][keep]
            lp = logp[i][keep]
            out.append(AnswerStats(lp.gather(-1, tgt[:, None])[:, 0].cpu(),
                                   (lp.argmax(-1) == tgt).cpu()))
    return out


# questions per pass: their prompts run once, their answers behind that pass's key/value cache, and
# their greedy answers continue from it, rows leaving as they finish (a wide pass amortises each
# decoding step); in evaluation batches
QUESTION_BATCHES = 16


@torch.no_grad()
def score_and_generate(model: Any, tokenizer: Any, groups: Sequence[tuple[str, Sequence[str]]],
                       max_new_tokens: int = 0, batch_size: int = 16, chat: bool = True, bf16: bool = False,
                       questions_per_pass: int | None = None) -> tuple[list[list[AnswerStats]], list[str]]:
    """Each question's prompt run once: its answers scored behind it, its greedy answer generated from it.

    At most ``questions_per_pass`` questions at a time (default ``QUESTION_BATCHES * batch_size``, in
    passes of equal size), shortest prompt first (less padding), ``batch_size`` prompts per forward
    pass (left-padded, positions counted from each prompt's first token), their key/value caches
    joined into one. Their answers then run behind it, each row reading its own question's cache,
    ``2 * batch_size`` answers of similar length per pass, logits only where an answer token is
    predicted: a question with seven answers (the answer, its paraphrase, five perturbed ones)
    costs one prompt instead of seven. With ``max_new_tokens``, greedy decoding then continues
    from the same cache (as ``model.generate(do_sample=False)`` decodes, except that a row leaves
    the batch as soon as it has closed its turn). The numbers equal scoring each answer behind its
    own prompt, and the answers ``generate``'s, up to fp32 rounding (``tests/test_metrics.py``; in
    bf16 on a GPU another batch width can flip a near tie).

    Args:
        groups: ``(question, [answer, ...])`` pairs; an empty list scores nothing for that question.
        max_new_tokens: greedy answers up to this length (0: none).
    Returns:
        ``(stats, generations)``: per group one :class:`AnswerStats` per answer, in order, and its greedy
        answer cut at the end of turn, special tokens removed (``""`` when ``max_new_tokens`` is 0).
    Raises:
        ValueError: the model's generation config asks for logit processing (a repetition
            penalty, banned words, ...) that plain greedy decoding would not apply.
    """
    if not groups:
        raise ValueError("No questions to score: the split is empty.")
    if max_new_tokens:
        _check_plain_greedy(model)
    device = next(model.parameters()).device
    eot = end_of_turn_id(tokenizer)
    prompts = [prompt_ids(tokenizer, q, chat) for q, _ in groups]
    stats: list[list[AnswerStats]] = [[] for _ in groups]
    generations = [""] * len(groups)
    order = sorted(range(len(groups)), key=lambda i: len(prompts[i]))
    per_pass = questions_per_pass or QUESTION_BATCHES * batch_size
    for chunk in batches(order, math.ceil(len(order) / max(1, math.ceil(len(order) / per_pass)))):  # even passes
        cache, mask, last = _prefill(model, [prompts[i] for i in chunk], batch_size, tokenizer.pad_token_id,
                                     device, bf16)
        position = mask.sum(1, keepdim=True) - 1  # [B, 1]: each prompt's last position
        first_logp = torch.log_softmax(last, dim=-1)  # [B, V]: each answer's first token
        rows = [(j, encode_qa(tokenizer, groups[i][0], a, chat)["input_ids"][len(prompts[i]):])  # answer + end
                for j, i in enumerate(chunk) for a in groups[i][1]]
        scored: list[AnswerStats | None] = [None] * len(rows)
        by_length = sorted(range(len(rows)), key=lambda r: len(rows[r][1]))  # answers of similar length together
        for sub in batches(by_length, 2 * batch_size):
            for r, x in zip(sub, _score_answers(model, cache, mask, position[:, 0] + 1, [rows[r] for r in sub],
                                                first_logp, tokenizer.pad_token_id, device, bf16)):
                scored[r] = x
        done = iter(scored)
        for i in chunk:
            stats[i] = [next(done) for _ in groups[i][1]]
        if max_new_tokens:
            for i, row in zip(chunk, _greedy(model, cache, last.argmax(-1), mask, position, max_new_tokens, eot,
                                             device, bf16)):
                generations[i] = tokenizer.decode(row, skip_special_tokens=True).strip()
    return stats, generations


def _prefill(model: Any, prompts: Sequence[list[int]], batch_size: int, pad: int, device: torch.device,
             bf16: bool) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """Run ``prompts`` (shortest first) ``batch_size`` at a time, each pass left-padded to its longest,
    into one key/value cache left-padded to the longest of all (padding masked, its keys and values zero).

    Returns:
        ``(cache, mask [B, P], last)``: ``last`` [B, V] the fp32 logits after each prompt.
    """
    parts, masks, lasts = [], [], []
    for sub in batches(list(prompts), batch_size):
        head = collate([{"input_ids": p} for p in sub], pad, side="left")
        mask = head["attention_mask"].to(device)
        with _autocast(bf16, device):  # positions counted from each prompt's first token
            out = model(input_ids=head["input_ids"].to(device), attention_mask=mask,
                        position_ids=(mask.cumsum(1) - 1).clamp(min=0), use_cache=True, logits_to_keep=1)
        parts.append([(layer.keys, layer.values) for layer in out.past_key_values.layers])
        masks.append(mask)
        lasts.append(out.logits[:, -1].float())
    width = max(m.shape[1] for m in masks)

    def left(x: torch.Tensor, dim: int) -> torch.Tensor:  # left-pad dimension ``dim`` with zeros to ``width``
        pad = [0, 0] * (x.dim() - 1 - dim) + [width - x.shape[dim], 0]
        return torch.nn.functional.pad(x, pad)

    # every layer a full-attention one (Llama, SmolLM2); a sliding-window model would need the config's layer types
    layers = [(torch.cat([left(p[i][0], 2) for p in parts]), torch.cat([left(p[i][1], 2) for p in parts]))
              for i in range(len(parts[0]))]
    return DynamicCache(ddp_cache_data=layers), torch.cat([left(m, 1) for m in masks]), torch.cat(lasts)


def _score_answers(model: Any, prompt_cache: Any, prompt_mask: torch.Tensor, starts: torch.Tensor,
                   rows: Sequence[tuple[int, list[int]]], first_logp: torch.Tensor, pad: int,
                   device: torch.device, bf16: bool) -> list[AnswerStats]:
    """Teacher-forced statistics of answers, each behind its prompt's cached keys and values: row
    ``(j, answer)`` answers prompt ``j`` of the cached batch (``prompt_mask`` [B, P], ``starts`` [B]
    each answer's first position, ``first_logp`` [B, V] its first token's log-probabilities)."""
    owner = torch.tensor([j for j, _ in rows], device=device)
    answers = [a for _, a in rows]
    cache = DynamicCache(ddp_cache_data=[(layer.keys[owner], layer.values[owner]) for layer in prompt_cache.layers])
    body = collate([{"input_ids": a} for a in answers], pad, side="right")
    mask = torch.cat([prompt_mask[owner], body["attention_mask"].to(device)], dim=1)
    positions = starts[owner][:, None] + torch.arange(body["input_ids"].shape[1], device=device)[None]
    keep = body["attention_mask"].bool()  # position t of an answer predicts its token t+1: not the last
    keep[torch.arange(len(answers)), torch.tensor([len(a) for a in answers]) - 1] = False
    with _autocast(bf16, device):  # logits only at the answers' own positions, not the batch's padding
        logits = models.logits_at(model, keep.to(device), input_ids=body["input_ids"].to(device),
                                  attention_mask=mask, position_ids=positions, past_key_values=cache)
    stats = []
    for (j, a), rows_logits in zip(rows, logits.split([len(a) - 1 for a in answers])):
        tgt = torch.tensor(a, device=device)
        lp = torch.cat([first_logp[j][None], torch.log_softmax(rows_logits.float(), dim=-1)])  # [n, V]
        stats.append(AnswerStats(lp.gather(-1, tgt[:, None])[:, 0].cpu(), (lp.argmax(-1) == tgt).cpu()))
    return stats


def es_from_hits(hits: torch.Tensor) -> float:
    """ES of one answer from its argmax hits [n] over answer tokens (end of turn excluded).

    ``k`` is ``n`` minus the length of the trailing run of hits; with no trailing hit ``k = n - 1``.
    """
    n = int(hits.numel())
    if n == 0:
        raise ValueError("ES needs at least one answer token.")
    run = 0
    for h in reversed(hits.tolist()):
        if not h:
            break
        run += 1
    k = n - run if run > 0 else n - 1
    return 1.0 - k / n


def es_and_probability(model: Any, tokenizer: Any, records: Sequence[dict], batch_size: int = 16,
                       chat: bool = True, bf16: bool = False) -> tuple[dict, dict]:
    """Extraction Strength and answer probability from one teacher-forced pass over ``records``.

    Returns:
        ``(es, probability)``, each ``{"value": mean, "per_example": [...]}``.
    """
    return _es_probability(answer_stats(model, tokenizer, [(r["question"], r["answer"]) for r in records],
                                        batch_size, chat, bf16))


def _es_probability(stats: Sequence[AnswerStats]) -> tuple[dict, dict]:
    """ES and probability of each answer from its statistics, and their means."""
    es = [es_from_hits(s.hits[:-1]) for s in stats]  # the end-of-turn token is not part of y
    prob = [math.exp(-s.avg_nll) for s in stats]
    return ({"value": float(np.mean(es)), "per_example": es},
            {"value": float(np.mean(prob)), "per_example": prob})


def extraction_strength(model: Any, tokenizer: Any, records: Sequence[dict], batch_size: int = 16,
                        chat: bool = True, bf16: bool = False) -> dict:
    """Extraction Strength over ``records`` (question/answer), one teacher-forced pass.

    Returns:
        ``{"value": mean ES, "per_example": [ES, ...]}``.
    """
    return es_and_probability(model, tokenizer, records, batch_size, chat, bf16)[0]


@torch.no_grad()
def extraction_strength_by_generation(model: Any, tokenizer: Any, records: Sequence[dict],
                                      chat: bool = True) -> dict:
    """ES by its definition: greedy generation from every prefix of the answer (slow).

    For k = 0, 1, ...: generate ``|y| - k`` tokens greedily after prompt + ``y[:k]`` and stop at the
    first k whose continuation equals ``y[k:]``. Batch size 1, no padding.
    """
    device = next(model.parameters()).device
    values = []
    for r in records:
        enc = encode_qa(tokenizer, r["question"], r["answer"], chat)
        p, y = enc["input_ids"][:enc["prompt_len"]], enc["input_ids"][enc["prompt_len"]:-1]
        n = len(y)
        k_found = n - 1
        for k in range(n):
            ids = torch.tensor([p + y[:k]], device=device)
            gen = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n - k,
                                 do_sample=False, pad_token_id=tokenizer.pad_token_id)
            if gen[0, ids.shape[1]:].tolist() == y[k:]:
                k_found = k
                break
        values.append(1.0 - k_found / n)
    return {"value": float(np.mean(values)), "per_example": values}


def probability(model: Any, tokenizer: Any, records: Sequence[dict], batch_size: int = 16,
                chat: bool = True, bf16: bool = False) -> dict:
    """Answer probability ``exp(-mean answer-token NLL)`` per example and its mean."""
    return es_and_probability(model, tokenizer, records, batch_size, chat, bf16)[1]


def correct_and_wrong_nll(model: Any, tokenizer: Any, records: Sequence[dict], batch_size: int = 16,
                          chat: bool = True, bf16: bool = False, correct_key: str = "answer"
                          ) -> tuple[np.ndarray, np.ndarray]:
    """Per-token NLL of the correct answer [N] and of each perturbed answer [N, P]."""
    n_wrong = {len(r["perturbed_answer"]) for r in records}
    if len(n_wrong) != 1:
        raise ValueError(f"Every record needs the same number of perturbed answers, found {sorted(n_wrong)}.")
    correct = answer_stats(model, tokenizer, [(r["question"], r[correct_key]) for r in records],
                           batch_size, chat, bf16)
    flat = [(r["question"], w) for r in records for w in r["perturbed_answer"]]
    wrong = answer_stats(model, tokenizer, flat, batch_size, chat, bf16)
    c = np.array([s.avg_nll for s in correct])
    w = np.array([s.avg_nll for s in wrong]).reshape(len(records), n_wrong.pop())
    return c, w


def truth_ratio_from_nll(correct_nll: np.ndarray, wrong_nll: np.ndarray, aggregator: str) -> dict:
    """Truth Ratio from per-token NLLs: correct [N], perturbed [N, P].

    ``P_w`` is the geometric mean over perturbed answers of their per-token probabilities,
    ``exp(-mean_j nll_j)``; ``TR = P_w / P_c``.
    """
    if aggregator not in ("true_better", "closer_to_1_better"):
        raise ValueError(f"Unknown truth-ratio aggregator {aggregator!r}.")
    tr = np.exp(correct_nll - wrong_nll.mean(axis=1))  # in log space: no 0/0 at very high NLL
    agg = np.maximum(0.0, 1.0 - tr).mean() if aggregator == "true_better" else np.minimum(tr, 1.0 / tr).mean()
    return {"value": float(agg), "per_example": tr.tolist()}


def truth_ratio(model: Any, tokenizer: Any, records: Sequence[dict], aggregator: str = "true_better",
                batch_size: int = 16, chat: bool = True, bf16: bool = False) -> dict:
    """Truth Ratio ``TR = P_w / P_c`` per example, aggregated.

    Args:
        records: need ``perturbed_answer`` [P strings]; ``paraphrased_answer`` is used for ``P_c``
            when present, the answer otherwise.
        aggregator: ``true_better`` (retain side: ``mean(max(0, 1 - TR))``) or
            ``closer_to_1_better`` (forget side: ``mean(min(TR, 1/TR))``).
    """
    with_p = [{**r, "_correct": r.get("paraphrased_answer") or r["answer"]} for r in records]  # per record
    c, w = correct_and_wrong_nll(model, tokenizer, with_p, batch_size, chat, bf16, "_correct")
    return truth_ratio_from_nll(c, w, aggregator)


def probability_with_options_from_nll(correct_nll: np.ndarray, wrong_nll: np.ndarray) -> dict:
    """``P_c / (P_c + sum_j P_w,j)`` with per-token probabilities ``exp(-nll)``."""
    values = 1.0 / (1.0 + np.exp(correct_nll[:, None] - wrong_nll).sum(axis=1))  # = P_c / (P_c + sum P_w)
    return {"value": float(values.mean()), "per_example": values.tolist()}


def probability_with_options(model: Any, tokenizer: Any, records: Sequence[dict], batch_size: int = 16,
                             chat: bool = True, bf16: bool = False) -> dict:
    """Correct-answer probability normalised against the perturbed ones, ``P_c / (P_c + sum P_w)``."""
    return probability_with_options_from_nll(
        *correct_and_wrong_nll(model, tokenizer, records, batch_size, chat, bf16, "answer"))


# generation settings that would make a model's own ``generate`` differ from plain greedy decoding
_PROCESSORS = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
               "bad_words_ids": None, "suppress_tokens": None, "begin_suppress_tokens": None,
               "forced_bos_token_id": None, "forced_eos_token_id": None, "sequence_bias": None,
               "min_new_tokens": None, "min_length": 0, "num_beams": 1, "stop_strings": None,
               "exponential_decay_length_penalty": None, "guidance_scale": None}


def _check_plain_greedy(model: Any) -> None:
    config = getattr(model, "generation_config", None)
    asked = {k: getattr(config, k, None) for k, plain in _PROCESSORS.items()
             if getattr(config, k, None) not in (None, plain)}
    if asked:
        raise ValueError(f"The model's generation config sets {asked}; the evaluation decodes greedily without "
                         "logit processing (OpenUnlearning's do_sample=False). Reset these in its "
                         "generation_config.json.")


def generate_answers(model: Any, tokenizer: Any, questions: Sequence[str], max_new_tokens: int = 64,
                     batch_size: int = 16, chat: bool = True, bf16: bool = False) -> list[str]:
    """Greedy answers, cut at the end of turn, special tokens removed, ``batch_size`` questions per
    pass (:func:`score_and_generate` with nothing to score)."""
    return score_and_generate(model, tokenizer, [(q, []) for q in questions], max_new_tokens, batch_size, chat,
                              bf16, questions_per_pass=batch_size)[1]


@torch.no_grad()
def generate_answers_by_generate(model: Any, tokenizer: Any, questions: Sequence[str], max_new_tokens: int = 64,
                                 batch_size: int = 16, chat: bool = True, bf16: bool = False) -> list[str]:
    """:func:`generate_answers` through the model's own ``generate`` (greedy): the reference the
    tests hold it to, and the path of :func:`evaluate_metric_by_metric`."""
    device = next(model.parameters()).device
    eot = end_of_turn_id(tokenizer)
    out: list[str] = []
    for chunk in batches(list(questions), batch_size):
        batch = collate([{"input_ids": prompt_ids(tokenizer, q, chat)} for q in chunk], tokenizer.pad_token_id,
                        side="left")
        batch = {k: v.to(device) for k, v in batch.items()}
        with _autocast(bf16, device):
            gen = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eot,
                                 pad_token_id=tokenizer.pad_token_id)
        for row in gen[:, batch["input_ids"].shape[1]:].tolist():
            out.append(tokenizer.decode(row[:row.index(eot)] if eot in row else row, skip_special_tokens=True).strip())
    return out


@torch.no_grad()
def _greedy(model: Any, cache: Any, first: torch.Tensor, mask: torch.Tensor, position: torch.Tensor,
            max_new_tokens: int, eot: int, device: torch.device, bf16: bool) -> list[list[int]]:
    """Greedy continuations of prompts already run into ``cache`` (their ``mask`` [B, P], each
    one's last ``position`` [B, 1], ``first`` [B] the argmax after it), each cut before its end of turn."""
    alive = list(range(len(first)))  # rows still answering, in batch order
    out: list[list[int]] = [[] for _ in alive]
    nxt = first
    for step in range(max_new_tokens):
        keep = []
        for i, (row, token) in enumerate(zip(alive, nxt.tolist())):
            if token != eot:
                out[row].append(token)
                keep.append(i)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(alive):  # finished rows leave the batch and its cache
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            alive, mask, nxt, position = [alive[i] for i in keep], mask[index], nxt[index], position[index]
        mask = torch.cat([mask, mask.new_ones(len(alive), 1)], dim=1)
        position = position + 1
        with _autocast(bf16, device):
            res = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=position, past_key_values=cache,
                        use_cache=True, logits_to_keep=1)
        cache = res.past_key_values
        nxt = res.logits[:, -1].float().argmax(-1)
    return out


_SCORER = None


def rouge_l_recall(prediction: str, reference: str) -> float:
    """ROUGE-L recall of ``prediction`` against ``reference``, with a Porter stemmer."""
    global _SCORER
    if _SCORER is None:
        from rouge_score import rouge_scorer

        _SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return float(_SCORER.score(reference, prediction)["rougeL"].recall)


def rouge(model: Any, tokenizer: Any, records: Sequence[dict], max_new_tokens: int = 64,
          batch_size: int = 16, chat: bool = True, bf16: bool = False,
          generate: Callable[..., list[str]] | None = None) -> dict:
    """ROUGE-L recall of greedy answers (``generate``, default :func:`generate_answers`) against
    the reference answers."""
    gens = (generate or generate_answers)(model, tokenizer, [r["question"] for r in records], max_new_tokens,
                                          batch_size, chat, bf16)
    return rouge_of(gens, records)


def rouge_of(generations: Sequence[str], records: Sequence[dict]) -> dict:
    """ROUGE-L recall of ``generations`` against the records' answers: value, per example, generations."""
    values = [rouge_l_recall(g, r["answer"]) for g, r in zip(generations, records, strict=True)]
    return {"value": float(np.mean(values)), "per_example": values, "generations": list(generations)}


def harmonic_mean(values: Sequence[float]) -> float:
    """Harmonic mean, ``n / sum(1 / x)``; 0 when any value is 0 (as scipy's hmean).

    Not ``scipy.stats.hmean`` itself: it computes ``1 / mean(1 / x)``, which rounds differently in
    the last bit (77 of the 339 Model Utility values in the committed records, which were computed
    with this one). The tests check this one against hmean.
    """
    arr = np.asarray(values, dtype=float)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValueError(f"harmonic mean needs finite values, got {values}")
    if np.any(arr < 0):
        raise ValueError("harmonic mean of negative values")
    if np.any(arr == 0):
        return 0.0
    return float(len(arr) / np.sum(1.0 / arr))


def scored_records(model: Any, tokenizer: Any, records: Sequence[dict], batch_size: int = 16, chat: bool = True,
                   bf16: bool = False, paraphrase: bool | Sequence[bool] = True, max_new_tokens: int = 0) -> list[dict]:
    """Every answer a record's metrics need and its greedy answer, from one pass (:func:`score_and_generate`).

    Args:
        paraphrase: the truth ratio's correct answer is the paraphrase where a record has one (forget
            and retain sets); else always the answer (real authors, world facts). One flag, or one per record.
    Returns:
        Per record, :class:`AnswerStats` of its ``answer``, of the truth ratio's ``correct`` answer
        (the same object when that is the answer) and of each ``perturbed`` answer, and its greedy
        ``generation`` (``""`` when ``max_new_tokens`` is 0).
    """
    flags = [paraphrase] * len(records) if isinstance(paraphrase, bool) else list(paraphrase)
    groups, separate = [], []  # separate: the correct answer is not the answer itself
    for r, flag in zip(records, flags, strict=True):
        correct = (r.get("paraphrased_answer") or r["answer"]) if flag else r["answer"]
        separate.append(correct != r["answer"])
        groups.append((r["question"], [r["answer"], *([correct] if separate[-1] else []),
                                       *r.get("perturbed_answer", [])]))
    stats, generations = score_and_generate(model, tokenizer, groups, max_new_tokens, batch_size, chat, bf16)
    return [{"answer": st[0], "correct": st[int(sep)], "perturbed": st[1 + int(sep):], "generation": gen}
            for sep, st, gen in zip(separate, stats, generations)]


def _nlls(scored: Sequence[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Per-token NLL of the truth ratio's correct answer [N] and of each perturbed answer [N, P]."""
    n_wrong = {len(x["perturbed"]) for x in scored}
    if len(n_wrong) != 1:
        raise ValueError(f"Every record needs the same number of perturbed answers, found {sorted(n_wrong)}.")
    return (np.array([x["correct"].avg_nll for x in scored]),
            np.array([[w.avg_nll for w in x["perturbed"]] for x in scored]).reshape(len(scored), n_wrong.pop()))


def model_utility(model: Any, tokenizer: Any, sets: dict[str, Sequence[dict]], max_new_tokens: int = 64,
                  batch_size: int = 16, chat: bool = True, bf16: bool = False) -> dict:
    """Model Utility and the nine numbers it is the harmonic mean of, from one pass over the three
    sets' questions (:func:`scored_records`: each prompt once, for its scored and its greedy answers).

    Args:
        sets: ``retain_perturbed``, ``real_authors_perturbed`` and ``world_facts_perturbed`` records.
    Returns:
        ``{"model_utility": float, "components": {"<set>/<metric>": float}, "per_example": {...},
        "es_retain": {...}}``; ``per_example`` also holds each set's greedy answers under
        ``"<set>/generations"``; ``es_retain`` is ES on the retain set, from the same pass.
    """
    missing = [s for s in UTILITY_SETS if s not in sets]
    if missing:
        raise ValueError(f"Model Utility needs the sets {list(UTILITY_SETS)}; missing {missing}.")
    # the truth ratio's correct answer: the paraphrase on the retain set only
    flags = [name == "retain_perturbed" for name in UTILITY_SETS for _ in sets[name]]
    everything = iter(scored_records(model, tokenizer, [r for name in UTILITY_SETS for r in sets[name]], batch_size,
                                     chat, bf16, flags, max_new_tokens))
    components, per_example = {}, {}
    for name in UTILITY_SETS:
        recs = sets[name]
        scored = [next(everything) for _ in recs]
        c, w = _nlls(scored)
        if name == "retain_perturbed":
            es_retain, prob = _es_probability([x["answer"] for x in scored])
            results = {"probability": prob, "truth_ratio": truth_ratio_from_nll(c, w, "true_better")}
        else:  # no paraphrase: both numbers come from the same answer/perturbed NLLs
            results = {"probability": probability_with_options_from_nll(c, w),
                       "truth_ratio": truth_ratio_from_nll(c, w, "true_better")}
        results["rouge"] = rouge_of([x["generation"] for x in scored], recs)
        for metric, res in results.items():
            components[f"{name}/{metric}"] = res["value"]
            per_example[f"{name}/{metric}"] = res["per_example"]
        per_example[f"{name}/generations"] = results["rouge"]["generations"]
    return {"model_utility": harmonic_mean(list(components.values())), "components": components,
            "per_example": per_example, "es_retain": es_retain}


def evaluate_forget(model: Any, tokenizer: Any, forget_records: Sequence[dict], max_new_tokens: int = 64,
                    batch_size: int = 16, chat: bool = True, bf16: bool = False) -> dict:
    """The forget-split half of :func:`evaluate`: ES, probability, truth ratio and ROUGE, from one
    pass over its questions (:func:`scored_records`)."""
    scored = scored_records(model, tokenizer, forget_records, batch_size, chat, bf16, max_new_tokens=max_new_tokens)
    es, prob = _es_probability([x["answer"] for x in scored])
    tr = truth_ratio_from_nll(*_nlls(scored), "closer_to_1_better")
    rg = rouge_of([x["generation"] for x in scored], forget_records)
    return {"es": es, "forget_probability": prob, "forget_truth_ratio": tr, "forget_rouge": rg}


def combine(forget: dict, utility: dict) -> dict:
    """:func:`evaluate`'s flat summary from :func:`evaluate_forget` and :func:`model_utility`."""
    summary = {"es": forget["es"]["value"], "model_utility": utility["model_utility"],
               **{k: forget[k]["value"] for k in ("forget_probability", "forget_rouge", "forget_truth_ratio")},
               **utility["components"], "es_retain": utility["es_retain"]["value"]}
    summary["per_example"] = {**{k: forget[k]["per_example"] for k in forget},
                              "forget_generations": forget["forget_rouge"]["generations"],
                              **utility["per_example"], "es_retain": utility["es_retain"]["per_example"]}
    return summary


def evaluate(model: Any, tokenizer: Any, forget_records: Sequence[dict], utility_sets: dict,
             max_new_tokens: int = 64, batch_size: int = 16, chat: bool = True, bf16: bool = False) -> dict:
    """ES and forget-side metrics on a forget split, plus Model Utility and ES on the retain set.

    Every answer is scored once, its question's prompt once (:func:`scored_records`);
    :func:`evaluate_metric_by_metric` gives the same numbers the slow way, and the tests hold them to it.

    Args:
        forget_records: records of ``forgetXX_perturbed`` (question, answer, paraphrased and
            perturbed answers).
        utility_sets: the three Model Utility sets.
    Returns:
        A flat summary (``es``, ``es_retain``, ``model_utility``, ``forget_probability``,
        ``forget_rouge``, ``forget_truth_ratio`` and the nine utility components) plus ``per_example``.
    """
    kw = dict(batch_size=batch_size, chat=chat, bf16=bf16)
    return combine(evaluate_forget(model, tokenizer, forget_records, max_new_tokens, **kw),
                   model_utility(model, tokenizer, utility_sets, max_new_tokens, **kw))


def evaluate_metric_by_metric(model: Any, tokenizer: Any, forget_records: Sequence[dict], utility_sets: dict,
                              max_new_tokens: int = 64, batch_size: int = 16) -> dict:
    """:func:`evaluate`'s numbers the slow way, for tests and benchmarks: metric by metric, each
    answer scored behind its own prompt, answers scored again by every metric that needs them (the
    evaluation before grouped scoring), greedy answers from the model's ``generate``."""
    kw = dict(batch_size=batch_size)
    gen = dict(batch_size=batch_size, generate=generate_answers_by_generate)
    retain = utility_sets["retain_perturbed"]
    out = {"es": extraction_strength(model, tokenizer, forget_records, **kw)["value"],
           "forget_probability": probability(model, tokenizer, forget_records, **kw)["value"],
           "forget_truth_ratio": truth_ratio(model, tokenizer, forget_records, "closer_to_1_better", **kw)["value"],
           "forget_rouge": rouge(model, tokenizer, forget_records, max_new_tokens, **gen)["value"],
           "es_retain": extraction_strength(model, tokenizer, retain, **kw)["value"]}
    components = {"retain_perturbed/probability": probability(model, tokenizer, retain, **kw)["value"],
                  "retain_perturbed/truth_ratio": truth_ratio(model, tokenizer, retain, "true_better", **kw)["value"],
                  "retain_perturbed/rouge": rouge(model, tokenizer, retain, max_new_tokens, **gen)["value"]}
    for name in UTILITY_SETS[1:]:
        c, w = correct_and_wrong_nll(model, tokenizer, utility_sets[name], correct_key="answer", **kw)
        components[f"{name}/probability"] = probability_with_options_from_nll(c, w)["value"]
        components[f"{name}/truth_ratio"] = truth_ratio_from_nll(c, w, "true_better")["value"]
        components[f"{name}/rouge"] = rouge(model, tokenizer, utility_sets[name], max_new_tokens, **gen)["value"]
    return {**out, **components, "model_utility": harmonic_mean(list(components.values()))}


def evaluate_on_source(model: Any, tokenizer: Any, data_source: str, forget_split: str,
                       limit: int | None = None, max_new_tokens: int = 64, batch_size: int = 16,
                       bf16: bool = False) -> dict:
    """:func:`evaluate` on ``<forget_split>_perturbed`` and the utility sets of ``data_source``
    (``es_retain``: ES on ``retain_perturbed``, questions every model here was trained on).

    The evaluation every notebook reports for a model, so tables of different notebooks compare.
    ``limit`` keeps the first N records of each set (``None``: all).
    """
    from . import data

    forget_eval = data.load_split(data_source, f"{forget_split}_perturbed", limit)
    utility_sets = data.load_utility_sets(data_source, limit)
    return evaluate(model, tokenizer, forget_eval, utility_sets, max_new_tokens, batch_size, bf16=bf16)


def es_on_source(model: Any, tokenizer: Any, data_source: str, forget_split: str, limit: int | None = None,
                 batch_size: int = 16, bf16: bool = False) -> dict:
    """Only the two ES numbers of :func:`evaluate_on_source` (``es`` on ``<forget_split>_perturbed``,
    ``es_retain`` on ``retain_perturbed``), for runs that cannot afford Model Utility's generations."""
    from . import data

    out = {"per_example": {}}
    for key, config in (("es", f"{forget_split}_perturbed"), ("es_retain", "retain_perturbed")):
        res = extraction_strength(model, tokenizer, data.load_split(data_source, config, limit), batch_size, bf16=bf16)
        out[key], out["per_example"][key] = res["value"], res["per_example"]
    return out


def evaluate_model_cached(model_id: str, data_source: str, forget_split: str, limit: int | None = None,
                          max_new_tokens: int = 64, batch_size: int = 16, device: str = "cpu",
                          dtype: torch.dtype = torch.float32) -> dict:
    """:func:`evaluate_on_source` of a saved model, its two halves cached on disk under a
    :func:`frag_utils.cache.key` each: the model's identity (a cached checkpoint's own key), the
    evaluation data's content, every setting and the package's code. The forget half is keyed by
    its split, Model Utility (with retain ES) not: every run that evaluates the same weights the same
    way (a target read by many runs, an unlearned model and its attacks, one model on three splits)
    computes each half once.
    """
    from . import cache, data

    loaded: list = []

    def model_and_tokenizer() -> list:
        if not loaded:
            loaded.extend(models.load_model(model_id, device=device, dtype=dtype))
        return loaded

    settings = {"data_source": data_source, "prompt_template": prompts.template_name(),
                "max_new_tokens": max_new_tokens, "batch_size": batch_size, "device": device, "dtype": str(dtype)}
    forget_records = data.load_split(data_source, f"{forget_split}_perturbed", limit)
    sets = data.load_utility_sets(data_source, limit)
    forget = cache.cached_json(
        "evaluation_forget", {**settings, "data": cache.records_digest(forget_records)}, {"model": model_id},
        lambda: evaluate_forget(*model_and_tokenizer(), forget_records, max_new_tokens, batch_size))
    utility = cache.cached_json(
        "model_utility", {**settings, "data": cache.records_digest([sets[k] for k in UTILITY_SETS])},
        {"model": model_id}, lambda: model_utility(*model_and_tokenizer(), sets, max_new_tokens, batch_size))
    return combine(forget, utility)
