"""TOFU-format data from three sources behind one function, :func:`load_split`.

* ``synthetic``: the embedded, seeded data set committed under ``data/synthetic`` (see
  :mod:`frag_utils.synthetic`).
* a local directory holding ``<config>.json`` files (a JSON list of records), what an offline
  cluster keeps of ``locuslab/TOFU``.
* a Hugging Face hub dataset id, e.g. ``locuslab/TOFU``, for users with network access.
"""
from __future__ import annotations

import json
import random
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
    # 4-option versions of the forget and retain questions (not in TOFU; see mc_from_perturbed)
    **{f"forget{p}_mc": _OPTIONS for p in ("01", "05", "10")},
    "retain_mc": _OPTIONS,
}
MC_SEED = 7  # orders the options of the derived multiple-choice items


class DataError(ValueError):
    """A data source, config or record that cannot be used, with what is wrong."""


def matching_retain(forget_split: str) -> str:
    """The retain split that goes with a forget split (``forget10`` -> ``retain90``)."""
    m = re.fullmatch(r"forget(\d\d)", forget_split)
    if not m:
        raise DataError(f"'{forget_split}' is not a forget split; expected forget01, forget05 or forget10.")
    return f"retain{100 - int(m.group(1)):02d}"


def mc_from_perturbed(records: list[dict], seed: int = MC_SEED) -> list[dict]:
    """4-option items from TOFU ``_perturbed`` records, in the ``real_authors`` format.

    The correct option is the paraphrased answer; the three distractors are the first three
    perturbed answers, which are the paraphrase with its facts replaced by wrong ones of the same
    kind. The order of the options is drawn from ``seed``.

    Raises:
        DataError: a record with fewer than three perturbed answers, or a distractor equal to
            the answer.
    """
    rng = random.Random(seed)
    out = []
    for i, r in enumerate(records):
        wrong = list(r["perturbed_answer"][:3])
        if len(wrong) < 3 or r["paraphrased_answer"] in wrong or len(set(wrong)) < 3:
            raise DataError(f"Record {i} cannot make a 4-option item: it needs three distinct perturbed "
                            "answers, none equal to the paraphrased answer.")
        options = [r["paraphrased_answer"], *wrong]
        rng.shuffle(options)
        out.append({"question": r["question"], "answer": r["paraphrased_answer"],
                    **{f"option{k + 1}": o for k, o in enumerate(options)}})
    return out


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


def load_refusals(path: str | Path | None = None) -> list[str]:
    """The "I don't know" answers IdkDPO prefers over a forget answer: one per non-empty line.

    Args:
        path: a text file (default :data:`frag_utils.paths.REFUSALS_FILE`, the committed set).
    Raises:
        DataError: the file is missing or holds fewer than two answers.
    """
    file = Path(path).expanduser() if path else paths.REFUSALS_FILE
    if not file.is_file():
        raise DataError(f"Refusal file '{file}' does not exist: IdkDPO needs one answer per line "
                        f"(the committed set is {paths.REFUSALS_FILE}).")
    answers = [line.strip() for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
    if len(answers) < 2:
        raise DataError(f"Refusal file '{file}' holds {len(answers)} answer(s); IdkDPO draws from at least two.")
    return answers


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
    local = paths.SYNTHETIC_DIR if source == SYNTHETIC else Path(source).expanduser()
    if config.endswith("_mc") and not (local / f"{config}.json").is_file():
        # not a TOFU config: derived from the perturbed one wherever a source does not hold it
        base = "retain_perturbed" if config == "retain_mc" else config.replace("_mc", "_perturbed")
        records = mc_from_perturbed(load_split(source, base))
    elif source == SYNTHETIC:
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


# MUSE (Shi et al., 2024): subsets of muse-bench/MUSE-News (and MUSE-Books), their splits and fields.
MUSE_NEWS = "muse-bench/MUSE-News"
MUSE_SUBSETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "raw": (("forget", "retain1", "retain2", "holdout"), ("text",)),
    "knowmem": (("forget_qa", "retain_qa", "forget_qa_icl", "retain_qa_icl"), ("question", "answer")),
    "verbmem": (("forget",), ("prompt", "gt")),
    "privleak": (("forget", "retain", "holdout"), ("text",)),
}


def load_muse(source: str = MUSE_NEWS, subset: str = "knowmem", split: str = "retain_qa",
              limit: int | None = None) -> list[dict]:
    """Load one split of a MUSE subset as a list of records.

    Args:
        source: a hub dataset id (``muse-bench/MUSE-News``) or a local directory holding
            ``<subset>/<split>.json`` files (JSON lists in the hub's format).
        subset: ``raw`` | ``knowmem`` | ``verbmem`` | ``privleak``.
        split: a split of that subset, e.g. ``forget_qa``/``retain_qa`` for ``knowmem``.
        limit: keep only the first ``limit`` records.
    Raises:
        DataError: unknown subset or split, missing file, a record missing a field, no network.
    """
    if subset not in MUSE_SUBSETS:
        raise DataError(f"Unknown MUSE subset '{subset}'. Known subsets: {', '.join(MUSE_SUBSETS)}.")
    splits, fields = MUSE_SUBSETS[subset]
    if split not in splits:
        raise DataError(f"MUSE subset '{subset}' has no split '{split}'; its splits are {', '.join(splits)}.")
    where = f"MUSE '{source}' {subset}/{split}"
    local = Path(source).expanduser()
    if local.is_dir():
        records = _read_json_file(local / subset / f"{split}.json", source, f"{subset}/{split}")
    elif source.startswith((".", "/", "~")):
        raise DataError(f"Data directory '{source}' does not exist.")
    else:
        try:
            import datasets

            records = [dict(r) for r in datasets.load_dataset(source, subset, split=split)]
        except Exception as err:
            raise DataError(f"Could not load {where} from the Hugging Face hub ({err.__class__.__name__}). "
                            "Without network access, pass a local directory of <subset>/<split>.json files.") from None
    if not records:
        raise DataError(f"{where} is empty.")
    for i, rec in enumerate(records):
        missing = [f for f in fields if not isinstance(rec, dict) or f not in rec]
        if missing:
            raise DataError(f"Record {i} of {where} is missing field(s) {missing}; "
                            f"{subset} records need {list(fields)}.")
    if limit is not None:
        if limit < 1:
            raise DataError(f"limit must be at least 1, got {limit}.")
        records = records[:limit]
    return records
