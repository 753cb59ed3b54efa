"""Shards and report archives on S3-compatible object storage, through pyarrow's ``S3FileSystem``.

A shard root or report archive may be an ``s3://bucket/prefix`` URI. Objects use the same layout
as on disk (``<table>/date=YYYY-MM-DD/hour=HH/<host>-<pid>-<uuid>.parquet``, docs/shards.md); an
S3 PUT is atomic, so readers see whole objects only (names starting ``.tmp-`` are still skipped).

DuckDB's ``httpfs`` extension is not installable offline, so the warehouse does not read S3
itself: ``mirror_hours`` copies the objects of some partition hours that are not yet in a local
mirror (by relative path and size) into it, each file written whole (temporary name, rename),
and the ordinary ingest runs on the mirror -- the ledger, late shards, duplicates and quarantine
work exactly as for a local root, keyed by the same relative paths.

Endpoint and credentials: ``CUDAWATCH_S3_ENDPOINT`` (e.g. ``http://127.0.0.1:9000`` for MinIO or
a test server; unset: AWS), ``CUDAWATCH_S3_REGION`` (default ``us-east-1``) and the standard
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` that pyarrow reads.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from urllib.parse import urlparse

from cudawatch import shards as sh


def is_uri(root: str | os.PathLike) -> bool:
    """True for an ``s3://`` URI (a local path otherwise)."""
    return str(root).startswith("s3://")


def filesystem(uri: str, environ: dict | None = None):
    """(S3FileSystem, "bucket/prefix") for ``s3://bucket/prefix``."""
    from pyarrow import fs

    env = os.environ if environ is None else environ
    parsed = urlparse(str(uri))
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"{uri!r} is not an s3://bucket/prefix URI")
    kw = {"region": env.get("CUDAWATCH_S3_REGION") or "us-east-1"}
    endpoint = env.get("CUDAWATCH_S3_ENDPOINT")
    if endpoint:
        ep = urlparse(endpoint)
        if ep.scheme not in ("http", "https") or not ep.netloc:
            raise ValueError(f"CUDAWATCH_S3_ENDPOINT={endpoint!r} is not an http(s)://host[:port] URL")
        kw.update(endpoint_override=ep.netloc, scheme=ep.scheme)
    base = (parsed.netloc + "/" + parsed.path.strip("/")).rstrip("/")
    return fs.S3FileSystem(**kw), base


def list_objects(uri: str, sub: str = "") -> dict[str, int]:
    """Complete objects under ``uri``/``sub``: relative path -> size in bytes."""
    from pyarrow import fs

    s3, base = filesystem(uri)
    top = f"{base}/{sub}".rstrip("/")
    infos = s3.get_file_info(fs.FileSelector(top, recursive=True, allow_not_found=True))
    out = {}
    for info in infos:
        if info.type == fs.FileType.File and not Path(info.path).name.startswith(sh.TMP_PREFIX):
            out[info.path[len(base) + 1:]] = info.size
    return out


def _hour_sub(table: str, hour: dt.datetime) -> str:
    h = sh.hour_floor(hour)
    return f"{table}/date={h:%Y-%m-%d}/hour={h:%H}"


def list_day(uri: str, day: dt.date) -> dict[tuple[str, dt.datetime], list[str]]:
    """The shards of one UTC day: (table, hour) -> sorted relative paths, hours with shards only."""
    out: dict[tuple[str, dt.datetime], list[str]] = {}
    for table in sh.SCHEMAS:
        for rel in list_objects(uri, f"{table}/date={day:%Y-%m-%d}"):
            if not rel.endswith(".parquet"):
                continue
            hour_part = rel.split("/")[2]
            hour = dt.datetime(day.year, day.month, day.day, int(hour_part.removeprefix("hour=")), tzinfo=dt.timezone.utc)
            out.setdefault((table, hour), []).append(rel)
    return {k: sorted(v) for k, v in sorted(out.items())}


def mirror_hours(uri: str, local_root: str | os.PathLike, hours: list[dt.datetime]) -> list[Path]:
    """Copy the objects of ``hours`` (every table) missing from ``local_root`` or of another size
    there; returns the local paths written. Each file appears whole (temporary name, rename)."""
    s3, base = filesystem(uri)
    local_root = Path(local_root)
    written = []
    for hour in hours:
        for table in sh.SCHEMAS:
            for rel, size in sorted(list_objects(uri, _hour_sub(table, hour)).items()):
                dest = local_root / rel
                if dest.exists() and dest.stat().st_size == size:
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                with sh.atomic_file(dest) as out, s3.open_input_stream(f"{base}/{rel}") as src:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                written.append(dest)
    return written


def upload_tree(local_dir: str | os.PathLike, uri: str) -> list[str]:
    """Upload every file under ``local_dir`` (a report day, a shard root) to ``uri``, same
    relative paths; returns the relative paths uploaded. Each object is one atomic PUT."""
    s3, base = filesystem(uri)
    local_dir = Path(local_dir)
    done = []
    for path in sorted(p for p in local_dir.rglob("*") if p.is_file() and not p.name.startswith(sh.TMP_PREFIX)):
        rel = path.relative_to(local_dir).as_posix()
        with s3.open_output_stream(f"{base}/{rel}") as out:
            out.write(path.read_bytes())
        done.append(rel)
    return done
