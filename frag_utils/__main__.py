"""``python -m frag_utils ...``: the same commands as ``frag``."""
import sys

from .cli import main

sys.exit(main())
