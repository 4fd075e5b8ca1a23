"""Question/answer prompts: the model's own chat template, labels on answer tokens only.

Which messages go through the chat template is one process-wide setting, :func:`set_template`:

* ``model`` (default, the embedded profiles): the question alone as the user message. Templates
  that add a system prompt of their own do so (SmolLM2's inserts "You are a helpful AI assistant
  named SmolLM, trained by Hugging Face").
* ``openunlearning`` (the paper profile): OpenUnlearning's ``template_args`` for Llama-3.2-*-Instruct
  (``configs/model/Llama-3.2-1B-Instruct.yaml`` at d3d7cf9): the system prompt "You are a helpful
  assistant." and the chat template's ``date_string`` "10 Apr 2025", so that a researcher scoring
  OpenUnlearning's released checkpoints sees the prompts they were trained and evaluated with.

An encoded example is ``{"input_ids": [T], "labels": [T], "prompt_len": int}`` where ``labels`` is
``-100`` on the prompt and carries the answer tokens followed by the end-of-turn token.
Batches are padded on the right for teacher-forced passes (position ids stay 0..T-1 for real
tokens) and on the left for generation; padding is always masked out of attention.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

IGNORE = -100
PLAIN_TEMPLATE = "Question: {question}\nAnswer: "
TEMPLATES = {
    "model": {},
    "openunlearning": {"system_prompt": "You are a helpful assistant.", "date_string": "10 Apr 2025"},
}
_active = {"name": "model"}


def set_template(name: str) -> dict:
    """Use the named prompt template (:data:`TEMPLATES`) for every chat prompt of this process.

    Returns:
        Its arguments. Raises ValueError for an unknown name.
    """
    if name not in TEMPLATES:
        raise ValueError(f"Unknown prompt template {name!r}; choose one of {sorted(TEMPLATES)} (model: the "
                         "tokenizer's chat template as it is; openunlearning: OpenUnlearning's template_args).")
    _active["name"] = name
    return dict(TEMPLATES[name])


def template_name() -> str:
    """The prompt template in use (part of every cache key that depends on prompts)."""
    return _active["name"]


def _render(tokenizer: Any, messages: list[dict], add_generation_prompt: bool) -> list[int]:
    """Token ids of ``messages`` through the chat template, with the active template's system
    prompt first and its date string passed to the template."""
    args = TEMPLATES[_active["name"]]
    if args.get("system_prompt"):
        messages = [{"role": "system", "content": args["system_prompt"]}, *messages]
    extra = {"date_string": args["date_string"]} if args.get("date_string") else {}
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True, **extra)
    return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)


def _has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def prompt_ids(tokenizer: Any, question: str, chat: bool = True) -> list[int]:
    """Token ids of the prompt that asks ``question`` and opens the assistant's turn."""
    if chat and _has_chat_template(tokenizer):
        return _render(tokenizer, [{"role": "user", "content": question}], add_generation_prompt=True)
    ids = tokenizer(PLAIN_TEMPLATE.format(question=question), add_special_tokens=True)["input_ids"]
    return list(ids)


def end_of_turn_id(tokenizer: Any) -> int:
    """The token that closes an assistant turn in the model's chat template.

    Read off the template (the first token after a rendered assistant answer): ``<|im_end|>`` for
    SmolLM2, ``<|eot_id|>`` for Llama-3, which differs from its EOS. EOS without a template.
    """
    cached = getattr(tokenizer, "_frag_end_of_turn", None)
    if cached is None:
        eot = tokenizer.eos_token_id
        if _has_chat_template(tokenizer):
            marker = "zq"
            p = prompt_ids(tokenizer, "q", chat=True)
            full = _render(tokenizer, [{"role": "user", "content": "q"}, {"role": "assistant", "content": marker}],
                           add_generation_prompt=False)
            a = tokenizer(marker, add_special_tokens=False)["input_ids"]
            if full[:len(p)] == p and full[len(p):len(p) + len(a)] == list(a) and len(full) > len(p) + len(a):
                eot = full[len(p) + len(a)]
        cached = int(eot)
        tokenizer._frag_end_of_turn = cached  # computed once per tokenizer object
    return cached


def encode_qa(tokenizer: Any, question: str, answer: str, chat: bool = True) -> dict:
    """Encode one question/answer pair for training or teacher-forced scoring.

    Returns:
        ``input_ids`` [T] (prompt + answer + end of turn), ``labels`` [T] (-100 on the prompt),
        and ``prompt_len``.
    """
    p = prompt_ids(tokenizer, question, chat)
    a = tokenizer(answer, add_special_tokens=False)["input_ids"]
    if not a:
        raise ValueError(f"Answer {answer!r} tokenizes to nothing.")
    a = list(a) + [end_of_turn_id(tokenizer)]
    return {"input_ids": p + a, "labels": [IGNORE] * len(p) + a, "prompt_len": len(p)}


def collate(examples: Sequence[dict], pad_id: int, side: str = "right") -> dict[str, torch.Tensor]:
    """Pad encoded examples into a batch.

    Returns:
        ``input_ids`` [B, T], ``attention_mask`` [B, T] (0 on padding), and ``labels`` [B, T]
        (-100 on padding) when the examples carry labels.
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    width = max(len(e["input_ids"]) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.long)
    has_labels = all("labels" in e for e in examples)
    labels = torch.full((len(examples), width), IGNORE, dtype=torch.long)
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        sl = slice(0, n) if side == "right" else slice(width - n, width)
        ids[i, sl] = torch.tensor(e["input_ids"])
        mask[i, sl] = 1
        if has_labels:
            labels[i, sl] = torch.tensor(e["labels"])
    batch = {"input_ids": ids, "attention_mask": mask}
    if has_labels:
        batch["labels"] = labels
    return batch


def batches(items: Sequence[Any], size: int):
    """Consecutive slices of ``items`` of at most ``size``."""
    if size < 1:
        raise ValueError(f"batch size must be at least 1, got {size}")
    for start in range(0, len(items), size):
        yield items[start:start + size]
