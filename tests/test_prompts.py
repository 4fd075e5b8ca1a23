import pytest
import torch

from frag_utils import metrics, prompts


def test_labels_cover_answer_and_end_of_turn_only(tokenizer):
    enc = prompts.encode_qa(tokenizer, "Where was Ann born?", "Ann was born in Lyon, France.")
    p = enc["prompt_len"]
    assert all(label == prompts.IGNORE for label in enc["labels"][:p])
    assert enc["labels"][p:] == enc["input_ids"][p:]
    assert enc["labels"][-1] == prompts.end_of_turn_id(tokenizer)
    assert tokenizer.decode(enc["input_ids"][p:-1]) == "Ann was born in Lyon, France."
    text = tokenizer.decode(enc["input_ids"][:p])
    assert "Where was Ann born?" in text and text.endswith("<|im_start|>assistant\n")
    # the prompt is the model's own chat template, and answer tokens match joint tokenization
    joint = tokenizer.apply_chat_template([{"role": "user", "content": "Where was Ann born?"},
                                           {"role": "assistant", "content": "Ann was born in Lyon, France."}],
                                          tokenize=True)["input_ids"]
    assert list(joint[:len(enc["input_ids"])]) == enc["input_ids"]


def test_collate_masks_padding_on_either_side():
    ex = [{"input_ids": [5, 6, 7], "labels": [-100, 6, 7]}, {"input_ids": [8], "labels": [8]}]
    right = prompts.collate(ex, pad_id=0, side="right")
    assert right["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert right["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert right["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]
    left = prompts.collate(ex, pad_id=0, side="left")
    assert left["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert left["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]


def test_padding_never_changes_real_tokens(partly_trained, tokenizer, qa_records):
    """Batched (padded) teacher forcing and generation equal one-example-at-a-time results."""
    pairs = [(r["question"], r["answer"]) for r in qa_records]
    batched = metrics.answer_stats(partly_trained, tokenizer, pairs, batch_size=8)
    single = metrics.answer_stats(partly_trained, tokenizer, pairs, batch_size=1)
    lengths = {len(s.logprobs) for s in single}
    assert len(lengths) > 1  # the batch really is padded
    for b, s in zip(batched, single):
        assert torch.allclose(b.logprobs, s.logprobs, atol=1e-4)
        assert torch.equal(b.hits, s.hits)
    qs = [r["question"] for r in qa_records]
    assert metrics.generate_answers(partly_trained, tokenizer, qs, 12, batch_size=8) == \
        metrics.generate_answers(partly_trained, tokenizer, qs, 12, batch_size=1)


def test_openunlearning_template_adds_its_system_prompt_and_date(tokenizer):
    """configs/model/Llama-3.2-1B-Instruct.yaml template_args: the system prompt and date string go
    through the chat template; the answer's labels are the same tokens either way."""
    q, a = "Who wrote it?", "Jane Doe wrote it."
    try:
        plain = prompts.encode_qa(tokenizer, q, a)
        prompts.set_template("openunlearning")
        ou = prompts.encode_qa(tokenizer, q, a)
        direct = tokenizer.apply_chat_template([{"role": "system", "content": "You are a helpful assistant."},
                                                {"role": "user", "content": q}], add_generation_prompt=True,
                                               tokenize=False, date_string="10 Apr 2025")
        assert tokenizer.decode(ou["input_ids"][:ou["prompt_len"]]) == direct
        assert "You are a helpful assistant." in direct and "SmolLM" not in direct
        assert [t for t in ou["labels"] if t != prompts.IGNORE] == [t for t in plain["labels"] if t != prompts.IGNORE]
        with pytest.raises(ValueError, match="Unknown prompt template"):
            prompts.set_template("llama")
    finally:
        prompts.set_template("model")
    assert prompts.encode_qa(tokenizer, q, a) == plain
