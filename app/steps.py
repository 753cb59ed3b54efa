"""Pipeline steps the CLI and the Airflow DAGs call: one function per step, each idempotent.

A step takes the hour (or day) it works on from the caller -- Airflow's ``data_interval_start``,
never the clock -- and resolves its configuration itself (:class:`Settings`), so each DAG task is
one import and one call. Steps that touch the warehouse open a short-lived DuckDB connection under
the writer lock (:mod:`analytics.store.locking`) and close it before returning, so analysts can read the
warehouse between tasks (DuckDB allows one writing process per file).

Hourly: ``hourly_partitions`` -> ``check_arrival`` (the sensor) -> ``ingest_hour`` (one call per
partition, records ``data_gaps``) -> ``update_baselines`` -> ``detect`` -> ``root_cause`` ->
``send_alerts``. Daily: ``build_daily_report`` -> ``email_daily_report``. Maintenance:
``compact_shards``, ``apply_retention``, ``checkpoint_warehouse``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from analytics.results import Finding, Regression

log = logging.getLogger(__name__)

UTC = dt.timezone.utc

#: Airflow pool that serialises the warehouse writers (size 1; create it once per deployment).
DUCKDB_POOL = "cudawatch_duckdb"

_GAPS_DDL = """
CREATE TABLE IF NOT EXISTS data_gaps (
    hour TIMESTAMPTZ NOT NULL,         -- the UTC hour whose shards were incomplete
    partition_name VARCHAR NOT NULL,   -- the hourly DAG's partition (shard root)
    host VARCHAR NOT NULL,             -- a host seen in the previous hours that sent nothing
    table_name VARCHAR NOT NULL,       -- the shard table it sent nothing for
    last_seen TIMESTAMPTZ,             -- the last hour with a shard of this host and table
    recorded_at TIMESTAMPTZ DEFAULT current_timestamp,
    PRIMARY KEY (hour, partition_name, host, table_name)
);
"""


# --------------------------------------------------------------------------- configuration


def _in_airflow_task() -> bool:
    """True inside an Airflow task: the task runner exports ``AIRFLOW_CTX_DAG_ID`` before running
    it. Outside (CLI, benchmarks) Airflow is neither imported (5 s) nor asked."""
    return bool(os.environ.get("AIRFLOW_CTX_DAG_ID"))


def _ask_airflow(kind: str, key: str, lookup) -> Any:
    """``lookup()`` inside a running Airflow task; None outside Airflow or when the lookup fails
    (no supervisor, no metadata DB, missing Variable or Connection): callers fall back to the
    environment."""
    if not _in_airflow_task():
        return None
    try:
        return lookup()
    except ImportError:
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "not configured in Airflow"
        log.debug("Airflow %s %s unavailable (%s); using the environment", kind, key, type(exc).__name__)
        return None


def _airflow_variable(key: str) -> str | None:
    """An Airflow Variable's value inside a running task; None outside Airflow or when unset."""

    def lookup():
        from airflow.sdk import Variable

        return Variable.get(key, default=None)

    value = _ask_airflow("Variable", key, lookup)
    return value if value not in (None, "") else None


def _airflow_connection_secret(conn_id: str) -> str | None:
    """A URL kept in an Airflow Connection: its password if set, else its host (a full URL)."""

    def lookup():
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
        return conn.password or conn.host or None

    return _ask_airflow("Connection", conn_id, lookup)


def setting(name: str, default: str | None = None) -> str | None:
    """One setting: Airflow Variable ``cudawatch_<name>``, else env ``CUDAWATCH_<NAME>``, else default."""
    value = _airflow_variable(f"cudawatch_{name.lower()}")
    if value is None:
        value = os.environ.get(f"CUDAWATCH_{name.upper()}") or None
    return value if value is not None else default


def _int_setting(name: str, default: int) -> int:
    raw = setting(name, str(default))
    try:
        return int(raw)
    except ValueError as exc:
        from cudawatch.config import ConfigError

        raise ConfigError(f"cudawatch_{name.lower()} / CUDAWATCH_{name.upper()}={raw!r} is not an integer") from exc


