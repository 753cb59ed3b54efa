"""benchmarks/detection_rows.py's model-known oracle row and the corpus parts it reads."""

import numpy as np

from analytics import noise_model as nm
import detection_rows
from simulator.corpus import make_corpus


def test_corpus_holds_its_noise_model_and_the_model_oracle_uses_it():
    """simulator.corpus keeps the daily cycle and the walk's step it drew (the model-known oracle row
    of benchmarks/detection.py): the cycle from the coefficients is the corpus' own to rounding, and
    the oracle's statistics on clean series stay below the thresholds' range, a 6-sigma step's above it."""
    c = make_corpus(40, hours=240, seed=21, drift_max=0.0, step_fraction=0.0, improvement_fraction=0.0, onset_range=(200, 220))
    cyc = c.season @ nm._basis((np.arange(240) % 24).astype(float), 2, 24)
    assert np.ptp(c.mean_log - cyc, axis=1).max() < 1e-12  # level + cycle, nothing else, without drift
    d = make_corpus(40, hours=240, seed=21, step_fraction=0.0, improvement_fraction=0.0, onset_range=(200, 220))
    assert d.drift_q.shape == (40,) and (d.drift_q >= 0).all() and (d.drift_q <= 0.0005).all()
    runs, S, V, Z = detection_rows.model_oracle_stats(c, 228)
    assert np.isfinite(S).all() and S.shape == (40, 12, 12)
    stepped = make_corpus(40, hours=240, seed=21, drift_max=0.0, step_fraction=1.0, improvement_fraction=0.0,
                             onset_range=(232, 232), k_grid=(6.0,))  # inside the last run's 12-hour zone
    _, S6, _, _ = detection_rows.model_oracle_stats(stepped, 228)
    assert np.median(S6[:, -1, 2:].max(axis=1)) > 20 > np.quantile(S[:, :, 2:].max(axis=2), 0.95)  # thresholds are 10-15
