"""The warehouse store: the one owner of the DuckDB file, its tables, views and queries.

Every other module receives a connection (or plain data) from here; none opens the file itself.
"""

from __future__ import annotations

from analytics.store import hours, regressions
from analytics.store.access import Store, WarehouseBusy
from analytics.store.db import WarehouseOutdated, connect
from analytics.store.ingest import CONTENT_KEY, IngestResult, ingest_shards
from analytics.store.partitions import PartitionView, open_store, partition_db, query
from analytics.store.locking import LockTimeout, lock_path, writer_lock
from analytics.store.sandbox import QueryError
from analytics.store.schema import DUTY, RAW_TABLES, SIGNATURE, ensure_schema

__all__ = [
    "Store", "WarehouseBusy", "PartitionView", "open_store", "partition_db", "hours", "regressions",
    "connect", "WarehouseOutdated", "query", "QueryError", "CONTENT_KEY", "ensure_schema", "ingest_shards", "IngestResult",
    "writer_lock", "lock_path", "LockTimeout", "DUTY", "SIGNATURE", "RAW_TABLES",
]
