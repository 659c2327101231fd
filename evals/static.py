"""Replay precomputed rankings as a method.

Why: rankings produced elsewhere (another system, a notebook, a paper's released
predictions) can then be scored, reported and compared with exactly the same
code as our own methods; tests use it as a deterministic retriever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evals.protocol import Retrieval


class StaticRetriever:
    """Looks the question text up in a table of rankings; unknown questions return nothing."""

    def __init__(
        self,
        name: str,
        rankings: Mapping[str, Sequence[str | tuple[str, float]]],
        config: dict[str, Any] | None = None,
        timings_ms: Mapping[str, float] | None = None,
    ) -> None:
        self.name = name
        self.config: dict[str, Any] = {"method": name, "kind": "static", **(config or {})}
        self._rankings = {q: [_pair(item, rank) for rank, item in enumerate(r)] for q, r in rankings.items()}
        self._timings = dict(timings_ms or {})

    def retrieve(self, question: str) -> Retrieval:
        return Retrieval(ranked=list(self._rankings.get(question, [])), timings_ms=dict(self._timings))


def _pair(item: str | tuple[str, float], rank: int) -> tuple[str, float]:
    if isinstance(item, str):
        return (item, 1.0 / (rank + 1))
    return (str(item[0]), float(item[1]))
