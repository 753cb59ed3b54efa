"""Shard contract (v1; ``health`` v2): the Parquet tables that collectors and agents write and analytics reads.

This module is the single definition of the contract (see docs/shards.md). It depends on pyarrow
only, so GPU hosts that install ``cudawatch[collector]`` can write shards without DuckDB or scipy.

Layout: ``ROOT/<table>/date=YYYY-MM-DD/hour=HH/<host>-<pid>-<uuid>.parquet`` (zstd). A shard is
written under a temporary name, fsynced and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import math
import os
import socket
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA_VERSION = 1
#: Version each table is written with; ``health`` v2 adds the data-quality columns (docs/shards.md).
SCHEMA_VERSIONS = {"kernels": 1, "memcpy": 1, "device": 1, "health": 2}
#: Versions a reader accepts per table (v1 health rows read with the v2 columns null).
READABLE_VERSIONS = {"kernels": {1}, "memcpy": {1}, "device": {1}, "health": {1, 2}}
TMP_PREFIX = ".tmp-"

_TS = pa.timestamp("us", tz="UTC")

_COMMON_WINDOW = [
    pa.field("schema_version", pa.int16(), nullable=False),
    pa.field("window_start", _TS, nullable=False),
    pa.field("window_s", pa.int32(), nullable=False),
    pa.field("host", pa.string(), nullable=False),
]

KERNELS = pa.schema(
    _COMMON_WINDOW
    + [
        pa.field("gpu_uuid", pa.string()),
        pa.field("gpu_index", pa.int16()),
        pa.field("gpu_model", pa.string()),
        pa.field("job", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("pid", pa.int32(), nullable=False),
        pa.field("kernel", pa.string(), nullable=False),
        pa.field("kernel_id", pa.string(), nullable=False),
        pa.field("grid_x", pa.int32()),
        pa.field("grid_y", pa.int32()),
        pa.field("grid_z", pa.int32()),
        pa.field("block_x", pa.int32()),
        pa.field("block_y", pa.int32()),
        pa.field("block_z", pa.int32()),
        pa.field("registers_per_thread", pa.int16()),
        pa.field("shared_mem_bytes", pa.int32()),
        pa.field("launches", pa.int64(), nullable=False),
        pa.field("total_ns", pa.int64(), nullable=False),
        pa.field("min_ns", pa.int64()),
        pa.field("max_ns", pa.int64()),
        pa.field("sumsq_ns2", pa.float64()),
        pa.field("hist_bucket", pa.list_(pa.int16())),
        pa.field("hist_count", pa.list_(pa.int64())),
        pa.field("sampling_duty", pa.float32()),
    ]
)

MEMCPY = pa.schema(
    _COMMON_WINDOW
    + [
        pa.field("gpu_uuid", pa.string()),
        pa.field("gpu_index", pa.int16()),
        pa.field("job", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("pid", pa.int32(), nullable=False),
        pa.field("copy_kind", pa.string(), nullable=False),
        pa.field("src_kind", pa.string()),
        pa.field("dst_kind", pa.string()),
        pa.field("count", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("total_ns", pa.int64(), nullable=False),
        pa.field("sampling_duty", pa.float32()),
    ]
)

DEVICE = pa.schema(
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("ts", _TS, nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("gpu_uuid", pa.string(), nullable=False),
        pa.field("gpu_index", pa.int16()),
        pa.field("gpu_model", pa.string()),
        pa.field("sm_util_pct", pa.float32()),
        pa.field("sm_occupancy_pct", pa.float32()),
        pa.field("tensor_util_pct", pa.float32()),
        pa.field("dram_bw_util_pct", pa.float32()),
        pa.field("pcie_tx_bytes_s", pa.float64()),
        pa.field("pcie_rx_bytes_s", pa.float64()),
        pa.field("power_w", pa.float32()),
        pa.field("temp_c", pa.float32()),
        pa.field("sm_clock_mhz", pa.float32()),
        pa.field("mem_clock_mhz", pa.float32()),
        pa.field("clocks_event_reasons", pa.int64()),
        pa.field("mem_used_bytes", pa.int64()),
    ]
)

HEALTH = pa.schema(
    _COMMON_WINDOW
    + [
        pa.field("job", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("pid", pa.int32(), nullable=False),
        pa.field("records", pa.int64(), nullable=False),
        pa.field("dropped_records", pa.int64(), nullable=False),
        pa.field("callback_s", pa.float64()),
        pa.field("overhead_pct", pa.float32()),
        pa.field("sampling_duty", pa.float32()),
        pa.field("cupti_version", pa.string()),
        # v2: data quality of the window, counted by delivery time (null in v1 rows)
        pa.field("records_delivered", pa.int64()),
        pa.field("records_valid", pa.int64()),
        pa.field("invalid_zero_timestamp", pa.int64()),
        pa.field("invalid_end_before_start", pa.int64()),
        pa.field("collector_errors", pa.int64()),
        pa.field("last_error", pa.string()),
        pa.field("data_quality", pa.string()),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "kernels": KERNELS,
    "memcpy": MEMCPY,
    "device": DEVICE,
    "health": HEALTH,
}

#: Column that places a row in its hourly partition, per table.
TIME_COLUMN = {"kernels": "window_start", "memcpy": "window_start", "device": "ts", "health": "window_start"}

#: Histogram resolution: bucket b holds durations d (ns) with floor(16 * log2(d)) == b.
HIST_BUCKETS_PER_OCTAVE = 16


class ShardError(ValueError):
    """A shard that does not meet the contract. The message says which file and why."""


def hist_bucket(duration_ns: float) -> int:
    """Histogram bucket of one duration in ns (durations below 1 ns go to bucket 0)."""
    return int(math.floor(HIST_BUCKETS_PER_OCTAVE * math.log2(max(duration_ns, 1.0))))


def bucket_lower_ns(bucket: int) -> float:
    """Lower edge of a histogram bucket, in ns."""
    return 2.0 ** (bucket / HIST_BUCKETS_PER_OCTAVE)


def kernel_id_of(mangled_name: str) -> str:
    """Stable 16-hex-digit id of a kernel's mangled name (the same on every host and run)."""
    return hashlib.blake2b(mangled_name.encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()


def parse_utc(value: str | dt.datetime) -> dt.datetime:
    """A UTC datetime (stdlib, not a subclass such as pendulum's) from an ISO string or datetime.

    Naive values are taken as UTC; a trailing ``Z`` is accepted. Raises ValueError for a string
    that is not ISO 8601.
    """
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an ISO 8601 time (e.g. 2026-11-01T05:00:00Z)") from exc
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return dt.datetime.fromtimestamp(value.timestamp(), tz=dt.timezone.utc)


def hour_floor(ts: str | dt.datetime) -> dt.datetime:
    """The UTC hour that contains ``ts`` (see ``parse_utc`` for what is accepted)."""
    return parse_utc(ts).replace(minute=0, second=0, microsecond=0)


def partition_dir(root: str | os.PathLike, table: str, hour: dt.datetime) -> Path:
    """Folder of one table's shards for one UTC hour."""
    h = hour_floor(hour)
    return Path(root) / table / f"date={h:%Y-%m-%d}" / f"hour={h:%H}"


def shard_name(host: str | None = None, pid: int | None = None) -> str:
    """A unique shard file name ``<host>-<pid>-<uuid>.parquet``."""
    host = (host or socket.gethostname()).replace("/", "_")
    return f"{host}-{pid if pid is not None else os.getpid()}-{uuid.uuid4().hex[:12]}.parquet"


def conform(table_name: str, data: pa.Table) -> pa.Table:
    """Return ``data`` cast to the contract schema of ``table_name``.

    Missing nullable columns are filled with nulls, ``schema_version`` is filled when absent, and
    extra columns are kept after the contract's columns. Raises ShardError for a missing required
    column or a value that cannot be cast.
    """
    schema = SCHEMAS[table_name]
    n = data.num_rows
    columns, fields = [], []
    for field in schema:
        if field.name in data.column_names:
            col = data.column(field.name)
        elif field.name == "schema_version":
            col = pa.array([SCHEMA_VERSIONS[table_name]] * n, pa.int16())
        elif field.nullable:
            col = pa.nulls(n, field.type)
        else:
            raise ShardError(f"{table_name}: required column {field.name!r} is missing")
        try:
            col = col.cast(field.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ShardError(f"{table_name}: column {field.name!r} cannot be cast to {field.type}: {exc}") from exc
        if not field.nullable and col.null_count:
            raise ShardError(f"{table_name}: required column {field.name!r} has {col.null_count} nulls")
        columns.append(col)
        fields.append(field)
    for name in data.column_names:
        if name not in schema.names:
            columns.append(data.column(name))
            fields.append(data.schema.field(name))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def write_shard(
    root: str | os.PathLike,
    table_name: str,
    data: pa.Table,
    hour: dt.datetime,
    *,
    host: str | None = None,
    pid: int | None = None,
) -> Path:
    """Write one shard atomically and return its final path.

    The rows are conformed to the contract, written with zstd to ``.tmp-<name>`` in the partition
    folder, fsynced, and renamed; the folder is fsynced too, so after a crash either the whole file
    or no file is visible.
    """
    table = conform(table_name, data)
    folder = partition_dir(root, table_name, hour)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / shard_name(host, pid)
    with atomic_file(final) as fh:
        pq.write_table(table, fh, compression="zstd")
    return final


@contextmanager
def atomic_file(final: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open ``.tmp-<name>`` beside ``final`` for writing; when the block ends, fsync it, rename it
    to ``final`` and fsync the folder. If the block raises, the temporary file is removed. Readers
    therefore see the whole file or none (``list_shards`` skips ``.tmp-`` names).

    Paths are handled as strings: CPython 3.12 interns every part of a ``pathlib.Path`` it parses
    forever (python/cpython#121780), and the collector's spool writes a new name every window."""
    final = os.fspath(final)
    folder, name = os.path.split(final)
    tmp = os.path.join(folder, TMP_PREFIX + name)
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_shard(path: str | os.PathLike, table_name: str | None = None) -> pa.Table:
    """Read and validate one shard; the table is inferred from the path when not given.

    Raises ShardError (naming the file) when the file is not Parquet, its ``schema_version`` is not
    one ``READABLE_VERSIONS`` lists for the table, or a required column is missing.
    """
    path = Path(path)
    table_name = table_name or table_of(path)
    try:
        data = pq.ParquetFile(path).read()
    except Exception as exc:  # pyarrow raises several types for corrupt files
        raise ShardError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc})") from exc
    if "schema_version" not in data.column_names:
        raise ShardError(f"{path}: no schema_version column; not a cudawatch shard")
    versions = set(data.column("schema_version").to_pylist())
    known = READABLE_VERSIONS.get(table_name, {SCHEMA_VERSION})
    if versions - known:
        raise ShardError(f"{path}: schema_version {sorted(v for v in versions if v is not None)} unsupported "
                         f"for {table_name} (this reader knows {sorted(known)})")
    try:
        return conform(table_name, data)
    except ShardError as exc:
        raise ShardError(f"{path}: {exc}") from exc


def table_of(path: str | os.PathLike) -> str:
    """The table a shard belongs to, from its ``<table>/date=.../hour=.../`` path."""
    parts = Path(path).parts
    for i, part in enumerate(parts):
        if part.startswith("date=") and i > 0 and parts[i - 1] in SCHEMAS:
            return parts[i - 1]
    raise ShardError(f"{path}: not under <table>/date=YYYY-MM-DD/hour=HH/ for a known table {sorted(SCHEMAS)}")


def list_shards(root: str | os.PathLike, table_name: str | None = None, hour: dt.datetime | None = None) -> list[Path]:
    """Complete shard files under ``root`` (temporary files are skipped), sorted by path."""
    tables = [table_name] if table_name else list(SCHEMAS)
    out: list[Path] = []
    for t in tables:
        base = partition_dir(root, t, hour) if hour is not None else Path(root) / t
        if base.is_dir():
            out.extend(p for p in base.rglob("*.parquet") if not p.name.startswith(TMP_PREFIX))
    return sorted(out)
