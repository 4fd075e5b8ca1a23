"""What deterministic mode's MKL branch costs: seconds per training step (forward, backward, AdamW)
of a randomly initialised model of SmolLM2-135M's shape on 8 x 256 tokens, in fp32, in this
process's numerics mode. Run once per MKL branch and compare (docs/reproducibility.md quotes it):

    MKL_CBWR=COMPATIBLE .venv/bin/python scripts/mode_cost.py
    MKL_CBWR=AVX2 .venv/bin/python scripts/mode_cost.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import frag_utils  # noqa: E402,F401  (the deterministic-mode variables, before torch loads)
from frag_utils import numerics  # noqa: E402


def step_seconds(repeats: int = 3, batch: int = 8, tokens: int = 256) -> float:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, config.vocab_size, (batch, tokens), generator=torch.Generator().manual_seed(0))

    def step():
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) / repeats


if __name__ == "__main__":
    status = numerics.status()
    print(f"MKL_CBWR={status['mkl_cbwr']} ATen {status['aten_cpu_capability']} threads {status['threads']}: "
          f"{step_seconds():.2f} s per training step (8 x 256 tokens, SmolLM2-135M's shape, fp32)")