@dataclass(frozen=True)
class Settings:
    """Everything a pipeline step needs, resolved inside the task (never at DAG parse time).

    Paths come from Variables ``cudawatch_shards|db|reports`` or ``CUDAWATCH_SHARDS|DB|REPORTS``;
    wait_grace_min: how long after an hour ends the sensor waits for late hosts;
    expect_lookback_h: hours before the current one whose hosts are expected to report;
    lock_timeout_s: how long a step waits for another warehouse writer.
    """

    shards: Path
    db: Path
    reports: Path
    wait_grace_min: int = 20
    expect_lookback_h: int = 3
    lock_timeout_s: int = 900

    @classmethod
    def resolve(cls) -> "Settings":
        from cudawatch.config import Paths

        env = Paths.from_env()
        return cls(
            shards=Path(setting("shards", str(env.shards))),
            db=Path(setting("db", str(env.db))),
            reports=Path(setting("reports", str(env.reports))),
            wait_grace_min=_int_setting("wait_grace_min", 20),
            expect_lookback_h=_int_setting("expect_lookback_h", 3),
            lock_timeout_s=_int_setting("lock_timeout_s", 900),
        )


def alert_config():
    """AlertConfig from Connections ``cudawatch_slack`` / ``cudawatch_webhook``, else the environment."""
    from cudawatch.config import AlertConfig

    env = AlertConfig.from_env()
    return dataclasses.replace(
        env,
        slack_webhook_url=_airflow_connection_secret("cudawatch_slack") or env.slack_webhook_url,
        webhook_url=_airflow_connection_secret("cudawatch_webhook") or env.webhook_url,
        report_url=setting("report_url", env.report_url),
    )


@contextlib.contextmanager
def writer(cfg: Settings) -> Iterator[Any]:
    """A writable warehouse connection held under the writer lock, closed on exit."""
    from analytics import store
    from analytics.store.locking import writer_lock

    cfg.db.parent.mkdir(parents=True, exist_ok=True)
    with writer_lock(cfg.db, timeout_s=cfg.lock_timeout_s):
        con = store.connect(cfg.db)
        try:
            con.execute(_GAPS_DDL)
            yield con
        finally:
            con.close()


def hour_of(ts: dt.datetime | str) -> dt.datetime:
    """The UTC hour (stdlib datetime) that contains ``ts``; accepts pendulum and ISO strings."""
    from cudawatch.shards import hour_floor

    return hour_floor(ts)


# --------------------------------------------------------------------------- CLI entry points


def latest_hour(con) -> dt.datetime | None:
    """The last UTC hour with kernel data in the warehouse."""
    row = con.execute("SELECT max(date_trunc('hour', window_start)) FROM kernels").fetchone()
    return row[0] if row else None


def analyze(con, as_of: dt.datetime | None = None) -> list[Regression]:
    """Baselines, change-point detection and root cause up to ``as_of`` (default: latest hour)."""
    from analytics import baselines, detect, rules

    as_of = as_of or latest_hour(con)
    if as_of is None:
        return []
    baselines.update_baselines(con, as_of)
    regressions = detect.detect_regressions(con, as_of)
    return rules.attach_causes(con, regressions)


# --------------------------------------------------------------------------- hourly steps


def hourly_partitions() -> list[dict[str, str]]:
    """The partitions the hourly DAG maps over: one per shard root.

    ``cudawatch_partitions`` / ``CUDAWATCH_PARTITIONS`` lists ``name=shard_root`` pairs separated
    by commas (one per cluster, say); unset means one partition, ``default``, over
    ``CUDAWATCH_SHARDS``. Each partition's sensor and ingest run as their own mapped task
    instances, so a Celery or Kubernetes executor spreads them over workers.
    """
    raw = setting("partitions")
    if not raw:
        return [{"name": "default", "shards": str(Settings.resolve().shards)}]
    parts = []
    for item in raw.split(","):
        name, sep, root = item.strip().partition("=")
        if not sep or not name or not root:
            from cudawatch.config import ConfigError

            raise ConfigError(f"cudawatch_partitions entry {item!r} is not name=shard_root")
        parts.append({"name": name.strip(), "shards": root.strip()})
    if len({p["name"] for p in parts}) != len(parts):
        from cudawatch.config import ConfigError

        raise ConfigError(f"cudawatch_partitions has duplicate names: {raw!r}")
    return parts


