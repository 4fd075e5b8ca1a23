import json

import pytest

from frag_utils import costs


class _Spec:
    def __init__(self, folder, notebook, seconds):
        self.notebook = type("N", (), {"stem": notebook})()
        self.executed = folder / f"{notebook}-{seconds}.ipynb"
        if seconds is not None:
            self.executed.write_text(json.dumps({"metadata": {"papermill": {"duration": seconds}}}))

    def is_complete(self):
        return self.executed.is_file()


def test_notebook_times_sum_the_recorded_durations(tmp_path):
    specs = [_Spec(tmp_path, "05_unlearn", 600), _Spec(tmp_path, "05_unlearn", 1200),
             _Spec(tmp_path, "06_attacks", 240), _Spec(tmp_path, "06_attacks", None)]  # the last not recorded: left out
    t = costs.notebook_times(specs).set_index("notebook")
    assert t.loc["05_unlearn", "runs"] == 2 and t.loc["05_unlearn", "hours"] == pytest.approx(0.5)
    assert t.loc["05_unlearn", "median_minutes"] == pytest.approx(15)
    assert t.loc["all", "runs"] == 3 and t.loc["all", "hours"] == pytest.approx(2040 / 3600)
