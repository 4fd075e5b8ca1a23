"""Numerics: the thread count, devices and dtypes, and bf16 weight storage.

**One machine reproduces itself.** CPU runs use the machine's own (fastest) kernels in fp32. fp32
results depend on those kernels and on how many intra-op threads split a reduction, so the thread
count is pinned (``FRAG_THREADS``, default :data:`THREADS`): a rerun on the same machine gives the
same bits (``scripts/check_resume.sh``). Another machine lands within the tolerances of
``papermill_runs/tolerance.yaml`` instead (docs/reproducibility.md). Pinning the kernels as well
(``ATEN_CPU_CAPABILITY=avx2``, ``MKL_CBWR=COMPATIBLE`` before torch loads) is left to the user: it
was measured to cost 2 to 2.6 times a training step.

**bf16 weight storage** (``weights="bf16"``): OpenUnlearning loads Llama with
``torch_dtype: bfloat16`` and trains the bf16 weights (no fp32 master copy), so an optimizer step
smaller than half a bf16 ulp of a weight is lost. Here it means fp32 compute with every weight
rounded to the nearest bf16 value after every optimizer step (:func:`round_to_bf16_`), which is
portable, deterministic, and on a GPU close to native bf16 training (tested on a tiny model).
"""
from __future__ import annotations

import os
import sys
from typing import Iterable

THREADS = 2  # intra-op threads of every run (FRAG_THREADS overrides): another count gives other bits
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
WEIGHTS = ("fp32", "bf16")  # how trained weights are stored: fp32, or rounded to bf16 after every step


class NumericsError(ValueError):
    """A precision setting that cannot be honoured, with what to do instead."""


def threads(environ: dict | None = None) -> int:
    """The intra-op thread count: ``FRAG_THREADS``, else :data:`THREADS`."""
    environ = os.environ if environ is None else environ
    text = str(environ.get("FRAG_THREADS", THREADS))
    if not text.isdigit() or int(text) < 1:
        raise NumericsError(f"FRAG_THREADS must be a whole number >= 1, got {text!r}.")
    return int(text)


def pin_threads(environ: dict | None = None) -> dict:
    """Set ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` in ``environ`` (default ``os.environ``, which
    kernels and subprocesses inherit) to :func:`threads`, and torch's count when torch is loaded."""
    environ = os.environ if environ is None else environ
    count = threads(environ)
    for key in THREAD_VARS:
        environ[key] = str(count)
    if environ is os.environ and "torch" in sys.modules:
        import torch

        if torch.get_num_threads() != count:
            torch.set_num_threads(count)
    return environ


def check_autocast(bf16: bool, device: str) -> None:
    """Refuse bf16 autocast on the CPU: runs compute in fp32 there (weights may still be stored in bf16).

    Raises:
        NumericsError: ``bf16`` on a CPU device.
    """
    if bf16 and str(device).startswith("cpu"):
        raise NumericsError(
            "bf16 autocast on the CPU is not supported: CPU runs compute in fp32. Set bf16 to false "
            "(weights='bf16' still stores the weights in bf16, as OpenUnlearning), or run on a GPU.")


DTYPES = ("auto", "fp32", "bf16")  # what models are loaded as for evaluation, calibration and scoring


def resolve_device(device: str) -> str:
    """The torch device a run uses: ``auto`` is ``cuda`` when a CUDA device is usable, else ``cpu``.

    Raises:
        NumericsError: not a device name, or a device this installation cannot use (``cuda`` on a
            machine or torch build without CUDA), with what to do instead.
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        raise NumericsError(f"{device!r} is not a device; use auto, cpu, cuda, cuda:N or mps.") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise NumericsError(f"device {device!r}: this machine or torch build has no usable CUDA device "
                            f"(torch {torch.__version__}); use cpu or auto, or install torch's CUDA build on a "
                            "GPU machine (README, 'GPUs').")
    if kind == "cuda" and ":" in device and int(device.split(":")[1]) >= torch.cuda.device_count():
        raise NumericsError(f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) are visible.")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise NumericsError(f"device {device!r}: MPS is not available here; use cpu.")
    if kind not in ("cpu", "cuda", "mps"):
        raise NumericsError(f"device {device!r}: use auto, cpu, cuda, cuda:N or mps.")
    return device


def resolve_dtype(dtype: str, device: str):
    """The torch dtype models are loaded in for evaluation, calibration and scoring: ``auto`` is
    bf16 on a GPU and fp32 on the CPU.

    Raises:
        NumericsError: an unknown name.
    """
    import torch

    if dtype not in DTYPES:
        raise NumericsError(f"dtype must be one of {DTYPES}, got {dtype!r}.")
    on_cpu = str(device).startswith("cpu")
    if dtype == "auto":
        dtype = "fp32" if on_cpu else "bf16"
    return torch.bfloat16 if dtype == "bf16" else torch.float32


def check_weights(weights: str) -> str:
    """``weights`` if it is a known storage precision, else a :class:`NumericsError` saying which are."""
    if weights not in WEIGHTS:
        raise NumericsError(f"weights must be one of {WEIGHTS} (fp32 storage, or bf16 storage as OpenUnlearning "
                            f"trains), got {weights!r}.")
    return weights


def round_to_bf16_(params: Iterable) -> int:
    """Round every tensor of ``params`` in place to the nearest bf16 value (ties to even), keeping
    its dtype; returns how many elements changed. bf16 tensors are left as they are."""
    import torch

    changed = 0
    with torch.no_grad():
        for p in params:
            if p.dtype == torch.bfloat16 or not p.is_floating_point():
                continue
            rounded = p.to(torch.bfloat16).to(p.dtype)
            changed += int((rounded != p).sum())
            p.copy_(rounded)
    return changed


def is_bf16_representable(t) -> bool:
    """Whether every element of tensor ``t`` is exactly a bf16 value."""
    import torch

    return bool(torch.equal(t.to(torch.bfloat16).to(t.dtype), t))


def bf16_storage_callback():
    """A ``transformers.TrainerCallback`` that stores the model's weights in bf16: every parameter
    is rounded when training begins, and every trainable one after each optimizer step (before the
    next forward pass, the checkpoint saves and the logs)."""
    from transformers import TrainerCallback

    class Bf16Storage(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            round_to_bf16_(model.parameters())

        def on_step_end(self, args, state, control, model=None, **kwargs):
            round_to_bf16_(p for p in model.parameters() if p.requires_grad)

    return Bf16Storage()
