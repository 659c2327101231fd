"""Graph stores: embedded FalkorDB (default) and Neo4j (production)."""

from graphs.store.base import GraphStore, QueryResult, Triple

__all__ = ["GraphStore", "QueryResult", "Triple"]
