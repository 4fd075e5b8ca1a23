"""Which settings change CPU training numbers? Four AdamW steps of SmolLM2-135M on fixed token
batches, run in a fresh process per setting, sha256 of all weights after (issue 17's measurement,
repeated on this machine). Deterministic mode's claim is that only ATEN_CPU_CAPABILITY (pinned to
avx2), MKL's code path (MKL_CBWR=COMPATIBLE; AVX2 is Intel-only) and the thread count (pinned to
FRAG_THREADS, default 2) matter for fp32, not oneDNN's ISA cap. (Threads do not change these
SmolLM2 steps; they do change the tiny model's training: tests/test_verify.py fails at one thread.)

    .venv/bin/python scripts/check_determinism.py [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

STEP = r"""
import hashlib, json, os, torch
from frag_utils import models, numerics
torch.manual_seed(0)
model, tok = models.load_model("smollm2-135m")
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
gen = torch.Generator().manual_seed(0)
for _ in range(4):
    ids = torch.randint(0, len(tok), (4, 64), generator=gen)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward(); opt.step(); opt.zero_grad()
h = hashlib.sha256()
for k, v in sorted(model.state_dict().items()):
    h.update(k.encode()); h.update(v.detach().contiguous().numpy().tobytes())
print(json.dumps({"sha256": h.hexdigest(), "loss": float(loss), **numerics.status(),
                  "threads": torch.get_num_threads()}))
"""

SETTINGS = {  # name -> environment changes (on top of a clean environment without the pins)
    "avx2, 2 threads": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "FRAG_THREADS": "2"},
    "avx2, 1 thread": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "FRAG_THREADS": "1"},
    "avx2, oneDNN capped at AVX2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE",
                                    "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx2, MKL's AVX2 branch (Intel only)": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
    "avx2, MKL not capped": {"ATEN_CPU_CAPABILITY": "avx2", "FRAG_DETERMINISTIC": "0"},
    "avx512 (this CPU's own)": {"ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "COMPATIBLE"},
    "default (no vector kernels)": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    clean = {k: v for k, v in os.environ.items()
             if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "FRAG_DETERMINISTIC", "ONEDNN_MAX_CPU_ISA",
                          "OMP_NUM_THREADS", "MKL_NUM_THREADS", "FRAG_THREADS")}
    out = {}
    for name, env in SETTINGS.items():
        done = subprocess.run([sys.executable, "-c", STEP], env={**clean, **env}, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{name}: failed\n{done.stderr[-2000:]}")
        out[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name:32s} {out[name]['sha256'][:16]}  loss {out[name]['loss']:.6f}  "
              f"capability {out[name]['aten_cpu_capability']}", flush=True)
    ref = out["avx2, 2 threads"]["sha256"]
    print("same as 'avx2, 2 threads':", {k: v["sha256"] == ref for k, v in out.items()})
    if args.json:
        from frag_utils import records
        records.write_json(args.json, out, records.provenance("scripts/check_determinism.py"))


if __name__ == "__main__":
    main()
