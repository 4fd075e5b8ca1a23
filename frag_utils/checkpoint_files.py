"""A saved checkpoint's safetensors files, read tensor by tensor and never built as a model.

Below every module that reads checkpoints (``models``, ``frag``, ``cache``): it imports none of
them.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch


class UnreadableCheckpoint(ValueError):
    """A checkpoint folder or file that cannot be read, naming it and saying what to do."""


def unreadable_checkpoint_message(file: Path, err: BaseException) -> str:
    """What to say about a safetensors file that cannot be read: which file, why, what to do."""
    return (f"Cannot read the checkpoint file {file} ({type(err).__name__}: {' '.join(str(err).split())}): it is "
            f"truncated or corrupt (e.g. written by a run that was killed, or copied in part). Delete the folder "
            f"{file.parent} and make it again: a run's checkpoint in the cache is remade by "
            f"'make reproduce SELECT=<notebook>/<run>' of any recorded run that reads it (the runner remakes a "
            f"checkpoint missing from the cache), a checkpoint of 'frag prune --out' by pruning again, and the "
            f"embedded model's cached copy on its next load.")


class SafetensorsCheckpoint:
    """Lazy, tensor-by-tensor access to a checkpoint directory's safetensors files (sharded or not).

    A file that cannot be read (truncated, corrupt, missing from its index) raises
    :class:`UnreadableCheckpoint` naming it, where it is opened.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        index = self.folder / "model.safetensors.index.json"
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            self.file_of = {k: self.folder / f for k, f in weight_map.items()}
        else:
            files = sorted(self.folder.glob("*.safetensors"))
            if not files:
                raise UnreadableCheckpoint(f"{self.folder} holds no .safetensors files: save checkpoints with "
                                "save_pretrained(safe_serialization=True) or frag_utils.models.save_checkpoint.")
            self.file_of = {}
            for f in files:
                with _open(f) as h:
                    self.file_of.update({k: f for k in h.keys()})
        self._shapes: dict[str, tuple[int, ...]] = {}  # filled a file at a time by shape()

    def keys(self) -> list[str]:
        return list(self.file_of)

    def __iter__(self) -> Iterator[str]:
        return iter(self.file_of)

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self.file_of

    def get(self, key: str) -> torch.Tensor:
        """One tensor, read into memory of its own. The file is opened for this read only: an
        open handle keeps every page it has read mapped (and counted in the resident memory),
        which over a whole checkpoint adds its full size."""
        with _open(self.file_of[key]) as h:
            return h.get_tensor(key)

    def rows(self, key: str, start: int, stop: int) -> torch.Tensor:
        """Rows ``start:stop`` of a tensor (its first dimension), reading only those bytes."""
        with _open(self.file_of[key]) as h:
            return h.get_slice(key)[start:stop]

    def shape(self, key: str) -> tuple[int, ...]:
        """A tensor's shape, from its file's header (read once per file; no tensor is read)."""
        if key not in self._shapes:
            file = self.file_of[key]
            with _open(file) as h:
                self._shapes.update({k: tuple(h.get_slice(k).get_shape())
                                     for k, f in self.file_of.items() if f == file})
        return self._shapes[key]

    def size_bytes(self) -> int:
        return sum(f.stat().st_size for f in set(self.file_of.values()))

    def config(self) -> dict | None:
        file = self.folder / "config.json"
        return json.loads(file.read_text()) if file.is_file() else None


@contextmanager
def _open(file: Path) -> Iterator[Any]:
    """``safetensors.safe_open`` of one file, its errors (which name no file) raised as
    :class:`UnreadableCheckpoint`, naming it."""
    from safetensors import SafetensorError, safe_open

    try:
        handle = safe_open(str(file), framework="pt")
    except (SafetensorError, OSError) as err:
        raise UnreadableCheckpoint(unreadable_checkpoint_message(Path(file), err)) from None
    with handle as h:
        yield h
