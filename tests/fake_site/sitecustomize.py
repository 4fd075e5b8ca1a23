"""Put on PYTHONPATH by the runner's tests: in every Python process they start (Snakemake and its
jobs), the parameter files are the test's (FRAG_FAKE_PARAMS) and papermill is the fake one
(tests/fake_papermill.py, its state file FRAG_FAKE_PAPERMILL). Nothing happens without them."""
import os
import sys
from pathlib import Path

if os.environ.get("FRAG_FAKE_PAPERMILL"):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import fake_papermill

    from frag_utils import paths

    paths.PARAMS_DIR = Path(os.environ["FRAG_FAKE_PARAMS"])
    fake_papermill.install(fake_papermill.State(Path(os.environ["FRAG_FAKE_PAPERMILL"])))
