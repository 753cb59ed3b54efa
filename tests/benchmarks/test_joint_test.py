"""benchmarks/joint_test.py: the group statistic and the corpus it is measured on."""

import math

import numpy as np

import joint_test as jt


def test_joint_sums_members_clipped_at_zero():
    # 2 groups of 2 series, 1 run, 3 windows
    S = np.array([[[1.0, -2.0, 3.0]], [[0.5, 4.0, -np.inf]], [[-1.0, -1.0, -1.0]], [[2.0, 2.0, 2.0]]])
    V = np.array([[[3, 3, 3]], [[3, 2, 0]], [[3, 3, 3]], [[1, 3, 3]]], float)
    Z = np.array([[[1.0, 0.0, 0.0]], [[3.0, 0.0, 0.0]], [[0.0, 0.0, 0.0]], [[2.0, 0.0, 0.0]]])
    Sg, Vg, Zg = jt.joint(S, V, Z, 2)
    np.testing.assert_allclose(Sg, [[[1.5, 4.0, 3.0]], [[2.0, 2.0, 2.0]]])  # a member against a step adds 0, not less
    np.testing.assert_allclose(Vg, [[[3, 2, 3]], [[1, 3, 3]]])  # member 2's untested window (-inf, 0 valid) blocks nothing
    np.testing.assert_allclose(Zg[:, 0, 0], [2.0 * math.sqrt(2), 1.0 * math.sqrt(2)])


def test_members_share_the_common_part_at_rho():
    c = jt.make_corpus(160, hours=jt.HOURS, seed=3, step_fraction=0.0, improvement_fraction=0.0, onset_range=jt.ONSETS)
    v, sigma = jt.group_values(40, 4, seed=3, rho=0.5)
    v0, _ = jt.group_values(40, 4, seed=3, rho=0.0)
    assert v.shape == (160, jt.HOURS) and np.isfinite(v).all()
    np.testing.assert_allclose(sigma, c.sigma)

    def corr(values):  # of the AR parts (level, cycle, drift and outlier hours taken out), member j vs the first
        ar = (np.log(values) - c.mean_log - c.outlier_log).reshape(40, 4, -1)
        return np.mean([np.corrcoef(ar[q, 0], ar[q, j])[0, 1] for q in range(40) for j in (1, 2, 3)])

    assert 0.4 < corr(v) < 0.6  # every pair, the first member too
    assert abs(corr(v0)) < 0.1
    np.testing.assert_allclose(np.log(v0), np.log(c.values))  # rho 0 is the corpus itself


def test_steps_move_every_member_or_the_first_only():
    v, sigma = jt.group_values(3, 4, seed=5, rho=0.0)
    d, onset = jt.with_steps(v, sigma, 4, 2.0, seed=1, members="deploy")
    s, onset_s = jt.with_steps(v, sigma, 4, 2.0, seed=1, members="single")
    h, _ = jt.with_steps(v, sigma, 4, 2.0, seed=1, members="half")
    assert (onset == onset_s).all() and ((onset >= jt.ONSETS[0]) & (onset <= jt.ONSETS[1])).all()
    for q in range(3):
        for j in range(4):
            i = q * 4 + j
            np.testing.assert_allclose(d[i, onset[q]:] / v[i, onset[q]:], 1 + 2.0 * sigma[i])
            np.testing.assert_allclose(d[i, : onset[q]], v[i, : onset[q]])
            np.testing.assert_allclose(s[i, onset[q]:] / v[i, onset[q]:], 1 + 2.0 * sigma[i] if j == 0 else 1.0)
            np.testing.assert_allclose(h[i, onset[q]:] / v[i, onset[q]:], 1 + 2.0 * sigma[i] if j < 2 else 1.0)


def test_first_hit_matches_the_onset_within_three_hours():
    assert jt.first_hit([[(100, 104)], [(99, 102)]], 100) == 3
    assert jt.first_hit([[(95, 101)]], 100) == math.inf  # placed 5 h early: another event
    assert jt.first_hit([], 100) == math.inf



def test_a_correlation_outside_zero_one_is_refused_not_a_nan_table():
    import pytest

    for argv in (["--rho", "1.5"], ["--rho", "-0.1"], ["--group", "1"]):
        with pytest.raises(SystemExit) as e:
            jt.main(argv)
        assert e.value.code == 2
