"""The outlier component of the hourly noise model: outlier hours pooled over a fleet.

Hourly GPU series have outlier hours (a neighbour's job, a checkpoint write) far beyond their t(nu)
innovations. ``fit_outlier_law`` pools them over the rows of a fit; ``analytics.sequential.loglik``
mixes ``OutlierLaw.density`` into each hour's likelihood, so an outlier hour costs the no-step
hypothesis little (docs/detection.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OutlierLaw:
    """Outlier hours pooled over a fleet: probability per hour and density of their size (log
    units) on ``edges``, separately for outliers up (``pos``) and down (``neg``)."""

    p_pos: float
    p_neg: float
    edges: np.ndarray
    dens_pos: np.ndarray
    dens_neg: np.ndarray

    def density(self, e: np.ndarray) -> np.ndarray:
        """p * g(e): the outlier component's density at innovations ``e`` (log units)."""
        grid, table = self._table
        return np.interp(e, grid, table, left=0.0, right=0.0)

    @property
    def _table(self):
        centres = 0.5 * (self.edges[1:] + self.edges[:-1])
        grid = np.concatenate([-centres[::-1], [0.0], centres])
        table = np.concatenate([self.dens_neg[::-1] * self.p_neg, [0.0], self.dens_pos * self.p_pos])
        return grid, table


def fit_outlier_law(e: np.ndarray, scale: np.ndarray, *, k: float = 6.0, bins: int = 24, top: float = 1.2) -> OutlierLaw | None:
    """The outlier component from innovations ``e`` (rows, hours) beyond ``k`` t scales of their
    row: per-hour probabilities and histogram densities of |e| (log units) up and down, smoothed
    over neighbouring bins. None when the fleet shows no such hour."""
    e = np.asarray(e, float)
    valid = ~np.isnan(e)
    total = valid.sum()
    if total == 0:
        return None
    big = valid & (np.abs(np.nan_to_num(e)) > k * scale[:, None])
    edges = np.linspace(0.0, top, bins + 1)
    width = edges[1] - edges[0]
    out = []
    for sign in (+1, -1):
        sel = np.nan_to_num(e[big]) * sign
        sel = sel[sel > 0]
        hist, _ = np.histogram(np.minimum(sel, top - 1e-9), edges)
        hist = np.convolve(hist.astype(float), [0.25, 0.5, 0.25], mode="same")
        dens = hist / max(hist.sum(), 1.0) / width
        out.append((sel.size / total, dens))
    if out[0][0] == 0 and out[1][0] == 0:
        return None
    return OutlierLaw(out[0][0], out[1][0], edges, out[0][1], out[1][1])
