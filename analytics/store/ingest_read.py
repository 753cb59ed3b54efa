"""How ingest reads a batch of shards: the footer check that lets DuckDB's parallel Parquet reader
take a shard, and the batch's rows as one SQL relation with the reason each row breaks."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from analytics.store import row_checks
from cudawatch import shards as sh

_REQUIRED = {t: [f.name for f in s if not f.nullable] for t, s in sh.SCHEMAS.items()}


#: Per table, Parquet schemas already seen to be exactly the contract's (the shape ``write_shard``
#: writes), with their column names and the leaf index of ``schema_version``. A file of such a
#: schema needs only its ``schema_version`` statistics checked: its required columns are Parquet
#: REQUIRED, which cannot hold a null. (Comparing the Parquet schema is cheap; converting it to
#: Arrow and checking it column by column cost as much as reading a small shard.)
_EXACT: dict[str, list[tuple[object, set[str], int]]] = {}


def footer_proves_contract(path: Path, table: str) -> tuple[set[str], int] | None:
    """(column names, rows) when the footer alone shows the shard meets the contract: every
    contract column it has is of the contract's type, the required ones are present and, by the
    row-group statistics, free of nulls, and ``schema_version`` is one the reader knows. Else
    None: ``read_shard`` then reads it, casting the contract's way or naming what is wrong."""
    try:
        md = pq.read_metadata(path)
    except Exception:  # unreadable: read_shard quarantines it with the reason
        return None
    known = sh.READABLE_VERSIONS.get(table, {sh.SCHEMA_VERSION})
    for schema, names, version_leaf in _EXACT.get(table, ()):
        if md.schema.equals(schema):
            return (names, md.num_rows) if _versions_known(md, version_leaf, known) else None
    try:
        arrow = md.schema.to_arrow_schema()
    except Exception:
        return None
    names = set(arrow.names)
    contract = sh.SCHEMAS[table]
    if any(arrow.field(f.name).type != f.type for f in contract if f.name in names):
        return None
    required = _REQUIRED[table]
    if not set(required) <= names:
        return None
    leaf = {md.schema.column(i).path: i for i in range(md.num_columns)}
    for rg in range(md.num_row_groups):
        group = md.row_group(rg)
        for name in required:
            stats = group.column(leaf[name]).statistics
            if stats is None or not stats.has_null_count or stats.null_count:
                return None
    if not _versions_known(md, leaf["schema_version"], known):
        return None
    if arrow.equals(contract, check_metadata=False):
        _EXACT.setdefault(table, []).append((md.schema, names, leaf["schema_version"]))
    return names, md.num_rows


def _versions_known(md, leaf: int, known: set[int]) -> bool:
    for rg in range(md.num_row_groups):
        stats = md.row_group(rg).column(leaf).statistics
        if stats is None or not stats.has_min_max or not set(range(stats.min, stats.max + 1)) <= known:
            return False
    return True


@dataclass
class Source:
    """A batch's rows as SQL (``sql`` with ``params``): the contract columns in the raw table's
    types, ``_file`` (the shard's number in the batch), ``shard_id`` and ``_reason`` (the first
    rule of ``row_checks`` the row breaks, or NULL). It joins ``_ingest_files`` (``_file``,
    ``shard_id``, ``_lo``, ``_hi`` per shard) and, when ``read``, scans ``_ingest_read`` (rows
    already read by ``read_shard``, with ``_file``)."""

    sql: str
    params: list


def source(table: str, types: dict[str, str], fast: list[tuple[Path, set[str]]], read: bool,
           now: dt.datetime) -> Source:
    """``fast``: (path, column names) of footer-checked shards, in ``_file`` order from 0 (DuckDB's
    ``file_index``); they are read by ``read_parquet``, all in one scan."""
    cols = sh.SCHEMAS[table].names
    parts, params = [], []
    if fast:
        present = set().union(*(names for _, names in fast))
        select = ", ".join(f"CAST(r.{c} AS {types[c]}) AS {c}" if c in present else f"NULL::{types[c]} AS {c}" for c in cols)
        parts.append(f"SELECT {select}, f._file, f.shard_id, f._lo, f._hi FROM read_parquet(?, union_by_name = true, "
                     f"hive_partitioning = false) r JOIN _ingest_files f ON r.file_index = f._file")
        params.append([str(path) for path, _ in fast])
    if read:
        parts.append(f"SELECT {', '.join('r.' + c for c in cols)}, r._file, f.shard_id, f._lo, f._hi FROM _ingest_read r "
                     f"JOIN _ingest_files f ON r._file = f._file")
    return Source(f"SELECT {', '.join(cols)}, _file, shard_id, {row_checks.reason_sql(table, now)} AS _reason "
                  f"FROM ({' UNION ALL '.join(parts)})", params)
