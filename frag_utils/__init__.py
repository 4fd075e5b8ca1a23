"""frag_utils: FRAG, FRP and the TOFU-style evaluation they are tested on.

One module per idea: ``paths``, ``models``, ``data`` (+ ``synthetic``), ``prompts``, ``metrics``,
``train``, ``records``, ``cache``, ``runs``. Notebooks under ``notebooks/`` import these.
"""
from .numerics import pin_threads as _pin_threads

_pin_threads()  # one thread count, so that one machine reproduces its own runs (README, "Reproducibility")
from .progress import configure_quiet_logging as _configure  # noqa: E402

_configure()
__version__ = "0.1.0"
