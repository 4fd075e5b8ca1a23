"""TOFU-format data from three sources behind one function, :func:`load_split`.

* ``synthetic``: the embedded, seeded data set committed under ``data/synthetic`` (see
  :mod:`frag_utils.synthetic`).
* a local directory holding ``<config>.json`` files (a JSON list of records), what an offline
  cluster keeps of ``locuslab/TOFU``.
* a Hugging Face hub dataset id, e.g. ``locuslab/TOFU``, for users with network access.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from . import paths

SYNTHETIC = "synthetic"
_QA = ("question", "answer")
_PERTURBED = ("question", "answer", "paraphrased_answer", "perturbed_answer", "paraphrased_question")
_OPTIONS = ("question", "answer", "option1", "option2", "option3", "option4")
_GENERAL_PERTURBED = ("question", "answer", "perturbed_answer")

# Every config and the fields each of its records must have (TOFU's schema).
CONFIG_FIELDS: dict[str, tuple[str, ...]] = {
    "full": _QA,
    **{f"forget{p}": _QA for p in ("01", "05", "10")},
    **{f"retain{p}": _QA for p in ("90", "95", "99")},
    **{f"holdout{p}": _QA for p in ("01", "05", "10")},
    **{f"forget{p}_perturbed": _PERTURBED for p in ("01", "05", "10")},
    "retain_perturbed": _PERTURBED,
    "real_authors": _OPTIONS,
    "world_facts": _OPTIONS,
    "real_authors_perturbed": _GENERAL_PERTURBED,
    "world_facts_perturbed": _GENERAL_PERTURBED,
}


class DataError(ValueError):
    """A data source, config or record that cannot be used, with what is wrong."""


def matching_retain(forget_split: str) -> str:
    """The retain split that goes with a forget split (``forget10`` -> ``retain90``)."""
    m = re.fullmatch(r"forget(\d\d)", forget_split)
    if not m:
        raise DataError(f"'{forget_split}' is not a forget split; expected forget01, forget05 or forget10.")
    return f"retain{100 - int(m.group(1)):02d}"


def _check_config(config: str) -> None:
    if config not in CONFIG_FIELDS:
        raise DataError(f"Unknown config '{config}'. Known configs: {', '.join(CONFIG_FIELDS)}.")


def _read_json_file(file: Path, source: str, config: str) -> list[dict]:
    if not file.is_file():
        raise DataError(f"Config '{config}' is missing from '{source}': expected the file {file}.")
    try:
        records = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"{file} is not valid JSON ({err}).") from None
    if not isinstance(records, list):
        raise DataError(f"{file} must hold a JSON list of records, found {type(records).__name__}.")
    return records


def _load_hub(source: str, config: str) -> list[dict]:
    try:
        import datasets

        ds = datasets.load_dataset(source, config, split="train")
    except Exception as err:  # offline, unknown dataset, unknown config: all end here
        raise DataError(
            f"Could not load config '{config}' of '{source}' from the Hugging Face hub "
            f"({err.__class__.__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}). "
            f"Without network access use '{SYNTHETIC}' or a local directory of <config>.json files."
        ) from None
    return [dict(r) for r in ds]


def validate_records(records: list, config: str, where: str) -> list[dict]:
    """Check that ``records`` is a non-empty list of dicts with ``config``'s fields.

    Raises:
        DataError: naming the first record and field at fault.
    """
    if len(records) == 0:
        raise DataError(f"Config '{config}' from {where} is empty: a split needs at least one record.")
    fields = CONFIG_FIELDS[config]
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise DataError(f"Record {i} of '{config}' from {where} is not an object.")
        missing = [f for f in fields if f not in rec]
        if missing:
            raise DataError(f"Record {i} of '{config}' from {where} is missing field(s) {missing}; "
                            f"'{config}' records need {list(fields)}.")
        if "perturbed_answer" in fields and not (isinstance(rec["perturbed_answer"], list)
                                                 and rec["perturbed_answer"]):
            raise DataError(f"Record {i} of '{config}' from {where}: 'perturbed_answer' must be a "
                            "non-empty list of strings.")
    return records


def load_split(source: str, config: str, limit: int | None = None) -> list[dict]:
    """Load one TOFU config as a list of records.

    Args:
        source: ``synthetic``, a local directory of ``<config>.json`` files, or a hub dataset id.
        config: a TOFU config name, e.g. ``forget10``, ``retain90``, ``retain_perturbed``.
        limit: keep only the first ``limit`` records (None keeps all).
    Returns:
        The records, each with at least the config's fields.
    Raises:
        DataError: unknown config, missing file, a record missing a field, an empty split.
    """
    _check_config(config)
    if source == SYNTHETIC:
        records = _read_json_file(paths.SYNTHETIC_DIR / f"{config}.json", source, config)
    elif Path(source).expanduser().is_dir():
        records = _read_json_file(Path(source).expanduser() / f"{config}.json", source, config)
    elif source.startswith((".", "/", "~")):
        raise DataError(f"Data directory '{source}' does not exist.")
    else:
        records = _load_hub(source, config)
    records = validate_records(records, config, f"'{source}'")
    if limit is not None:
        if limit < 1:
            raise DataError(f"limit must be at least 1, got {limit}.")
        records = records[:limit]
    return records


def load_utility_sets(source: str, limit: int | None = None) -> dict[str, list[dict]]:
    """The three sets Model Utility is computed on, each cut to ``limit`` records."""
    return {name: load_split(source, name, limit)
            for name in ("retain_perturbed", "real_authors_perturbed", "world_facts_perturbed")}
