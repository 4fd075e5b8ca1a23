"""frag_utils: FRAG, FRP and the TOFU-style evaluation they are tested on.

One module per idea: ``paths``, ``models``, ``data`` (+ ``synthetic``), ``prompts``, ``metrics``,
``train``, ``records``, ``runs``. Notebooks under ``notebooks/`` import these.
"""
from .numerics import set_deterministic_env as _deterministic

_deterministic()  # before anything here imports torch (README, "Reproducibility")
from .progress import configure_quiet_logging as _configure  # noqa: E402

_configure()
__version__ = "0.1.0"
