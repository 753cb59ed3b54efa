"""The ``noise_models`` cache: each series' noise model for one UTC day (analytics.online fits it
once per day on the history before the day's first run; every later run of the day reads it here
instead of refitting). Keyed by family, day and the model's version, so re-running an hour reads
the same model, and a changed fitting method (``analytics.online.MODEL_VERSION``) refits.

``noise_models`` holds one row per series the day's fit looked at (``tested`` false for rows left
to the change points), with the fingerprint of the data its fit read (``analytics.online.fit_prints``:
late rows that change it make the next run refit that series); ``noise_outliers`` the family's
pooled outlier law of that day. Retention drops days before its cutoff (``apply_retention``)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

from analytics import noise_model as nm
from analytics.outliers import OutlierLaw
from analytics.store.tx import transaction

DDL = """
CREATE TABLE IF NOT EXISTS noise_models (
    series VARCHAR NOT NULL, day DATE NOT NULL, version VARCHAR NOT NULL, series_key VARCHAR NOT NULL,
    tested BOOLEAN NOT NULL, phi DOUBLE, scale DOUBLE, season DOUBLE[], hours INTEGER, drift DOUBLE,
    fit_n DOUBLE NOT NULL, fit_sum DOUBLE NOT NULL, fit_wsum DOUBLE NOT NULL,
    PRIMARY KEY (series, day, version, series_key)
);
CREATE TABLE IF NOT EXISTS noise_outliers (
    series VARCHAR NOT NULL, day DATE NOT NULL, version VARCHAR NOT NULL, nu DOUBLE NOT NULL, period INTEGER NOT NULL,
    p_pos DOUBLE, p_neg DOUBLE, edges DOUBLE[], dens_pos DOUBLE[], dens_neg DOUBLE[],
    PRIMARY KEY (series, day, version)
);
"""


TABLES = ("noise_models", "noise_outliers")


def ensure_tables(con) -> None:
    """Create the cache tables; a cache of an older layout (no fingerprint, no drift) is dropped: it
    is only a cache, the next run refits."""
    have = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'noise_models' "
                                      "AND table_catalog = current_database()").fetchall()]
    if have and not {"fit_n", "drift"} <= set(have):
        for t in TABLES:
            con.execute(f"DROP TABLE IF EXISTS {t}")
    con.execute(DDL)


def drop_before(con, cutoff: dt.date) -> int:
    """Retention: forget the cached days before ``cutoff``; returns the ``noise_models`` rows dropped."""
    dropped = {}
    for t in TABLES:
        if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?", [t]).fetchone()[0]:
            dropped[t] = int(con.execute(f"DELETE FROM {t} WHERE day < ?", [cutoff]).fetchone()[0])
    return dropped.get("noise_models", 0)


def load_day(con, series: str, day: dt.date, version: str):
    """The cached day: (row of each series key in the returned model, or None for a key the fit
    did not test; the model of the tested keys in that row order; each key's fit fingerprint), or
    None when not cached."""
    head = con.execute("SELECT nu, period, p_pos, p_neg, edges, dens_pos, dens_neg FROM noise_outliers "
                       "WHERE series = ? AND day = ? AND version = ?", [series, day, version]).fetchone()
    if head is None:
        return None
    nu, period, p_pos, p_neg, edges, dpos, dneg = head
    law = None if p_pos is None else OutlierLaw(p_pos, p_neg, np.asarray(edges, float), np.asarray(dpos, float),
                                                    np.asarray(dneg, float))
    got = con.execute("SELECT series_key, tested, phi, scale, season, hours, fit_n, fit_sum, fit_wsum, drift FROM noise_models "
                      "WHERE series = ? AND day = ? AND version = ? ORDER BY series_key", [series, day, version]).fetchall()
    rows: dict[str, int | None] = {}
    prints = {r[0]: np.array(r[6:9], float) for r in got}
    sel = [r for r in got if r[1]]
    j = 0
    for key, tested, *_ in got:
        rows[key] = j if tested else None
        j += int(tested)
    if not sel:
        return rows, None, prints
    model = nm.NoiseModel(phi=np.array([r[2] for r in sel], float), scale=np.array([r[3] for r in sel], float), nu=float(nu),
                          season=np.array([r[4] for r in sel], float).reshape(len(sel), -1), ok=np.ones(len(sel), bool),
                          hours=np.array([r[5] for r in sel], int), period=int(period), outliers=law,
                          drift=np.array([r[9] for r in sel], float))
    return rows, model, prints


def save_day(con, series: str, day: dt.date, version: str, keys: list[str], tested: np.ndarray, model: nm.NoiseModel | None,
             prints: np.ndarray, *, nu: float, period: int = 24) -> None:
    """Store the day's models: ``keys`` (all series the fit looked at), ``tested`` (bool per key),
    ``model`` (rows = the tested keys, in order), ``prints`` (fit fingerprint per key, keys x 3).
    Replaces that day's rows (one transaction)."""
    tested = np.asarray(tested, bool)
    n, t = len(keys), int(tested.sum())
    prints = np.asarray(prints, float).reshape(n, 3)
    phi, scale, drift, hours = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, np.int32)
    season: list = [None] * n
    if model is not None and t:
        idx = np.flatnonzero(tested)
        phi[idx], scale[idx], hours[idx] = model.phi, model.scale, model.hours
        drift[idx] = model.drift if model.drift is not None else np.nan
        for j, i in enumerate(idx):
            season[i] = model.season[j].tolist()
    rows = pa.table({"series": [series] * n, "day": pa.array([day] * n, pa.date32()), "version": [version] * n,
                     "series_key": keys, "tested": tested,
                     "phi": pa.array(phi, pa.float64(), mask=~tested), "scale": pa.array(scale, pa.float64(), mask=~tested),
                     "season": pa.array(season, pa.list_(pa.float64())), "hours": hours,
                     "drift": pa.array(drift, pa.float64(), mask=np.isnan(drift)),
                     "fit_n": prints[:, 0], "fit_sum": prints[:, 1], "fit_wsum": prints[:, 2]})
    law = model.outliers if model is not None else None
    con.register("_noise_rows", rows)
    try:
        with transaction(con):
            con.execute("DELETE FROM noise_models WHERE series = ? AND day = ? AND version = ?", [series, day, version])
            con.execute("DELETE FROM noise_outliers WHERE series = ? AND day = ? AND version = ?", [series, day, version])
            con.execute("INSERT INTO noise_models SELECT * FROM _noise_rows")
            con.execute("INSERT INTO noise_outliers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [series, day, version, float(nu), int(period)] + ([None] * 5 if law is None else
                         [law.p_pos, law.p_neg, law.edges.tolist(), law.dens_pos.tolist(), law.dens_neg.tolist()]))
    finally:
        con.unregister("_noise_rows")
