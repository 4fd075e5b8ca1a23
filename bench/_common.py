"""Helpers shared by the benchmark scripts (not a benchmark itself: run_all.py skips files
starting with an underscore)."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from frag_utils import records


def timed(fn: Callable[[], Any], repeats: int) -> tuple[Any, dict]:
    """Call ``fn`` ``repeats`` times; its last result and ``{"min", "median", "all"}`` seconds."""
    out, times = None, []
    for _ in range(max(1, repeats)):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return out, {"min": min(times), "median": statistics.median(times), "all": times}


def machine() -> dict:
    """What the numbers were measured on."""
    return {"torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available(), **records.environment()}