def _host_of(path: Path) -> str:
    """Host of a shard file named ``<host>-<pid>-<uuid>.parquet`` (cudawatch.shards.shard_name)."""
    parts = path.stem.rsplit("-", 2)
    return parts[0] if len(parts) == 3 else path.stem


def _present(root: Path, hour: dt.datetime) -> set[tuple[str, str]]:
    from analytics.maintenance import COMPACTED_HOST, hosts_of_compacted
    from cudawatch import shards as sh

    out = set()
    for p in sh.list_shards(root, None, hour):
        host = _host_of(p)
        hosts = hosts_of_compacted(p) if host == COMPACTED_HOST else {host}
        out.update((h, sh.table_of(p)) for h in hosts)
    return out


def arrival(partition: dict[str, str], hour: dt.datetime, lookback_h: int) -> dict[str, Any]:
    """Which (host, table) pairs sent shards for ``hour``, and which seen in the previous
    ``lookback_h`` hours did not (from file names only: no warehouse access, no shard reads)."""
    root = Path(partition["shards"])
    present = _present(root, hour)
    last_seen: dict[tuple[str, str], dt.datetime] = {}
    for back in range(lookback_h, 0, -1):
        h = hour - dt.timedelta(hours=back)
        for key in _present(root, h):
            last_seen[key] = h
    missing = sorted(set(last_seen) - present)
    return {
        "partition": partition,
        "hour": hour.isoformat(),
        "present": sorted(present),
        "missing": [[host, table, last_seen[(host, table)].isoformat()] for host, table in missing],
    }


def check_arrival(partition: dict[str, str], hour: dt.datetime | str, now: dt.datetime | None = None) -> tuple[bool, dict]:
    """The sensor's poke: done when every expected host sent its shards (and at least one shard
    arrived), or when the grace period
    after the hour has passed (then the pipeline proceeds with what arrived; ``ingest_hour``
    records the rest in ``data_gaps``). ``now`` is only used for that deadline."""
    cfg = Settings.resolve()
    hour = hour_of(hour)
    info = arrival(partition, hour, cfg.expect_lookback_h)
    deadline = hour + dt.timedelta(hours=1, minutes=cfg.wait_grace_min)
    now = now or dt.datetime.now(UTC)
    # Nothing at all yet (a new deployment, or the whole partition late) also waits for the grace.
    done = (bool(info["present"]) and not info["missing"]) or now >= deadline
    if done and info["missing"]:
        log.warning("hour %s partition %s: proceeding without %d expected (host, table) shards: %s",
                    hour.isoformat(), partition["name"], len(info["missing"]), info["missing"][:10])
    elif not done:
        log.info("hour %s partition %s: waiting for %d (host, table) shards until %s",
                 hour.isoformat(), partition["name"], len(info["missing"]), deadline.isoformat())
    return done, info


#: How many earlier hours each hourly ingest re-scans for shards that arrived late.
LATE_SHARD_HOURS = 24


