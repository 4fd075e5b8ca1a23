"""Progress bars and library chatter: on for a person at a terminal, off in recorded runs.

Set ``FRAG_PROGRESS=0`` (the runner and the tests do) to keep executed notebooks free of
progress bars and library warnings.
"""
from __future__ import annotations

import contextlib
import logging
import os
import warnings
from typing import Iterable, Iterator, TypeVar

from tqdm.auto import tqdm as _tqdm

T = TypeVar("T")


def progress_enabled() -> bool:
    """False when ``FRAG_PROGRESS=0``."""
    return os.environ.get("FRAG_PROGRESS", "1") != "0"


def progress(iterable: Iterable[T], **kwargs) -> Iterable[T]:
    """``tqdm`` over ``iterable``, disabled in recorded runs."""
    return _tqdm(iterable, disable=not progress_enabled(), **kwargs)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' progress bars and warnings inside the block when not interactive."""
    if progress_enabled():
        yield
        return
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


def configure_quiet_logging() -> None:
    """Called on import: in recorded runs, keep library warnings out of notebook outputs."""
    if progress_enabled():
        return
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    logging.getLogger("absl").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
