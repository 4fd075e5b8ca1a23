"""frag_utils: FRAG, FRP and the TOFU-style evaluation they are tested on.

One module per idea: ``paths``, ``models``, ``data`` (+ ``synthetic``), ``prompts``, ``metrics``,
``train``, ``records``, ``runs``. Notebooks under ``notebooks/`` import these.
"""
from .progress import configure_quiet_logging as _configure

_configure()
__version__ = "0.1.0"
