"""Which CPU kernels give other bits on another CPU: the sha256 of each op's output on fixed inputs.

Run on two machines (in deterministic mode, as every record is made) and compare the two files:
an op whose hash differs is one whose result depends on the CPU. The inputs come from torch's own
generator (the same numbers on any CPU); the ops are those a training step of SmolLM2-135M runs
(its shapes: hidden 576, MLP 1536, 9 heads of 64), forward and backward.

    .venv/bin/python scripts/numerics_fingerprint.py               # prints JSON
    .venv/bin/python scripts/numerics_fingerprint.py --out bench/results/numerics_fingerprint_<cpu>.json
    .venv/bin/python scripts/numerics_fingerprint.py --compare A.json B.json

Measured so far (``bench/results/numerics_fingerprint_*.json``): see ``docs/reproducibility.md``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import frag_utils  # noqa: E402,F401  (sets the deterministic-mode variables before torch loads)
from frag_utils import numerics, records  # noqa: E402


def _hash(t) -> str:
    import torch

    return hashlib.sha256(t.detach().contiguous().to(torch.float32).numpy().tobytes()).hexdigest()[:16]


def fingerprint() -> dict[str, str]:
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=g) * scale

    out = {}
    x, w, b = randn(256, 576), randn(1536, 576, scale=0.04), randn(1536, scale=0.01)
    out["linear 256x576 @ 576x1536"] = _hash(F.linear(x, w))
    out["addmm (linear with bias)"] = _hash(F.linear(x, w, b))
    grad = randn(256, 1536)
    out["weight gradient g^T x (1536x256 @ 256x576)"] = _hash(grad.t() @ x)
    out["input gradient g w (256x1536 @ 1536x576)"] = _hash(grad @ w)
    tall = randn(4096, 64)
    out["tall-skinny t^T t (64x4096 @ 4096x64)"] = _hash(tall.t() @ tall)
    out["matmul 64x64 (small)"] = _hash(randn(64, 64) @ randn(64, 64))
    q, k, v = (randn(2, 9, 128, 64) for _ in range(3))
    out["bmm q k^T (2x9x128x64)"] = _hash(q @ k.transpose(-1, -2))
    out["scaled_dot_product_attention, causal"] = _hash(F.scaled_dot_product_attention(q, k, v, is_causal=True))
    logits = randn(512, 49152 // 8)
    out["softmax"] = _hash(torch.softmax(logits, -1))
    out["log_softmax"] = _hash(torch.log_softmax(logits, -1))
    target = torch.randint(0, logits.shape[1], (512,), generator=g)
    out["cross_entropy (mean)"] = _hash(F.cross_entropy(logits, target).reshape(1))
    h = randn(256, 576)
    out["rms norm (x * rsqrt(mean x^2 + eps))"] = _hash(h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5))
    out["silu"] = _hash(F.silu(h))
    out["exp"] = _hash(torch.exp(h))
    out["log"] = _hash(torch.log(h.abs() + 1e-3))
    out["sum of 1e6 values"] = _hash(randn(1_000_000).sum().reshape(1))
    out["sum over dim 0 (4096x576)"] = _hash(randn(4096, 576).sum(0))
    emb = torch.nn.Embedding(1000, 64)
    with torch.no_grad():
        emb.weight.copy_(randn(1000, 64))
    idx = torch.randint(0, 1000, (4096,), generator=g)
    emb(idx).pow(2).sum().backward()
    out["embedding backward (index_add)"] = _hash(emb.weight.grad)
    # one AdamW step of a two-layer MLP, as the trainer takes it (foreach)
    mlp = torch.nn.Sequential(torch.nn.Linear(576, 1536), torch.nn.SiLU(), torch.nn.Linear(1536, 576))
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(randn(*p.shape, scale=0.03))
    opt = torch.optim.AdamW(mlp.parameters(), lr=1e-4, weight_decay=0.01)
    loss = (mlp(x) - h).pow(2).mean()
    loss.backward()
    out["MLP loss"] = _hash(loss.reshape(1))
    out["MLP weight gradient (backward through SiLU)"] = _hash(mlp[0].weight.grad)
    opt.step()
    out["MLP weights after one AdamW step"] = _hash(torch.cat([p.flatten() for p in mlp.parameters()]))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="write the fingerprint (with the machine) to this JSON file")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two fingerprint files")
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (json.loads(Path(f).read_text()) for f in args.compare)
        for name in a["ops"]:
            same = a["ops"][name] == b["ops"].get(name)
            print(f"{'same   ' if same else 'DIFFERS'}  {name}")
        print(f"A: {a['cpu']['cpu_model']} {a['numerics']}\nB: {b['cpu']['cpu_model']} {b['numerics']}")
        return 0
    result = {"ops": fingerprint(), "numerics": numerics.status(), "cpu": records.cpu_description()}
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
