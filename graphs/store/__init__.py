"""Graph stores: embedded FalkorDB (default) and Neo4j (production)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from graphs.errors import ConfigError
from graphs.store.base import GraphStore, QueryResult, Triple

StoreKind = Literal["falkordb", "neo4j"]
FALKORDB_SUBDIR = "falkordb"


def open_store(kind: StoreKind, index_dir: Path) -> GraphStore:
    """Open the graph store of an index: FalkorDB lives in `index_dir/falkordb`, Neo4j comes from NEO4J_* env vars.

    Imports are deferred so using one backend never requires the other's driver.
    """
    if kind == "falkordb":
        from graphs.store.falkordb_store import FalkorDBStore

        # a built index is served read-only: its server never rewrites dump.rdb (covered by the manifest)
        return FalkorDBStore(Path(index_dir) / FALKORDB_SUBDIR, persist=False)
    if kind == "neo4j":
        from graphs.store.neo4j_store import Neo4jStore

        return Neo4jStore.from_env()
    raise ConfigError(f"unknown graph store {kind!r}; choose 'falkordb' (embedded, default) or 'neo4j'")


__all__ = ["GraphStore", "QueryResult", "StoreKind", "Triple", "open_store"]
