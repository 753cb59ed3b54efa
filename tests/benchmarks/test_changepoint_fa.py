"""benchmarks/changepoint_fa.py: its --history/--step-history ranges are checked before any replay."""

import pytest

import changepoint_fa


@pytest.mark.parametrize("text", ["47,24", "x", "24", "-1,5"])
def test_a_bad_history_range_is_refused(text, capsys):
    with pytest.raises(SystemExit) as e:
        changepoint_fa.main([f"--history={text}"])
    assert e.value.code == 2 and "LO" in capsys.readouterr().err


def test_a_history_range_parses():
    import argparse

    assert changepoint_fa._hours_range(argparse.ArgumentParser(), "24,47") == (24, 47)
    assert changepoint_fa._hours_range(argparse.ArgumentParser(), None) is None
