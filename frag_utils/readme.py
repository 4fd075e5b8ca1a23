"""Fill the README's result blocks from committed run records (never retype a number).

A block is ``<!-- BEGIN name -->`` ... ``<!-- END name -->``; ``BLOCKS`` maps each name to the
Markdown file (relative to the repository) whose content replaces the block.
Run ``python -m frag_utils.readme`` after ``make reproduce``.
"""
from __future__ import annotations

import re

from . import paths

BLOCKS = {
    "smol-models": "papermill_runs/02_target_and_gold/smol/models.md",
    "smol-models-remade": "papermill_runs/02_target_and_gold/smol.remade_2026-11-25/models.md",
    "smol-utility": "papermill_runs/02_target_and_gold/smol/utility_components.md",
    "smol-frag": "papermill_runs/04_frag/smol/scores.md",
    "smol-methods": "figures/smol/methods.md",
    "smol-sweep": "figures/smol/sweep.md",
    "smol-attacks": "figures/smol/attacks.md",
    "smol-attack-effectiveness": "figures/smol/attack_effectiveness.md",
    "smol-predictors": "figures/smol/predictors.md",
    "smol-multiple-choice": "figures/smol/multiple_choice.md",
    "smol-forgetting-strength": "figures/smol/forgetting_strength.md",
    "smol-matched-utility": "figures/smol/matched_utility.md",
    "smol-matched-sparsity": "figures/smol/matched_sparsity.md",
    "smol-matched-update-norm": "figures/smol/matched_update_norm.md",
    "smol-ablation": "figures/smol/ablation_importance.md",
    "smol-frp-ablation": "figures/smol/frp_ablation.md",
    **{f"smol-variant-{v}": f"figures/smol/variant_{v}_delta_es.md"
       for v in ("lr", "optimizer", "data", "lora", "horizon")},
    "smol-seeds": "figures/smol_seeds/variant_seeds_delta_es.md",
    "bench": "bench/results/summary.md",
}


def fill(text: str) -> str:
    """``text`` with every known block replaced by its source file's current content."""
    for name, rel in BLOCKS.items():
        source = paths.REPO_ROOT / rel
        body = source.read_text().strip() if source.is_file() else f"*(not yet run: {rel} is missing)*"
        pattern = re.compile(rf"(<!-- BEGIN {name} -->\n)(?:.*?\n)?(<!-- END {name} -->)", re.S)
        text = pattern.sub(lambda m: f"{m.group(1)}{body}\n\n*Source: `{rel}`*\n{m.group(2)}", text)
    return text


def main() -> None:
    readme = paths.REPO_ROOT / "README.md"
    readme.write_text(fill(readme.read_text()))


if __name__ == "__main__":
    main()
