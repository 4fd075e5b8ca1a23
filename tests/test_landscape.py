import copy

import pytest
import torch

from frag_utils import data, landscape, models

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.one_thread


def test_alphas_and_barrier_by_hand():
    assert landscape.alphas(0.25) == [0, 0.25, 0.5, 0.75, 1.0]
    assert len(landscape.alphas(0.05)) == 21
    with pytest.raises(ValueError):
        landscape.alphas(0.3)
    # line from 1 to 3; the bump at 0.5 is 4 - 2 = 2 above it
    assert landscape.barrier([0, 0.5, 1], [1.0, 4.0, 3.0]) == pytest.approx(2.0)
    assert landscape.barrier([0, 0.5, 1], [1.0, 1.5, 3.0]) == pytest.approx(0.0)  # below the line: no barrier
    with pytest.raises(ValueError):
        landscape.barrier([0.1, 1], [1, 2])


def test_interpolation_ends_are_the_two_models_and_the_middle_is_their_average(tokenizer):
    recs = data.load_split("synthetic", "forget10", limit=4)
    a = models.build_tiny_model(len(tokenizer), seed=0).eval()
    b = models.build_tiny_model(len(tokenizer), seed=1).eval()
    before = copy.deepcopy(a.state_dict())
    losses = landscape.interpolation_losses(a, b, tokenizer, recs, [0, 0.5, 1])
    assert losses[0] == pytest.approx(landscape.forget_loss(a, tokenizer, recs), abs=1e-6)
    assert losses[2] == pytest.approx(landscape.forget_loss(b, tokenizer, recs), abs=1e-6)
    mid = models.build_tiny_model(len(tokenizer), seed=0).eval()
    mid.load_state_dict({k: (a.state_dict()[k] + b.state_dict()[k]) / 2 for k in before})
    assert losses[1] == pytest.approx(landscape.forget_loss(mid, tokenizer, recs), abs=1e-5)
    assert all(torch.equal(before[k], a.state_dict()[k]) for k in before)  # the original is untouched


def test_interpolation_refuses_two_architectures(tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    a = models.build_tiny_model(len(tokenizer), seed=0)
    b = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                     intermediate_size=64, num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(ValueError, match="differ in their parameters"):
        landscape.interpolation_losses(a, b, tokenizer, [{"question": "q", "answer": "a"}], [0, 1])
