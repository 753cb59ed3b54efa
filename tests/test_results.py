"""Result types: event ids and the change label people read."""

import datetime as dt

from analytics.results import Regression

ONSET = dt.datetime(2026, 11, 2, 7, tzinfo=dt.timezone.utc)


def reg(before, after, magnitude_pct, **over):
    return Regression(job="j", kernel="k", kernel_id="ab", gpu_uuid=None, series="kernel_mean_ns", onset=ONSET,
                      before=before, after=after, magnitude_pct=magnitude_pct, p_value=1e-9, severity="low", **over)


def test_change_label():
    assert reg(100.0, 112.34, 12.34).change_label == "+12.3%"
    assert reg(100.0, 80.0, -20.0).change_label == "-20.0%"
    assert reg(0.0, 0.27, 1000.0).change_label == "new (was 0)"
    assert reg(5.0, 0.0, -100.0).change_label == "gone (now 0)"
    assert reg(1.0, 1.0, float("nan")).change_label == "n/a"


def test_event_id_is_stable_and_depends_on_series_and_onset():
    a, b = reg(1, 2, 100), reg(3, 4, 33)
    assert a.event_id == b.event_id and len(a.event_id) == 16
    assert reg(1, 2, 100, signature="x").event_id != a.event_id
    later = Regression(**{**a.__dict__, "onset": ONSET + dt.timedelta(hours=1)})
    assert later.event_id != a.event_id
    assert a.to_json()["causes"] == [] and a.to_json()["onset"] == ONSET.isoformat()