def ingest_hour(partition: dict[str, str], hour: dt.datetime | str) -> dict[str, Any]:
    """Load one partition's shards of ``hour`` and record what is still missing in ``data_gaps``.

    Idempotent: the ledger skips loaded shards, and the hour's gap rows are replaced, so a late
    shard picked up by a re-run clears its gap.
    """
    from analytics import store

    cfg = Settings.resolve()
    hour = hour_of(hour)
    root = Path(partition["shards"])
    with writer(cfg) as con:
        result = store.ingest_shards(root, con, hour=hour)
        # Shards that arrived after their own hour's run: the ledger makes re-scanning cheap.
        late = [store.ingest_shards(root, con, hour=hour - dt.timedelta(hours=h)) for h in range(1, LATE_SHARD_HOURS + 1)]
        info = arrival(partition, hour, cfg.expect_lookback_h)
        con.execute("BEGIN TRANSACTION")
        con.execute("DELETE FROM data_gaps WHERE hour = ? AND partition_name = ?", [hour, partition["name"]])
        if info["missing"]:
            con.executemany(
                "INSERT INTO data_gaps (hour, partition_name, host, table_name, last_seen) VALUES (?, ?, ?, ?, ?)",
                [(hour, partition["name"], host, table, dt.datetime.fromisoformat(seen)) for host, table, seen in info["missing"]],
            )
        con.execute("COMMIT")
    late_loaded = sum(r.loaded for r in late)
    log.info("hour %s partition %s: %s; %d late shards of earlier hours; %d gaps",
             hour.isoformat(), partition["name"], result.summary(), late_loaded, len(info["missing"]))
    for r in late:
        result.quarantined.extend(r.quarantined)
    for path, reason in result.quarantined:
        log.warning("quarantined %s: %s", path, reason)
    return {
        "partition": partition["name"], "hour": hour.isoformat(), "loaded": result.loaded, "skipped": result.skipped,
        "rows": result.rows, "quarantined": len(result.quarantined), "gaps": len(info["missing"]), "late_loaded": late_loaded,
    }


def _optional(module: str):
    """Import an analysis module that may not be installed yet; None (with a warning) if absent."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name != module:  # the module exists but one of its imports failed: a real error
            raise
        log.warning("%s is not available; this step is skipped", module)
        return None


def update_baselines(hour: dt.datetime | str) -> dict[str, Any]:
    """Update the baselines up to ``hour`` (analytics.baselines.update_baselines)."""
    baselines = _optional("analytics.baselines")
    hour = hour_of(hour)
    if baselines is None:
        return {"hour": hour.isoformat(), "skipped": True}
    with writer(Settings.resolve()) as con:
        out = baselines.update_baselines(con, hour)
    return {"hour": hour.isoformat(), "result": _small(out)}


def detect(hour: dt.datetime | str) -> list[dict[str, Any]]:
    """Regressions as of ``hour`` (analytics.detect.detect_regressions), as XCom-safe dicts."""
    detect_mod = _optional("analytics.detect")
    if detect_mod is None:
        return []
    with writer(Settings.resolve()) as con:
        regressions = detect_mod.detect_regressions(con, hour_of(hour))
    log.info("hour %s: %d regressions", hour_of(hour).isoformat(), len(regressions))
    return [regression_to_dict(r) for r in regressions]


def root_cause(hour: dt.datetime | str, regressions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Attach root causes (analytics.rules.attach_causes) to the detected regressions."""
    regs = [regression_from_dict(d) for d in regressions]
    rules = _optional("analytics.rules")
    if rules is None or not regs or not hasattr(rules, "attach_causes"):
        if rules is not None and not hasattr(rules, "attach_causes"):
            log.warning("analytics.rules has no attach_causes yet; regressions go out without causes")
        return [regression_to_dict(r) for r in regs]
    with writer(Settings.resolve()) as con:
        regs = rules.attach_causes(con, regs)
    return [regression_to_dict(r) for r in regs]


def send_alerts(hour: dt.datetime | str, regressions: list[dict[str, Any]]) -> dict[str, Any]:
    """Send regressions not alerted before (reports.alerts.send_new_alerts, an outbox keyed by
    event id), so re-running an hour sends nothing twice."""
    regs = [regression_from_dict(d) for d in regressions]
    alerts = _optional("reports.alerts")
    if alerts is None or not hasattr(alerts, "send_new_alerts"):
        log.warning("reports.alerts.send_new_alerts is not available; %d regressions not alerted", len(regs))
        return {"hour": hour_of(hour).isoformat(), "sent": 0, "skipped": True}
    with writer(Settings.resolve()) as con:
        result = alerts.send_new_alerts(con, alert_config(), regressions=regs)
    log.info("hour %s: %s", hour_of(hour).isoformat(), result.summary())
    if result.failed:
        # Airflow retries the task; the outbox re-sends only what is due and never a sent alert.
        raise RuntimeError(f"{result.failed} alerts failed; the outbox table has the reasons")
    return {"hour": hour_of(hour).isoformat(), "queued": result.queued, "sent": result.sent, "pending": result.pending}


