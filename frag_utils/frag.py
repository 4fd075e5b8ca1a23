"""FRAG, the Forget-Retain Alignment Gap (the paper's Eq. 5), and the global L2 predictor.

For each scored Linear layer with original weight ``W0 [d_out, d_in]``, unlearned weight ``Wu``
and calibration norms ``x^f, x^r [d_in]``::

    F = |W0| * x^f / (x^r + eps)        forget importance
    R = |W0| * x^r / (x^f + eps)        retain importance
    D = (Wu - W0)^2                     where the update went

    A_f = cos(F, D),  A_r = cos(R, D),  FRAG = A_f - gamma * A_r

with one global cosine over all scored layers: the three inner products and squared norms are
accumulated layer by layer (never per-layer cosines averaged). ``Wu`` is read tensor by tensor
from its safetensors files and never built as a model; sums are accumulated in float64
whatever the checkpoint dtype (differences are taken in float64 too), so peak memory stays near
one model plus one tensor.

The paper's printed Table 3 follows ``A_f`` alone (``gamma = 0``), not Eq. 5; both are reported.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from .checkpoint_files import SafetensorsCheckpoint, UnreadableCheckpoint

EPS = 1e-6


class FragError(ValueError):
    """Inputs FRAG cannot score, with what is wrong: no number is returned for them."""


@dataclass
class FragResult:
    """FRAG, its two cosines, the L2 distances, and each layer's share of the inner products."""

    frag: float
    a_f: float
    a_r: float
    gamma: float
    l2_all: float  # over every shared state-dict tensor (embeddings and norms included)
    l2_scored: float  # over the scored modules only
    per_layer: list[dict] = field(default_factory=list)
    per_type: dict[str, dict] = field(default_factory=dict)
    n_scored_params: int = 0
    n_moved: int = 0  # scored weights whose value changed at all (bf16 storage drops updates below half an ulp)

    def with_gamma(self, gamma: float) -> float:
        """FRAG at another gamma (``gamma = 0`` gives the printed Table 3 values, ``A_f``)."""
        return self.a_f - gamma * self.a_r

    def summary(self) -> dict:
        return {"frag": self.frag, "a_f": self.a_f, "a_r": self.a_r, "gamma": self.gamma,
                "frag_gamma0": self.with_gamma(0.0), "frag_x100": 100 * self.frag, "a_f_x100": 100 * self.a_f,
                "a_r_x100": 100 * self.a_r, "l2_all": self.l2_all, "l2_scored": self.l2_scored,
                "n_scored_params": self.n_scored_params, "n_moved": self.n_moved,
                "moved_fraction": self.n_moved / self.n_scored_params if self.n_scored_params else 0.0}


def _check_finite(t: torch.Tensor, what: str) -> None:
    if not torch.isfinite(t).all():
        raise FragError(f"{what} contains NaN or inf values; FRAG is not defined for it.")


