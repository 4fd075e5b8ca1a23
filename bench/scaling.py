"""FRAG's weight comparison on models of growing size: time should grow linearly with the
parameter count, and the memory beyond what the process holds before comparing should stay flat:
both checkpoints are streamed tensor by tensor (as `frag score` does with its calibration cached),
so it should follow the largest tensor, not the model.

Sizes: the tiny test model, a mid-size random Llama, a random model of the embedded model's
shape (SmolLM2-135M), and a random Llama of about 1B parameters (Llama-3.2-1B's shape), all built
from configs (no download). For each, an original and a perturbed copy are saved once under the
cache (about 10 GB for the 1B pair), calibration norms are random (the comparison's cost does
not depend on them), and the comparison runs in a fresh process whose peak resident memory
(VmHWM) is read before and after it. Writes bench/results/scaling.json.
    python bench/scaling.py [--sizes tiny,mid,smol,1b] [--repeats R] [--quick]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from frag_utils import frag, models, paths, records  # noqa: E402

from _common import machine  # noqa: E402

SHAPES = {  # hidden, layers, intermediate, heads, kv heads, vocab
    "tiny": None,  # models.build_tiny_model
    "mid": (256, 8, 1024, 4, 2, 49152),
    "smol": (576, 30, 1536, 9, 3, 49152),
    "1b": (2048, 16, 8192, 32, 8, 128256),
}


def build(name: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = models.load_tokenizer(models.SMOLLM2)
    if SHAPES[name] is None:
        return models.build_tiny_model(len(tok), seed=0), tok
    hidden, layers, inter, heads, kv, vocab = SHAPES[name]
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=inter, num_attention_heads=heads,
                      num_key_value_heads=kv, vocab_size=vocab, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg), tok


def pair(name: str) -> tuple[Path, Path]:
    root = paths.cache_dir() / "bench" / "scaling" / name
    original, unlearned = root / "original", root / "unlearned"
    if not (models.is_checkpoint(original) and models.is_checkpoint(unlearned)):
        model, tok = build(name)
        models.save_checkpoint(model, tok, original)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 1e-3)
        models.save_checkpoint(model, tok, unlearned)
        del model
    return original, unlearned


CHILD = r"""
import json, re, sys, time, torch
from frag_utils import frag, records
original, unlearned, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
# both checkpoints streamed tensor by tensor, as `frag score` does with its calibration cached;
# random calibration norms of each scored module's input width (from the tensor shapes)
w0, wu = frag.SafetensorsCheckpoint(original), frag.SafetensorsCheckpoint(unlearned)
names = frag._projection_modules(w0, "all")
shapes = {k: w0.shape(k) for k in w0.keys()}  # from the headers: nothing is read before the comparison
widths = {n: shapes[f"{n}.weight"][1] for n in names}
n_params = sum(torch.Size(v).numel() for v in shapes.values())
g = torch.Generator().manual_seed(0)
xf = {n: torch.rand(d, generator=g) + 0.1 for n, d in widths.items()}
xr = {n: torch.rand(d, generator=g) + 0.1 for n, d in widths.items()}
rss_ready = int(re.search(r"VmRSS:\s+(\d+) kB", open("/proc/self/status").read()).group(1)) * 1024  # now, not the peak
times = []
for _ in range(repeats):
    t = time.perf_counter()
    frag.compute_frag(w0, wu, xf, xr)
    times.append(time.perf_counter() - t)
largest = max(torch.Size(v).numel() for v in shapes.values()) * 4  # the pairs are saved in float32
print(json.dumps({"n_params": n_params, "seconds": times, "rss_after_load": rss_ready,
                  "rss_peak": records.peak_rss_bytes(), "largest_tensor_bytes": largest}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="tiny,mid,smol,1b")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    sizes = ["tiny", "mid"] if args.quick else args.sizes.split(",")
    unknown = sorted(set(sizes) - set(SHAPES))
    if unknown:
        sys.exit(f"Unknown size(s) {unknown}; choose from {sorted(SHAPES)}.")
    rows = []
    for name in sizes:
        original, unlearned = pair(name)
        out = subprocess.run([sys.executable, "-c", CHILD, str(original), str(unlearned), str(args.repeats)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(out.stderr[-2000:])
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ckpt = frag.SafetensorsCheckpoint(unlearned).size_bytes()
        rows.append({"size": name, "n_params": r["n_params"], "checkpoint_bytes": ckpt,
                     "compare_seconds_min": min(r["seconds"]),
                     "compare_seconds_median": sorted(r["seconds"])[len(r["seconds"]) // 2],
                     "seconds_per_million_params": min(r["seconds"]) / r["n_params"] * 1e6,
                     "rss_after_load": r["rss_after_load"], "rss_peak": r["rss_peak"],
                     "largest_tensor_bytes": r["largest_tensor_bytes"],
                     "extra_rss_over_checkpoint": (r["rss_peak"] - r["rss_after_load"]) / ckpt,
                     "extra_rss_over_largest_tensor":
                         (r["rss_peak"] - r["rss_after_load"]) / r["largest_tensor_bytes"]})
        print(f"{name:5} {r['n_params'] / 1e6:8.1f} M params  compare {rows[-1]['compare_seconds_min']:7.2f} s  "
              f"{rows[-1]['seconds_per_million_params'] * 1e3:6.2f} ms/M  extra memory "
              f"{rows[-1]['extra_rss_over_checkpoint']:.2f}x checkpoint", flush=True)
    result = {"rows": rows, "quick": args.quick, "machine": machine()}
    # quick runs stay out of git
    out = (paths.cache_dir() / "bench" if args.quick else paths.BENCH_RESULTS_DIR) / "scaling.json"
    records.write_json(out, result, records.provenance("bench/scaling.py", vars(args)))


if __name__ == "__main__":
    main()
