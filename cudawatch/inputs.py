"""Checks of paths and URLs a user hands to a command, run before the command does anything.

Each check raises ``InputError`` with one line that names the option and the path, so the CLI can
print it and exit 2 without a traceback and without creating a file (a typo in ``--db`` must not
become a new, empty warehouse and a false "0 regressions"). Stdlib only.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path

#: A DuckDB database file has this magic at byte offset 8 (after the header checksum).
DUCKDB_MAGIC = b"DUCK"

#: A partition of a partitioned warehouse (analytics.store.partitions) is the file ``<name>.duckdb``;
#: the name is also a DuckDB catalog there.
PARTITION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
PARTITION_SUFFIX = ".duckdb"


class InputError(ValueError):
    """A path or URL given to a command is unusable; the message is one line."""


def is_duckdb_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file that starts like a DuckDB database."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except OSError:
        return False
    return len(head) == 12 and head[8:12] == DUCKDB_MAGIC


def existing_db(path: str | os.PathLike, option: str = "--db") -> Path:
    """A warehouse that a reading command opens: it must exist and be a DuckDB file."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{option} {p}: no such warehouse (run `cudawatch ingest --shards DIR --db {p}` first)")
    if p.is_dir():
        raise InputError(f"{option} {p}: is a directory, not a DuckDB file")
    if not is_duckdb_file(p):
        raise InputError(f"{option} {p}: not a DuckDB database file")
    return p


def partition_key(name: str) -> str:
    """What tells two partitions apart: DuckDB reads catalog names without case and the catalog
    turns ``-`` into ``_``, so ``East`` and ``east``, or ``a-b`` and ``a_b``, would be one."""
    return name.lower().replace("-", "_")


def partition_files(directory: str | os.PathLike) -> dict[str, Path]:
    """name -> file of every ``*.duckdb`` in ``directory`` (sorted; none: empty). InputError for a
    file whose name is not a partition name, or two whose names are one partition (``partition_key``):
    no file in the folder is silently left out of the partitions read together."""
    out: dict[str, Path] = {}
    seen: dict[str, Path] = {}
    for f in sorted(Path(directory).glob(f"*{PARTITION_SUFFIX}")):
        name = f.name[: -len(PARTITION_SUFFIX)]
        if not PARTITION_NAME.match(name):
            raise InputError(f"{f.name} is not named like a partition (letters, digits, '_' and '-', at most 63, "
                             f"not starting with '_' or '-')")
        key = partition_key(name)
        if key in seen:
            raise InputError(f"{seen[key].name} and {f.name} are one partition to DuckDB (names differ only in case or '-'/'_')")
        out[name] = seen[key] = f
    return out


def readable_warehouse(path: str | os.PathLike, option: str = "--db") -> Path:
    """A warehouse a read-only command (query, report) opens: a DuckDB file, or a partitioned
    warehouse's directory whose ``<partition>.duckdb`` files (at least one) are all DuckDB files."""
    p = Path(path)
    if p.is_dir():
        try:
            files = partition_files(p)
        except InputError as exc:
            raise InputError(f"{option} {p}: {exc}") from None
        if not files:
            raise InputError(f"{option} {p}: a directory without partition warehouses (*.duckdb)")
        for f in files.values():
            if not is_duckdb_file(f):
                raise InputError(f"{option} {p}: partition {f.name} is not a DuckDB database file")
        return p
    return existing_db(p, option)


def writable_db(path: str | os.PathLike, option: str = "--db") -> Path:
    """A warehouse that a writing command may create: absent, or an existing DuckDB file, in a
    folder that exists."""
    p = Path(path)
    if p.exists():
        return existing_db(p, option)
    if not p.parent.is_dir():
        raise InputError(f"{option} {p}: folder {p.parent} does not exist")
    return p


def shard_root(path: str | os.PathLike, option: str = "--shards") -> Path:
    """A shard root to read: an existing folder."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{option} {p}: no such folder")
    if not p.is_dir():
        raise InputError(f"{option} {p}: not a folder")
    return p


def output_file(path: str | os.PathLike, option: str = "--out") -> Path:
    """A file to write: not a directory, in a folder that exists (or can be made: no file in the way)."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{option} {p}: is a directory; give a file name (e.g. {p / 'report.html'})")
    return _creatable(p, option)


def output_dir(path: str | os.PathLike, option: str = "--out") -> Path:
    """A folder to write into: absent (it is created) or an existing folder, not a file."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{option} {p}: is a file, not a folder")
    return _creatable(p, option)


def _creatable(p: Path, option: str) -> Path:
    """``p`` if its nearest existing ancestor is a folder (so the missing ones can be made)."""
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{option} {p}: {parent} is a file, not a folder")
            break
    return p


def http_url(name: str, value: str) -> str:
    """``value`` if it is an http(s) URL with a host (and a numeric port, if any); else InputError
    naming the setting but not the URL (webhook URLs carry secrets)."""
    try:
        parts = urllib.parse.urlsplit(value.strip())
        port = parts.port  # raises ValueError for a port that is not a number
    except ValueError:
        raise InputError(f"{name} is not a valid URL (bad port or syntax)") from None
    if parts.scheme not in ("http", "https"):
        shown = f"{parts.scheme}://" if parts.scheme else "no scheme"
        raise InputError(f"{name} must be an http:// or https:// URL, got {shown}")
    if not parts.hostname:
        raise InputError(f"{name} must name a host (e.g. https://hooks.example.com/...)")
    if port == 0:
        raise InputError(f"{name} has port 0")
    return value.strip()


def or_exit(check, *args, **kwargs):
    """For CLI commands: ``check(*args, **kwargs)``; on InputError print ``error: ...`` (one line)
    on stderr and exit 2 (typer is imported only here, so the checks themselves stay stdlib)."""
    try:
        return check(*args, **kwargs)
    except InputError as exc:
        import typer

        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
