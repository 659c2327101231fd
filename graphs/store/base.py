"""The graph-store contract shared by the embedded FalkorDB store and the Neo4j adapter.

Read paths (`query`, `neighbors`, `schema`) must never be able to write: every
implementation runs them through the static Cypher guard *and* the server's own
read-only mode. `load` is the only write path and takes no model-produced text.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Literal, Self

from pydantic import BaseModel, Field

from graphs.errors import CypherValidationError
from graphs.model import SKB, GraphSchema

ProgressFn = Callable[[int, int], None]
"""Called as progress(done, total) during bulk loads."""


class QueryResult(BaseModel):
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False
    elapsed_ms: float = 0.0


class Triple(BaseModel):
    """One edge of a one-hop subgraph, oriented as stored (src -[rel]-> dst)."""

    src: str
    src_label: str
    rel: str
    dst: str
    dst_label: str
    props: dict[str, Any] = Field(default_factory=dict)


class GraphStore(ABC):
    """Bulk load once; then read-only Cypher, schema and one-hop expansion."""

    default_timeout_ms: int = 5000
    default_max_rows: int = 1000

    @abstractmethod
    def load(self, skb: SKB, *, batch_size: int = 5000, progress: ProgressFn | None = None) -> None:
        """Replace the graph's contents with the SKB (nodes keyed by `key`, indexed per label)."""

    @abstractmethod
    def query(
        self,
        cypher: str,
        params: dict[str, Any] | None = None,
        *,
        timeout_ms: int | None = None,
        max_rows: int | None = None,
    ) -> QueryResult:
        """Run a read-only query; raises ReadOnlyViolationError, QueryTimeoutError, CypherValidationError."""

    @abstractmethod
    def schema(self) -> GraphSchema:
        """Introspect labels, relation patterns, properties and a few sample values."""

    @abstractmethod
    def neighbors(
        self,
        keys: Sequence[str],
        *,
        rel_types: Sequence[str] | None = None,
        direction: Literal["out", "in", "both"] = "both",
        target_label: str | None = None,
        limit: int = 5000,
    ) -> list[Triple]:
        """One-hop edges around the given node keys (labelled, index-backed lookups)."""

    @abstractmethod
    def labels(self) -> list[str]: ...

    @abstractmethod
    def relationship_types(self) -> list[str]: ...

    def _neighbor_keys(
        self,
        keys: Sequence[str],
        rel_types: Sequence[str] | None,
        direction: str,
        target_label: str | None,
        limit: int,
    ) -> list[str]:
        """Validate `neighbors()` arguments the same way in every store; [] means nothing to look up.

        Unknown relation types or labels are errors naming the valid choices (an LLM can repair
        them), not an empty result that reads as "no neighbours".
        """
        if isinstance(keys, str):
            keys = [keys]
        if direction not in ("out", "in", "both"):
            raise CypherValidationError(f"direction must be 'out', 'in' or 'both', got {direction!r}")
        if limit <= 0 or not keys:
            return []
        if rel_types:
            known = set(self.relationship_types())
            unknown = [r for r in rel_types if r not in known]
            if unknown:
                raise CypherValidationError(
                    f"unknown relationship type(s) {', '.join(map(repr, unknown))}; valid types: "
                    f"{', '.join(sorted(known)) or '(none)'}"
                )
        if target_label is not None and target_label not in set(self.labels()):
            raise CypherValidationError(
                f"unknown target label {target_label!r}; valid labels: {', '.join(self.labels()) or '(none)'}"
            )
        return [str(k) for k in keys]

    @abstractmethod
    def count_nodes(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