def importance(w0: torch.Tensor, xf: torch.Tensor, xr: torch.Tensor,
               eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """Forget and retain importance of one layer.

    Args:
        w0: original weight [d_out, d_in].
        xf, xr: activation norms on forget and retain text [d_in].
    Returns:
        ``(F, R)``, each [d_out, d_in].
    """
    a = w0.abs() if w0.is_floating_point() else w0.abs().float()
    return a * (xf / (xr + eps))[None, :], a * (xr / (xf + eps))[None, :]


IMPORTANCE_KINDS = ("activation", "fisher", "ig", "obd", "influence")
INFLUENCE_DAMPING = 0.01  # the influence surrogate's damping, relative to the layer's mean Fisher diagonal


def gradient_importance(kind: str, w0: torch.Tensor, forget: dict, retain: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Forget and retain importance of one layer from gradient statistics (the FRAG ablation's
    swaps, appendix C.5), ``forget``/``retain`` being :func:`calibration.gradient_stats` entries:

    * ``fisher``: ``g^2`` (empirical Fisher diagonal);
    * ``ig``: ``|W * g_path|``, integrated gradients with the path-averaged gradient;
    * ``obd``: ``H_jj W^2`` with the Fisher diagonal standing in for the Hessian's (Optimal Brain
      Damage's saliency);
    * ``influence``: each weight's share of a split's self-influence under a diagonal Hessian,
      ``g_mean^2 / (H_jj + lambda)``: an influence function estimates the change of a set's loss
      when the set is removed as ``g^T H^-1 g``, which with a diagonal ``H`` is a sum over weights.
      ``H_jj`` is the Fisher diagonal pooled over forget and retain text (the model's training
      distribution), ``lambda = INFLUENCE_DAMPING`` times its mean over the layer. The paper names
      an influence surrogate without defining it; this is our choice.
    """
    w = w0.double()
    if kind == "fisher":
        return forget["g2"], retain["g2"]
    if kind == "ig":
        if "ig" not in forget or "ig" not in retain:
            raise FragError("Integrated-gradient importance needs gradient statistics made with ig_steps > 0.")
        return (w * forget["ig"]).abs(), (w * retain["ig"]).abs()
    if kind == "obd":
        return forget["g2"] * w.pow(2), retain["g2"] * w.pow(2)
    if kind == "influence":
        h = (forget["g2"] + retain["g2"]) / 2
        h = h + INFLUENCE_DAMPING * h.mean()
        if not float(h.min()) > 0:
            raise FragError("The influence importance needs a nonzero Fisher diagonal; "
                            "the gradient statistics are all zero.")
        return forget["g"].pow(2) / h, retain["g"].pow(2) / h
    raise FragError(f"Unknown importance {kind!r}; choose one of {IMPORTANCE_KINDS}.")


def _module_type(name: str) -> str:
    return name.rsplit(".", 1)[-1]


BLOCK = 1 << 20  # entries per block of rows: the float64 temporaries of one block are a few MB


def _shape(source: SafetensorsCheckpoint | dict[str, torch.Tensor], key: str) -> tuple[int, ...]:
    return source.shape(key) if isinstance(source, SafetensorsCheckpoint) else tuple(source[key].shape)


def _row_blocks(original, unlearned, key: str, shape: tuple[int, ...]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``(original rows, unlearned rows)`` of one tensor, block by block: a checkpoint on disk is
    read a block at a time, so memory stays at a few blocks whatever the tensor's size."""
    if not shape:  # a scalar
        yield tuple(src[key].reshape(1).cpu() for src in (original, unlearned))
        return
    step = max(1, BLOCK // max(1, math.prod(shape[1:])))
    for start in range(0, shape[0], step):
        yield tuple(src.rows(key, start, start + step) if isinstance(src, SafetensorsCheckpoint)
                    else src[key][start:start + step].cpu() for src in (original, unlearned))


def _raise_for_nonfinite(original, unlearned, key: str, shape: tuple[int, ...], overflow: str) -> None:
    """After sums over ``key`` came out NaN or inf: name the checkpoint holding a NaN/inf weight,
    or, if both are finite, raise ``overflow``."""
    for w0, wu in _row_blocks(original, unlearned, key, shape):
        _check_finite(w0, f"The original '{key}'")
        _check_finite(wu, f"The unlearned '{key}'")
    raise FragError(overflow)


def _activation_sums(layer: dict, original, unlearned, key: str, shape: tuple[int, ...], xf: torch.Tensor,
                     xr: torch.Tensor, eps: float) -> None:
    """Add one layer's inner products to ``layer``, block of rows by block of rows, without
    forming F and R: with ``F_ij = |W_ij| c_j`` (``c = x_f / (x_r + eps)``, the same for R),
    ``<F, D> = sum_j c_j sum_i |W_ij| D_ij`` and ``<F, F> = sum_j c_j^2 sum_i W_ij^2``."""
    name = key[: -len(".weight")]
    if xf.numel() != shape[1] or xr.numel() != shape[1]:
        raise FragError(f"Calibration norms of '{name}' do not match its input width {shape[1]}.")
    _check_finite(xf, f"The forget calibration norm of '{name}'")
    _check_finite(xr, f"The retain calibration norm of '{name}'")
    xf, xr = xf.double().cpu(), xr.double().cpu()
    cf, cr = xf / (xr + eps), xr / (xf + eps)
    for w0, wu in _row_blocks(original, unlearned, key, shape):
        w = w0.double()
        # the original is rounded to the checkpoint's dtype first (a bf16 checkpoint of an fp32
        # model would otherwise show rounding noise on every weight as an update)
        d = wu.double().sub_(w if w0.dtype == wu.dtype else w0.to(wu.dtype).double())
        d.mul_(d)  # D, in place: a block holds three float64 copies at most
        w2 = (w * w).sum(dim=0)
        abs_d = w.abs_().mul_(d).sum(dim=0)
        flat = d.reshape(-1)
        for k, v in (("fd", abs_d @ cf), ("rd", abs_d @ cr), ("ff", w2 @ cf.pow(2)), ("rr", w2 @ cr.pow(2)),
                     ("dd", flat @ flat), ("sq_diff", flat.sum()), ("moved", flat.count_nonzero())):
            layer[k] += float(v)
    if not all(math.isfinite(layer[k]) for k in ("fd", "rd", "ff", "rr", "dd", "sq_diff")):
        _raise_for_nonfinite(original, unlearned, key, shape,
                             f"The inner products of '{name}' overflow float64: the weights are too large to score.")


def compute_frag(original: dict[str, torch.Tensor], unlearned: SafetensorsCheckpoint | dict[str, torch.Tensor],
                 xf: dict[str, Any], xr: dict[str, Any], gamma: float = 1.0,
                 eps: float = EPS, importance_kind: str = "activation") -> FragResult:
    """FRAG of an update, streaming over layers.

    Args:
        original: the original model's state dict (``name.weight`` -> tensor).
        unlearned: the unlearned weights, as a lazy checkpoint or a state dict.
        xf, xr: calibration norms by module name (the scored modules).
        gamma: weight of the retain cosine (1 in Eq. 5; 0 reproduces the printed Table 3).
        importance_kind: ``activation`` (the paper's F and R, from norms ``[d_in]``), or one of
            the ablation's gradient importances (``fisher``, ``ig``, ``obd``, ``influence``), with ``xf``/``xr``
            the forget/retain :func:`calibration.gradient_stats` by module.
    Raises:
        FragError: shapes or architectures differ, a module is missing, NaN/inf weights, an empty
            calibration, or identical checkpoints (D = 0, FRAG undefined).
    """
    if not xf or set(xf) != set(xr):
        raise FragError("Forget and retain calibration must cover the same, non-empty set of modules.")
    get = unlearned.get if isinstance(unlearned, SafetensorsCheckpoint) else unlearned.__getitem__
    keys = set(unlearned.keys())
    fd = rd = ff = rr = dd = 0.0
    per_layer = []
    n_params = 0
    for name in sorted(xf):
        key = f"{name}.weight"
        if key not in original:
            raise FragError(f"Module '{name}' is not in the original model.")
        if key not in keys:
            raise FragError(f"Module '{name}' is missing from the unlearned checkpoint: the two checkpoints "
                            "do not share an architecture.")
        shape = _shape(original, key)
        if shape != _shape(unlearned, key):
            raise FragError(f"'{key}' has shape {shape} in the original and {_shape(unlearned, key)} in "
                            "the unlearned checkpoint: different architectures cannot be compared.")
        layer = {"module": name, "type": _module_type(name), "fd": 0.0, "rd": 0.0, "ff": 0.0, "rr": 0.0, "dd": 0.0,
                 "sq_diff": 0.0, "moved": 0}
        if importance_kind == "activation":
            _activation_sums(layer, original, unlearned, key, shape, xf[name], xr[name], eps)
        else:  # gradient statistics are whole tensors in memory already
            w0, wu = original[key].cpu(), get(key)
            _check_finite(w0, f"The original '{key}'")
            _check_finite(wu, f"The unlearned '{key}'")
            f, r = gradient_importance(importance_kind, w0, xf[name], xr[name])
            if f.shape != w0.shape or r.shape != w0.shape:
                raise FragError(f"Gradient statistics of '{name}' do not match its weight {tuple(w0.shape)}.")
            _check_finite(f, f"The forget importance of '{name}'")
            _check_finite(r, f"The retain importance of '{name}'")
            # the original is rounded to the checkpoint's dtype first (a bf16 checkpoint of an fp32
            # model would otherwise show rounding noise on every weight as an update)
            d = (wu.double() - w0.to(wu.dtype).double()).pow(2)
            for k, v in (("fd", f * d), ("rd", r * d), ("ff", f.pow(2)), ("rr", r.pow(2)), ("dd", d.pow(2)),
                         ("sq_diff", d)):
                layer[k] += float(v.sum(dtype=torch.float64))
            layer["moved"] += int(d.count_nonzero())
        fd, rd, ff, rr, dd = fd + layer["fd"], rd + layer["rd"], ff + layer["ff"], rr + layer["rr"], dd + layer["dd"]
        n_params += math.prod(shape)
        per_layer.append(layer)
    if dd == 0.0:
        raise FragError("The unlearned weights equal the original ones on every scored module (D = 0): "
                        "FRAG is undefined for identical checkpoints.")
    if ff == 0.0 or rr == 0.0:
        raise FragError("Forget or retain importance is zero everywhere: check the calibration norms.")
    nf, nr = math.sqrt(ff * dd), math.sqrt(rr * dd)
    a_f, a_r = fd / nf, rd / nr
    if not (math.isfinite(a_f) and math.isfinite(a_r)):
        raise FragError(f"The cosines are not finite (A_f={a_f}, A_r={a_r}): check weights and calibration.")
    per_type: dict[str, dict] = defaultdict(lambda: {"a_f_share": 0.0, "a_r_share": 0.0, "sq_diff": 0.0})
    for layer in per_layer:
        layer["a_f_share"], layer["a_r_share"] = layer["fd"] / nf, layer["rd"] / nr  # sums to A_f, A_r
        t = per_type[layer["type"]]
        t["a_f_share"] += layer["a_f_share"]
        t["a_r_share"] += layer["a_r_share"]
        t["sq_diff"] += layer["sq_diff"]
    scored_sq = sum(layer["sq_diff"] for layer in per_layer)
    # the scored tensors' squared differences are summed above: each tensor is read once
    rest_sq = global_l2(original, unlearned, skip={f"{layer['module']}.weight" for layer in per_layer}) ** 2
    return FragResult(frag=a_f - gamma * a_r, a_f=a_f, a_r=a_r, gamma=gamma, l2_all=math.sqrt(scored_sq + rest_sq),
                      l2_scored=math.sqrt(scored_sq), per_layer=per_layer, per_type=dict(per_type),
                      n_scored_params=n_params, n_moved=int(sum(layer["moved"] for layer in per_layer)))


def global_l2(original: dict[str, torch.Tensor], unlearned: SafetensorsCheckpoint | dict[str, torch.Tensor],
              skip: set[str] | frozenset[str] = frozenset()) -> float:
    """sqrt of the summed squared difference over every tensor both hold (embeddings, norms included),
    leaving out the names in ``skip``.

    A tied output head stored once counts once.
    """
    shared = sorted(set(original) & set(unlearned.keys()))
    if not shared:
        raise FragError("The two checkpoints share no tensor names: different architectures.")
    total = 0.0
    for key in sorted(set(shared) - set(skip)):
        shape = _shape(original, key)
        if shape != _shape(unlearned, key):
            raise FragError(f"'{key}' has shape {shape} in the original and {_shape(unlearned, key)} in the "
                            "unlearned checkpoint: different architectures cannot be compared.")
        part = sum(float((b.double() - a.to(b.dtype).double()).pow(2).sum())
                   for a, b in _row_blocks(original, unlearned, key, shape))
        if not math.isfinite(part):  # NaN or inf in either: say which
            _raise_for_nonfinite(original, unlearned, key, shape,
                                 f"The squared difference of '{key}' overflows float64.")
        total += part
    return math.sqrt(total)


def state_dict_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict, detached, each tied tensor once (under its first name), as
    ``save_pretrained`` stores it: a tied output head is not counted twice in the L2."""
    out, seen = {}, set()
    for k, v in model.state_dict().items():
        if v.data_ptr() in seen:
            continue
        seen.add(v.data_ptr())
        out[k] = v.detach()
    return out


def checkpoint_folder(name_or_path: str) -> Path:
    """The safetensors directory of a checkpoint: a local directory, an embedded name, or a hub id."""
    from . import models

    if name_or_path == models.SMOLLM2:
        return models._smollm2_cache()
    if name_or_path == models.TINY:
        raise FragError("'tiny' is built in memory and has no files: save it with models.save_checkpoint first.")
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        return folder
    if name_or_path.startswith((".", "/", "~")):
        raise FragError(f"Checkpoint directory '{name_or_path}' does not exist.")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name_or_path, allow_patterns=["*.safetensors", "*.json"]))
    except Exception as err:  # offline, gated or unknown repository
        raise FragError(f"Could not fetch '{name_or_path}' from the Hugging Face hub ({err.__class__.__name__}). "
                        "Without network access pass a local checkpoint directory.") from None


def _streamable(original: str, scope: str) -> SafetensorsCheckpoint | None:
    """The original as a lazy checkpoint, when it is one on disk with the usual projection names."""
    try:
        ckpt = SafetensorsCheckpoint(checkpoint_folder(original))
    except (FragError, UnreadableCheckpoint):  # 'tiny' (built in memory), an unreachable hub id, a folder
        # without safetensors files: load the model instead (whose loader says what is wrong)
        return None
    return ckpt if _projection_modules(ckpt, scope) else None


def _projection_modules(ckpt: SafetensorsCheckpoint, scope: str) -> list[str]:
    """Module names :func:`calibration.select_modules` would choose, read from the tensor names."""
    from .calibration import PROJECTIONS

    return sorted(k[: -len(".weight")] for k in ckpt.keys()
                  if k.endswith(".weight") and k[: -len(".weight")].rsplit(".", 1)[-1] in PROJECTIONS[scope])


def score_pair(original: str, unlearned: str, data_source: str = "synthetic", forget_split: str = "forget10",
               retain_split: str | None = None, gamma: float = 1.0, scope: str = "all",
               calib: Any = None, device: str = "cpu", dtype: Any = None) -> dict:
    """FRAG, A_f, A_r and both L2 distances of ``unlearned`` against ``original``, with timings.

    The original runs for calibration on ``device`` in ``dtype`` (default fp32; bf16 on a GPU as
    the authors run it); the comparison of weights is always in fp32.

    Calibration runs the original model on forget and retain text; the unlearned checkpoint is
    only streamed from disk. When both calibrations are cached and the original is a checkpoint
    on disk, the original is streamed too (``timings["original_streamed"]``).
    """
    import time

    import torch

    from . import calibration, data, models

    dtype = dtype or torch.float32
    timings = {}
    calib = calib or calibration.CalibConfig()
    retain_split = retain_split or data.matching_retain(forget_split)
    splits = {"forget": forget_split, "retain": retain_split}
    records = {role: data.load_split(data_source, split) for role, split in splits.items()}
    t = time.perf_counter()
    ckpt = SafetensorsCheckpoint(checkpoint_folder(unlearned))
    # With both calibrations cached (and the original on disk), the original is streamed tensor by
    # tensor like the unlearned one and no model is built: only one tensor of each is in memory.
    on_disk = _streamable(original, scope)
    streamed, norms = on_disk, {}
    if streamed is not None:
        names = _projection_modules(streamed, scope)
        for role, split in splits.items():
            norms[role] = calibration.cached_norms(original, data_source, split, records[role], names, calib, dtype)
        if any(v is None for v in norms.values()):
            streamed, norms = None, {}
    model = None
    if streamed is None:
        model, tokenizer = models.load_model(original, device=device, dtype=dtype)
    cfg_a, cfg_b = (streamed.config() or {}) if model is None else model.config.to_dict(), ckpt.config() or {}
    for key in ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size"):
        if key in cfg_a and key in cfg_b and cfg_a[key] != cfg_b[key]:
            raise FragError(f"The checkpoints differ in architecture: {key} is {cfg_a[key]} in the original "
                            f"and {cfg_b[key]} in the unlearned one.")
    timings["load_seconds"] = time.perf_counter() - t
    t = time.perf_counter()
    if model is not None:
        modules = calibration.select_modules(model, scope)
        for role, split in splits.items():
            norms[role], cached = calibration.calibrate(model, tokenizer, original, data_source, split, records[role],
                                                        modules, calib)
            timings[f"calibration_{role}_cached"] = cached
    else:
        timings.update(calibration_forget_cached=True, calibration_retain_cached=True)
    timings["calibration_seconds"] = time.perf_counter() - t
    timings["original_streamed"] = model is None
    t = time.perf_counter()
    if model is None:
        weights0 = streamed
    elif dtype != torch.float32:  # the original in fp32, not the copy calibration ran in: the stored weights, else
        # the original built again ('tiny') or loaded again (a hub id) on the CPU
        weights0 = on_disk if on_disk is not None else state_dict_of(models.load_model(original)[0])
    else:
        weights0 = state_dict_of(model)
    result = compute_frag(weights0, ckpt, norms["forget"], norms["retain"], gamma)
    timings["comparison_seconds"] = time.perf_counter() - t
    return {"original": original, "unlearned": unlearned, **result.summary(), "per_type": result.per_type,
            "per_layer": [{k: v for k, v in row.items() if k in ("module", "a_f_share", "a_r_share", "sq_diff")}
                          for row in result.per_layer],
            "calibration": {"data": data_source, "forget_split": forget_split, "retain_split": retain_split,
                            "scope": scope, **calib.as_dict()},
            "timings": timings}