# --------------------------------------------------------------------------- daily steps


def report_day(interval_start: dt.datetime | str) -> dt.date:
    """The UTC day a daily run reports on: the day its data interval starts."""
    return hour_of(interval_start).date()


def build_daily_report(interval_start: dt.datetime | str) -> str:
    """Render the day's report into the archive folder ``<reports>/YYYY-MM-DD/``.

    Writes ``report.html`` (self-contained, charts inline; reports.render.write_report) and the
    e-mail version under ``mail/`` (HTML with ``cid:`` images, plain text, subject, PNGs;
    reports.render.build_report), so the e-mail step needs no warehouse. Returns the folder.
    """
    from analytics import store
    from analytics.store.locking import writer_lock
    from reports import render

    cfg = Settings.resolve()
    day = report_day(interval_start)
    folder = cfg.reports / day.isoformat()
    # A read-only DuckDB connection cannot open the file while another process writes it, so the
    # report takes the writer lock too (for the seconds rendering takes).
    with writer_lock(cfg.db, timeout_s=cfg.lock_timeout_s):
        path = render.write_report(cfg.db, folder / "report.html", day)
        con = store.connect(cfg.db, read_only=True)
        try:
            mail = render.build_report(con, day, image_mode="cid", report_url=setting("report_url"))
        finally:
            con.close()
    mail_dir = folder / "mail"
    mail_dir.mkdir(parents=True, exist_ok=True)
    # Each file appears whole (temporary name, then rename); images.json, which names the set the
    # e-mail step reads, goes last.
    for name, data in mail.images.items():
        _write_atomic(mail_dir / f"{name}.png", data)
    _write_atomic(mail_dir / "report.html", mail.html.encode("utf-8"))
    _write_atomic(mail_dir / "report.txt", mail.text.encode("utf-8"))
    _write_atomic(mail_dir / "subject.txt", mail.subject.encode("utf-8"))
    _write_atomic(mail_dir / "images.json", json.dumps(sorted(mail.images)).encode("utf-8"))
    log.info("report for %s: %s (%d charts)", day, path, len(mail.images))
    return str(folder)


def _write_atomic(path: Path, data: bytes) -> None:
    from cudawatch.shards import atomic_file

    with atomic_file(path) as fh:
        fh.write(data)


def email_daily_report(interval_start: dt.datetime | str, report_dir: str) -> dict[str, Any]:
    """E-mail the archived report (reports.email.build_report_message) through Airflow's SMTP
    connection (airflow.providers.smtp SmtpHook).

    Connection id: ``cudawatch_smtp_conn_id`` / ``CUDAWATCH_SMTP_CONN_ID`` (default
    ``smtp_default``); recipients: ``cudawatch_email_to`` / ``CUDAWATCH_EMAIL_TO`` (comma
    separated); sender: ``cudawatch_email_from`` / ``CUDAWATCH_EMAIL_FROM``, else the connection's
    ``from_email`` extra. Without recipients nothing is sent (logged as a warning).
    """
    from reports.email import build_report_message

    day = report_day(interval_start)
    to = [a.strip() for a in (setting("email_to", "") or "").split(",") if a.strip()]
    if not to:
        log.warning("no recipients (cudawatch_email_to / CUDAWATCH_EMAIL_TO); report for %s not e-mailed", day)
        return {"day": day.isoformat(), "sent": False, "recipients": 0}
    from airflow.providers.smtp.hooks.smtp import SmtpHook

    mail_dir = Path(report_dir) / "mail"
    marker = mail_dir / "sent.json"
    if marker.exists():  # a retry or re-run after a successful send: do not mail the report twice
        sent = json.loads(marker.read_text())
        log.info("report for %s already e-mailed (%s); not sent again", day, sent.get("message_id"))
        return {"day": day.isoformat(), "sent": False, "already_sent": True, "recipients": len(sent.get("to", []))}
    images = {name: (mail_dir / f"{name}.png").read_bytes() for name in json.loads((mail_dir / "images.json").read_text())}
    conn_id = setting("smtp_conn_id", "smtp_default")
    with SmtpHook(smtp_conn_id=conn_id) as hook:
        sender = setting("email_from") or hook.from_email or "cudawatch@localhost"
        msg = build_report_message(
            (mail_dir / "report.html").read_text(encoding="utf-8"), (mail_dir / "report.txt").read_text(encoding="utf-8"),
            images, sender=sender, to=to, subject=(mail_dir / "subject.txt").read_text(encoding="utf-8"),
        )
        # The hook opened and authenticated the SMTP client (TLS/SSL per the connection); it has
        # no public call for a prepared multipart message, so the message goes out on that client.
        hook._smtp_client.send_message(msg, from_addr=sender, to_addrs=to)
    # Recorded right after the send: a crash in between can still repeat the e-mail once.
    _write_atomic(marker, json.dumps({"message_id": msg["Message-ID"], "to": to}).encode("utf-8"))
    log.info("report for %s e-mailed to %d recipients via connection %s", day, len(to), conn_id)
    return {"day": day.isoformat(), "sent": True, "recipients": len(to), "message_id": msg["Message-ID"]}


