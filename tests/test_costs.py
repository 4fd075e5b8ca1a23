import json
import math

import pytest

from frag_utils import costs


class _Spec:
    def __init__(self, folder, notebook, seconds, **params):
        self.notebook = type("N", (), {"stem": notebook})()
        self.params = params
        self.executed = folder / f"{notebook}-{len(list(folder.iterdir()))}.ipynb"
        self.executed.write_text(json.dumps({"metadata": {"papermill": {"duration": seconds}}}))
        self.recorded = seconds is not None

    def is_complete(self):
        return self.recorded


def test_notebook_times_sum_the_recorded_durations_and_estimate_the_rest_by_kind(tmp_path):
    specs = [_Spec(tmp_path, "05_unlearn", 600, method="npo"), _Spec(tmp_path, "05_unlearn", 1200, method="npo"),
             _Spec(tmp_path, "05_unlearn", 60, method="frp"),
             _Spec(tmp_path, "05_unlearn", None, method="npo"),  # not recorded: the median NPO run, 900 s
             _Spec(tmp_path, "05_unlearn", None, method="rmu"),  # no RMU run recorded: the notebook's median, 600 s
             _Spec(tmp_path, "06_attacks", 240, attack_data="forget"),
             _Spec(tmp_path, "06_attacks", None, attack_data="forget"),
             _Spec(tmp_path, "06_attacks", None, attack_data="forget", epochs=10)]  # ten epochs: 10 x 240 s
    t = costs.notebook_times(specs).set_index("notebook")
    assert t.loc["05_unlearn", "runs"] == 5 and t.loc["05_unlearn", "recorded"] == 3
    assert t.loc["05_unlearn", "hours"] == pytest.approx(1860 / 3600)
    assert t.loc["05_unlearn", "median_minutes"] == pytest.approx(10)
    assert t.loc["05_unlearn", "estimated_hours"] == pytest.approx((1860 + 900 + 600) / 3600)
    assert t.loc["06_attacks", "estimated_hours"] == pytest.approx((480 + 2400) / 3600)
    assert t.loc["all", "runs"] == 8 and t.loc["all", "recorded"] == 4
    assert t.loc["all", "estimated_hours"] == pytest.approx((3360 + 480 + 2400) / 3600)


def test_a_notebook_with_nothing_recorded_cannot_be_estimated_and_is_counted_out_of_the_total(tmp_path):
    t = costs.notebook_times([_Spec(tmp_path, "05_unlearn", 60, method="frp"),
                              _Spec(tmp_path, "06_attacks", None, attack_data="retain"),
                              _Spec(tmp_path, "06_attacks", None, attack_data="forget")]).set_index("notebook")
    assert math.isnan(t.loc["06_attacks", "estimated_hours"]) and t.loc["06_attacks", "not_estimated"] == 2
    assert t.loc["05_unlearn", "estimated_hours"] == pytest.approx(60 / 3600)
    assert t.loc["05_unlearn", "not_estimated"] == 0
    # the total is the estimable part, a lower bound, and says how many runs it leaves out
    assert t.loc["all", "estimated_hours"] == pytest.approx(60 / 3600) and t.loc["all", "not_estimated"] == 2


def test_a_plan_says_how_long_each_job_takes_its_own_record_first_then_the_median_of_its_kind(tmp_path):
    from types import SimpleNamespace

    universe = [_Spec(tmp_path, "05_unlearn", 600, method="npo"), _Spec(tmp_path, "05_unlearn", 1200, method="npo"),
                _Spec(tmp_path, "05_unlearn", 60, method="frp"), _Spec(tmp_path, "06_attacks", 240, attack_data="x")]
    fresh = _Spec(tmp_path, "05_unlearn", None, method="npo")  # no record: the median NPO run, 900 s
    fresh.executed.unlink()
    other = _Spec(tmp_path, "07_ablations", None)  # nothing of its notebook recorded: no estimate
    other.executed.unlink()
    jobs = [SimpleNamespace(spec=s, roles=None) for s in (universe[2], fresh, other)]  # a remake: as its record
    assert costs.job_seconds(jobs, [*universe, fresh, other]) == [60, 900, None]
    # notebook 02's target made alone: as long as its training took, not the whole record (1500 s)
    trained = _Spec(tmp_path, "02_target_and_gold", 1500)
    trained.out_dir = tmp_path
    (tmp_path / "results.json").write_text(json.dumps({"results": {"training": {
        "target": {"summary": {"train_seconds": 800.0}}, "gold": {"summary": {"train_seconds": 500.0}}}}}))
    assert costs.job_seconds([SimpleNamespace(spec=trained, roles=("target",)),
                              SimpleNamespace(spec=trained, roles=None)], [trained]) == [800, 1500]
    assert [costs.minutes(s) for s in (60, 900, 9000, None)] == ["about 1 min", "about 15 min", "about 2.5 h",
                                                                "no estimate"]
