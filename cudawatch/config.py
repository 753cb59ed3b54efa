"""Configuration from the environment (the ``CUDAWATCH_*`` names of docs/configuration.md).

One dataclass per concern, each with ``from_env()``. Airflow DAGs may override values from
Variables and Connections before passing them on; nothing here reads Airflow.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path


class ConfigError(ValueError):
    """A configuration value is missing or malformed; the message names the variable."""


def _env(name: str, default: str | None = None, environ: dict | None = None) -> str | None:
    value = (environ if environ is not None else os.environ).get(name)
    return value if value not in (None, "") else default


def _float(name: str, default: float, environ: dict | None = None) -> float:
    raw = _env(name, None, environ)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a number") from exc


@dataclass(frozen=True)
class Paths:
    """Where shards, the warehouse and the report archive live."""

    shards: Path = Path("shards")
    db: Path = Path("cudawatch.duckdb")
    reports: Path = Path("reports-archive")

    @classmethod
    def from_env(cls, environ: dict | None = None) -> "Paths":
        return cls(
            shards=Path(_env("CUDAWATCH_SHARDS", "shards", environ)),
            db=Path(_env("CUDAWATCH_DB", "cudawatch.duckdb", environ)),
            reports=Path(_env("CUDAWATCH_REPORTS", "reports-archive", environ)),
        )


_MEMORY = re.compile(r"^\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class DuckDBConfig:
    """DuckDB resources for every warehouse connection (``analytics.store.connect`` applies them).

    threads: worker threads (None: DuckDB's default, one per core); memory_limit: e.g. ``"3GB"``
    or ``"2.5GiB"`` (None: DuckDB's default, 80 % of RAM); temp_directory: where DuckDB spills
    when a query exceeds the memory limit (None: ``<db>.tmp`` beside the warehouse).
    """

    threads: int | None = None
    memory_limit: str | None = None
    temp_directory: Path | None = None

    def __post_init__(self) -> None:
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"CUDAWATCH_DUCKDB_THREADS={self.threads} must be at least 1")
        if self.memory_limit is not None and not _MEMORY.match(self.memory_limit):
            raise ConfigError(f"CUDAWATCH_DUCKDB_MEMORY_LIMIT={self.memory_limit!r} is not a size like 4GB or 2.5GiB")

    def settings(self) -> dict[str, str | int]:
        """The ``duckdb.connect(config=...)`` entries for the values that are set."""
        out: dict[str, str | int] = {}
        if self.threads is not None:
            out["threads"] = self.threads
        if self.memory_limit is not None:
            out["memory_limit"] = self.memory_limit.strip()
        if self.temp_directory is not None:
            out["temp_directory"] = str(self.temp_directory)
        return out

    @classmethod
    def from_env(cls, environ: dict | None = None) -> "DuckDBConfig":
        raw = _env("CUDAWATCH_DUCKDB_THREADS", None, environ)
        try:
            threads = None if raw is None else int(raw)
        except ValueError as exc:
            raise ConfigError(f"CUDAWATCH_DUCKDB_THREADS={raw!r} is not an integer") from exc
        temp = _env("CUDAWATCH_DUCKDB_TEMP_DIR", None, environ)
        return cls(threads=threads, memory_limit=_env("CUDAWATCH_DUCKDB_MEMORY_LIMIT", None, environ),
                   temp_directory=None if temp is None else Path(temp))


@dataclass(frozen=True)
class SmtpConfig:
    """SMTP settings for the CLI's email path (Airflow uses its SMTP connection instead)."""

    host: str | None = None
    port: int = 25
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    starttls: bool = False
    sender: str = "cudawatch@localhost"
    to: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: dict | None = None) -> "SmtpConfig":
        port_raw = _env("CUDAWATCH_SMTP_PORT", "25", environ)
        try:
            port = int(port_raw)
        except ValueError as exc:
            raise ConfigError(f"CUDAWATCH_SMTP_PORT={port_raw!r} is not an integer") from exc
        to = tuple(a.strip() for a in (_env("CUDAWATCH_EMAIL_TO", "", environ) or "").split(",") if a.strip())
        return cls(
            host=_env("CUDAWATCH_SMTP_HOST", None, environ),
            port=port,
            user=_env("CUDAWATCH_SMTP_USER", None, environ),
            password=_env("CUDAWATCH_SMTP_PASSWORD", None, environ),
            starttls=(_env("CUDAWATCH_SMTP_STARTTLS", "0", environ) or "0").lower() in ("1", "true", "yes"),
            sender=_env("CUDAWATCH_EMAIL_FROM", "cudawatch@localhost", environ),
            to=to,
        )


@dataclass(frozen=True)
class AlertConfig:
    """Alert destinations; a URL left unset means that channel is off."""

    slack_webhook_url: str | None = field(default=None, repr=False)
    webhook_url: str | None = field(default=None, repr=False)
    report_url: str | None = None

    def __post_init__(self) -> None:
        # Checked when the configuration is made (at a command's start), not when the first alert
        # is sent: only http(s) URLs with a host; urllib would open file:// and others.
        from cudawatch.inputs import InputError, http_url

        for name, value in (("CUDAWATCH_SLACK_WEBHOOK_URL", self.slack_webhook_url), ("CUDAWATCH_WEBHOOK_URL", self.webhook_url)):
            if value is not None:
                try:
                    http_url(name, value)
                except InputError as exc:
                    raise ConfigError(str(exc)) from None

    @classmethod
    def from_env(cls, environ: dict | None = None) -> "AlertConfig":
        return cls(
            slack_webhook_url=_env("CUDAWATCH_SLACK_WEBHOOK_URL", None, environ),
            webhook_url=_env("CUDAWATCH_WEBHOOK_URL", None, environ),
            report_url=_env("CUDAWATCH_REPORT_URL", None, environ),
        )


#: Smallest CUPTI host buffer the collector accepts (KiB): room for hundreds of records.
MIN_HOST_BUFFER_KIB = 64
#: Host buffers CUPTI is taken to hold at once. Measured on an H100 (docs/benchmarks.md §23, four loops
#: traced all the time for 90 s, eight processes sharing the GPU): up to 7 with a CNN loop and 4 with the launch-bound
#: loop traced all the time, the same with 1-MiB and 8-MiB buffers, so what CUPTI holds grows with the
#: buffer size (7 MiB against 56 MiB). Assumed, not enforced: refusing CUPTI a buffer drops records.
HOST_BUFFERS_HELD = 8


#: GPU memory (MiB) each CUPTI detach/attach cycle (``cuptiFinalize``, then a new attach) keeps in
#: the process, on an H100 (driver 580, libcupti 13.4.92): 0.586 over cycles 3-60 in each of §22's and
#: §21's 60-cycle runs (with or without records, with no activity kind enabled, with the buffer
#: attributes tried), 0.578 over 400 cycles, linear (§21; docs/benchmarks.md). CUPTI's or the
#: driver's; the collector can only make fewer cycles (docs/collector.md, "Staying on for days").
FINALIZE_KEEPS_GPU_MIB = 0.586


def host_buffer_max(total_bytes: int) -> int:
    """Largest CUPTI host buffer (bytes) under a buffer budget of ``total_bytes``: a sixteenth, so
    the ``HOST_BUFFERS_HELD`` buffers CUPTI may hold at once fill half the budget
    (collector.budget.BufferBudget)."""
    return total_bytes // 2 // HOST_BUFFERS_HELD


def check_host_buffer(nbytes: int, total_bytes: int, what: str) -> int:
    """``nbytes`` if it is a host-buffer size the buffer budget ``total_bytes`` takes, else a
    ``ConfigError`` naming ``what`` (the variable or argument it came from)."""
    largest = host_buffer_max(total_bytes)
    if not MIN_HOST_BUFFER_KIB << 10 <= nbytes <= largest:
        raise ConfigError(f"{what} must be {MIN_HOST_BUFFER_KIB} KiB to {largest >> 10} KiB (1/{2 * HOST_BUFFERS_HELD} of the "
                          f"budget: CUPTI may hold {HOST_BUFFERS_HELD} at once), got {nbytes >> 10} KiB")
    return nbytes


def collector_host_buffer(total_bytes: int = 32 << 20, environ: dict | None = None) -> int | None:
    """The collector's CUPTI host buffer in bytes (``CUDAWATCH_HOST_BUFFER_KIB``), or None when unset
    (the buffer budget's default, collector.budget.DEFAULT_HOST_BUFFER); at most ``host_buffer_max(total_bytes)``."""
    raw = _env("CUDAWATCH_HOST_BUFFER_KIB", None, environ)
    if raw is None:
        return None
    try:
        kib = int(raw)
    except ValueError as exc:
        raise ConfigError(f"CUDAWATCH_HOST_BUFFER_KIB={raw!r} is not a whole number of KiB") from exc
    return check_host_buffer(kib << 10, total_bytes, f"CUDAWATCH_HOST_BUFFER_KIB={kib}")


#: The collector's longest control period unless ``CUDAWATCH_PERIOD_S`` asks for more (collector.control).
DEFAULT_MAX_PERIOD_S = 30.0
#: Window lengths that divide the hour, ascending.
HOUR_DIVISORS = tuple(w for w in range(1, 3601) if 3600 % w == 0)


@dataclass(frozen=True)
class CollectorTiming:
    """Window length and control-period bounds of one collector (``CUDAWATCH_WINDOW_S``,
    ``CUDAWATCH_PERIOD_S``).

    Every window must contain tracing: the analytics scale a window's launches and time by
    1/``sampling_duty``, and a window without an on-phase has no rows to scale, so it would read as
    "no kernels" and its hour low. So the longest period is at most the window. A period asked for
    above the default 60-s window lengthens the window instead (to the next divisor of an hour);
    a window set explicitly below the period is an error. Windows divide the hour, so hourly
    roll-ups of epoch-aligned windows never split one.
    """

    window_s: int
    min_period_s: float
    max_period_s: float

    @classmethod
    def from_env(cls, window_s: int | None = None, period_s: float = 1.0, environ: dict | None = None) -> "CollectorTiming":
        period = _float("CUDAWATCH_PERIOD_S", period_s, environ)
        if not 0 < period <= 3600:
            raise ConfigError(f"CUDAWATCH_PERIOD_S={period:g} must be in (0, 3600] seconds")
        raw = _env("CUDAWATCH_WINDOW_S", None, environ)
        name = "window_s" if window_s is not None else "CUDAWATCH_WINDOW_S"  # where the value came from
        if window_s is None and raw is not None:
            try:
                window_s = int(raw)
            except ValueError as exc:
                raise ConfigError(f"CUDAWATCH_WINDOW_S={raw!r} is not a whole number of seconds") from exc
        if window_s is None:  # the default, lengthened to the period: never shorter than it
            window_s = next(w for w in HOUR_DIVISORS if w >= max(60.0, period))
        if window_s not in HOUR_DIVISORS:
            raise ConfigError(f"{name}={window_s} must divide 3600 (1, 2, ..., 60, ..., 3600) "
                              "so that no window spans two hours")
        if period > window_s:  # only a window that was set can be
            raise ConfigError(f"CUDAWATCH_PERIOD_S={period:g} is longer than the window ({name}={window_s}): "
                              "windows without tracing would read as no kernels; lengthen the window or shorten the period")
        return cls(window_s, period, min(max(DEFAULT_MAX_PERIOD_S, period), float(window_s)))


#: How tracing pauses between on-phases (collector.session): ``detach`` (``cuptiFinalize``) or ``disable``.
PAUSE_MODES = ("detach", "disable")


def collector_off_mode(environ: dict | None = None) -> str:
    """How the collector pauses between on-phases (``CUDAWATCH_OFF_MODE``, default ``detach``)."""
    mode = _env("CUDAWATCH_OFF_MODE", "detach", environ)
    if mode not in PAUSE_MODES:
        raise ConfigError(f"CUDAWATCH_OFF_MODE={mode!r} must be one of {', '.join(PAUSE_MODES)}")
    return mode


def collector_adaptive(environ: dict | None = None) -> bool:
    """Whether the collector duty-cycles under its budget (``CUDAWATCH_ADAPTIVE``; ``0`` traces all the time)."""
    return _env("CUDAWATCH_ADAPTIVE", "1", environ) != "0"


def max_overhead_pct(environ: dict | None = None) -> float:
    """The collector's overhead budget in percent (``CUDAWATCH_MAX_OVERHEAD_PCT``, default 2)."""
    value = _float("CUDAWATCH_MAX_OVERHEAD_PCT", 2.0, environ)
    if not 0 < value <= 100:
        raise ConfigError(f"CUDAWATCH_MAX_OVERHEAD_PCT={value} must be in (0, 100]")
    return value
