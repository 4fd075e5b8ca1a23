"""Numerics: the deterministic CPU mode, and bf16 weight storage.

**Deterministic mode.** fp32 results on the CPU depend on which vectorised kernels torch
dispatches to (``ATEN_CPU_CAPABILITY``: ``default``, ``avx2``, ``avx512``), on the code path MKL's
GEMMs take, and on the number of intra-op threads (how a reduction is split; oneDNN's ISA cap does
not matter). Measured: the tiny model's target trained at 1 thread differs from the one trained at
2; and the tiny target made on an Intel Xeon with ``MKL_CBWR=AVX2`` differs from the one an AMD
EPYC makes with the same setting, because MKL's ``AVX2`` reproducibility branch exists on Intel CPUs
only (elsewhere it silently falls back to the CPU's own dispatch). ``COMPATIBLE`` is MKL's one code
path for Intel and AMD CPUs alike (SSE2 without approximate reciprocals), at about twice the time
of a training step. So a CPU run is meant to be a function of code, data, parameters and seed on
any x86-64 CPU with AVX2 when, before torch is imported,

* ``ATEN_CPU_CAPABILITY=avx2`` and ``MKL_CBWR=COMPATIBLE`` (MKL's conditional numerical
  reproducibility) are set,
* the thread count is fixed: ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` are set to
  ``FRAG_THREADS`` (default :data:`DETERMINISTIC_THREADS`, what every record so far was made
  with), whatever they were, and
* everything is computed in fp32 (bf16 autocast on the CPU runs on kernels chosen by the CPU's
  own features: AMX, AVX512-BF16).

:func:`set_deterministic_env` sets the variables (``FRAG_DETERMINISTIC=0`` opts out); the
Makefile, ``import frag_utils`` (when torch is not yet imported; every notebook imports it before
torch), the runner (whose kernels inherit its environment) and the test suite all call or export it.
Records made before 2026-11-25 (evening) used ``MKL_CBWR=AVX2``: they reproduce on Intel CPUs only.
Whether ``COMPATIBLE`` gives the same bits on an Intel and an AMD CPU is MKL's documented promise,
not yet measured here (``scripts/numerics_fingerprint.py --compare`` on two machines says).
:func:`status` says what a process actually runs with, and every record carries it.

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

DETERMINISTIC_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"}
DETERMINISTIC_THREADS = 2  # intra-op threads in deterministic mode (FRAG_THREADS overrides)
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
OPT_OUT = "FRAG_DETERMINISTIC"  # set to 0 to run with the machine's fastest (CPU-dependent) kernels
WEIGHTS = ("fp32", "bf16")  # how trained weights are stored: fp32, or rounded to bf16 after every step


class NumericsError(ValueError):
    """A precision setting that cannot be honoured, with what to do instead."""


def deterministic_requested(environ: dict | None = None) -> bool:
    """Whether deterministic mode is asked for (the default; ``FRAG_DETERMINISTIC=0`` turns it off)."""
    environ = os.environ if environ is None else environ
    return str(environ.get(OPT_OUT, "1")).strip().lower() not in ("0", "false", "no", "off")


def set_deterministic_env(environ: dict | None = None) -> dict:
    """Put the deterministic-mode variables into ``environ`` (default ``os.environ``) unless the user
    opted out or set them already; returns ``environ``. Effective only before torch is imported in
    the process that reads them (a kernel, a subprocess, this process if torch is not loaded yet)."""
    environ = os.environ if environ is None else environ
    if deterministic_requested(environ):
        for key, value in DETERMINISTIC_ENV.items():
            environ.setdefault(key, value)
        threads = str(deterministic_threads(environ))
        for key in THREAD_VARS:  # forced: another count may give other bits
            environ[key] = threads
        if environ is os.environ and "torch" in sys.modules:  # too late for the variables: set it directly
            import torch

            if torch.get_num_threads() != int(threads):
                torch.set_num_threads(int(threads))
    return environ


def cache_tag(environ: dict | None = None) -> str:
    """The name of this numerics mode's cache folder, from the environment (no torch needed):
    ``cpu-<ATen capability>-<MKL branch>-<threads>t`` in deterministic mode, ``cpu-native``
    otherwise (the CPU's own kernels: nothing made there is reused by a deterministic run)."""
    environ = os.environ if environ is None else environ
    if not deterministic_requested(environ):
        return "cpu-native"
    aten = environ.get("ATEN_CPU_CAPABILITY", DETERMINISTIC_ENV["ATEN_CPU_CAPABILITY"])
    mkl = environ.get("MKL_CBWR", DETERMINISTIC_ENV["MKL_CBWR"])
    from .paths import safe_name

    return safe_name(f"cpu-{aten}-{mkl}-{deterministic_threads(environ)}t".lower())


def deterministic_threads(environ: dict | None = None) -> int:
    """The intra-op thread count of deterministic mode: ``FRAG_THREADS``, else :data:`DETERMINISTIC_THREADS`."""
    environ = os.environ if environ is None else environ
    text = str(environ.get("FRAG_THREADS", DETERMINISTIC_THREADS))
    if not text.isdigit() or int(text) < 1:
        raise NumericsError(f"FRAG_THREADS must be a whole number >= 1, got {text!r}.")
    return int(text)


def status() -> dict:
    """What this process computes with: torch's CPU capability, ``MKL_CBWR``, and whether that is
    deterministic mode (the capability is AVX2 and MKL is capped). Imports torch."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    mkl = os.environ.get("MKL_CBWR")
    threads = torch.get_num_threads()
    pinned = deterministic_threads() if deterministic_requested() else None
    deterministic = (capability == "AVX2" and (mkl or "").upper() == DETERMINISTIC_ENV["MKL_CBWR"]
                     and threads == pinned)
    return {"deterministic": deterministic,
            "aten_cpu_capability": capability, "mkl_cbwr": mkl, "threads": threads,
            "torch_imported_before_frag_utils": _EARLY_TORCH}


def check_autocast(bf16: bool, device: str) -> None:
    """Refuse bf16 autocast on the CPU in deterministic mode: its kernels depend on the CPU.

    Raises:
        NumericsError: ``bf16`` on a CPU device while deterministic mode is on.
    """
    if bf16 and str(device).startswith("cpu") and deterministic_requested():
        raise NumericsError(
            "bf16 autocast on the CPU runs on kernels chosen by the CPU's features (AMX, AVX512-BF16), so its "
            "results differ from machine to machine. Deterministic mode (the default) computes in fp32: set "
            "bf16 to false (weights='bf16' still stores the weights in bf16, as OpenUnlearning), or opt out "
            "with FRAG_DETERMINISTIC=0 for CPU-dependent numbers.")


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
    bf16 on a GPU and fp32 on the CPU (deterministic mode computes in fp32).

    Raises:
        NumericsError: an unknown name, or bf16 on the CPU in deterministic mode (its kernels
            depend on the CPU).
    """
    import torch

    if dtype not in DTYPES:
        raise NumericsError(f"dtype must be one of {DTYPES}, got {dtype!r}.")
    on_cpu = str(device).startswith("cpu")
    if dtype == "auto":
        dtype = "fp32" if on_cpu else "bf16"
    if dtype == "bf16" and on_cpu and deterministic_requested():
        raise NumericsError("dtype bf16 on the CPU computes with kernels chosen by the CPU's features, so its "
                            "results differ from machine to machine; deterministic mode (the default) uses fp32: "
                            "set dtype to auto or fp32, or opt out with FRAG_DETERMINISTIC=0.")
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


_EARLY_TORCH = "torch" in sys.modules  # torch was loaded before frag_utils: the variables came too late here