# --------------------------------------------------------------------------- maintenance steps


def compact_shards(interval_end: dt.datetime | str) -> dict[str, Any]:
    """Merge small shards of fully loaded, settled partitions (analytics.maintenance)."""
    from analytics import maintenance

    cfg = Settings.resolve()
    older_than = hour_of(interval_end) - dt.timedelta(hours=_int_setting("compact_after_h", 48))
    with writer(cfg) as con:
        out = maintenance.compact_shards(cfg.shards, con, older_than=older_than,
                                         small_bytes=_int_setting("compact_small_bytes", 8 << 20))
    return out.as_dict()


def apply_retention(interval_end: dt.datetime | str) -> dict[str, Any]:
    """Drop shards, warehouse rows and report archives past their retention (analytics.maintenance)."""
    from analytics import maintenance

    cfg = Settings.resolve()
    now = hour_of(interval_end)
    policy = maintenance.RetentionPolicy(
        shard_days=_int_setting("retain_shard_days", 30),
        warehouse_days=_int_setting("retain_warehouse_days", 180),
        report_days=_int_setting("retain_report_days", 365),
    )
    with writer(cfg) as con:
        out = maintenance.apply_retention(cfg.shards, con, cfg.reports, now=now, policy=policy)
    return out.as_dict()


def checkpoint_warehouse() -> dict[str, Any]:
    """CHECKPOINT and ANALYZE the warehouse (analytics.maintenance.checkpoint)."""
    from analytics import maintenance

    cfg = Settings.resolve()
    with writer(cfg) as con:
        return maintenance.checkpoint(con, cfg.db)


# --------------------------------------------------------------------------- XCom helpers


def regression_to_dict(r: Regression) -> dict[str, Any]:
    """A Regression as JSON-safe dict (datetimes as ISO strings); inverse of regression_from_dict."""
    d = {f.name: getattr(r, f.name) for f in dataclasses.fields(Regression)}
    for key in ("onset", "detected_at"):
        if d[key] is not None:
            d[key] = d[key].isoformat()
    d["causes"] = [{"rule": f.rule, "confidence": f.confidence, "evidence": json.loads(json.dumps(dict(f.evidence), default=str)),
                    "recommendation": f.recommendation} for f in r.causes]
    return d


def regression_from_dict(d: dict[str, Any]) -> Regression:
    d = dict(d)
    for key in ("onset", "detected_at"):
        if d.get(key) is not None:
            d[key] = dt.datetime.fromisoformat(d[key])
    d["causes"] = tuple(Finding(**f) for f in d.get("causes", ()))
    names = {f.name for f in dataclasses.fields(Regression)}
    return Regression(**{k: v for k, v in d.items() if k in names})


def _small(value: Any) -> Any:
    """A step's return value made XCom-safe (numbers and short strings; long things summarised)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _small(v) for k, v in list(value.items())[:50]}
    if isinstance(value, (list, tuple)):
        return len(value)
    if hasattr(value, "summary"):
        return str(value.summary())
    return repr(value)[:200]
