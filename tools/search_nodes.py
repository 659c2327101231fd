"""PASemiQA *Search*: the one-hop subgraph around given nodes, ranked by relevance to the question.

Why rank: a hub phenotype can have thousands of diseases; the model sees only ``limit`` of them,
so the cap must keep the neighbors whose text is closest to the question, not an arbitrary slice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import Field

from graphs.errors import ConfigError, StoreError, StoreUnavailableError
from tools.common import (
    InjectedArgs,
    QuestionGetter,
    embed_query,
    error_payload,
    label_hint,
    node_label_name,
    provenance,
    question_for,
    relation_hint,
    schema_of,
    tool_output,
)

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

NAME = "search_nodes"
DESCRIPTION = (
    "Expand node keys one hop along typed relationships (explicit edges) and return the edges as triples "
    "with node names, ranked by relevance of the neighbor to the question. Filter by relationship types, "
    "direction ('out' follows the stored arrow from the given nodes, 'in' goes against it, 'both') and the "
    'neighbor label. Returns {"triples": [{"src","src_label","src_name","rel","dst","dst_label","dst_name",'
    '"props","score"}], "truncated": bool}.'
)
MAX_LIMIT = 5000


class SearchNodesArgs(InjectedArgs):
    keys: list[str] = Field(min_length=1, max_length=200, description="node keys to expand, e.g. ['HP:0001250']")
    rel_types: list[str] | None = Field(default=None, description="only these relationship types")
    direction: Literal["out", "in", "both"] = "both"
    target_label: str | None = Field(default=None, description="only neighbors with this label")
    limit: int = Field(default=200, ge=1, le=MAX_LIMIT, description="most triples to return")
    rank: bool = Field(default=True, description="rank by relevance to the question; false returns store order")


def _neighbor_key(src: str, dst: str, seeds: set[str]) -> str:
    return src if dst in seeds and src not in seeds else dst


def make_search_nodes(bundle: IndexBundle, question_getter: QuestionGetter | None = None) -> BaseTool:
    def relevance(keys: list[str], question: str) -> dict[str, float]:
        qvec = embed_query(bundle, question)
        scores: dict[str, float] = {}
        for key in keys:
            try:
                vec = bundle.hnsw.vector(key)
            except (KeyError, IndexError, ValueError, RuntimeError):
                continue
            scores[key] = float(np.dot(np.asarray(vec, dtype=np.float32), qvec))
        return scores

    def run(
        keys: list[str],
        rel_types: list[str] | None = None,
        direction: Literal["out", "in", "both"] = "both",
        target_label: str | None = None,
        limit: int = 200,
        rank: bool = True,
        step: int = 0,
        question: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        query = f"keys={keys} rel_types={rel_types} direction={direction} target_label={target_label}"
        schema = schema_of(bundle)
        if target_label is not None and target_label not in schema.label_names():
            msg = f"no node label {target_label!r}"
            return tool_output(error_payload(NAME, step, query, "unknown_label", msg, label_hint(schema)))
        unknown_rels = sorted(set(rel_types or ()) - set(schema.relation_names()))
        if unknown_rels:
            msg = f"unknown relationship types {unknown_rels}"
            return tool_output(error_payload(NAME, step, query, "unknown_relation", msg, relation_hint(schema)))
        known = [k for k in dict.fromkeys(keys) if k in bundle.skb.nodes]
        unknown_keys = [k for k in keys if k not in bundle.skb.nodes]
        if not known:
            msg = f"none of the keys {unknown_keys[:10]} is a node of the graph"
            hint = "use keys returned by semantic_search, the plan's linked entities or earlier results"
            return tool_output(error_payload(NAME, step, query, "unknown_key", msg, hint))
        q = question_for(question, question_getter)
        do_rank = rank and bool(q)
        fetch = MAX_LIMIT if do_rank else limit

        def fetch_neighbors() -> list[Any]:
            return bundle.store.neighbors(
                known, rel_types=rel_types or None, direction=direction, target_label=target_label, limit=fetch + 1
            )

        try:
            try:
                triples = fetch_neighbors()
            except StoreUnavailableError:
                # a server that died (or was stopped by a rebuild) is restarted by the next call;
                # one-hop lookups are cheap and idempotent, so retry once before reporting
                triples = fetch_neighbors()
        except StoreUnavailableError as exc:
            hint = "the graph store is restarted on the next call; retry once, or use semantic_search meanwhile"
            return tool_output(error_payload(NAME, step, query, "store_unavailable", str(exc), hint))
        except (StoreError, ConfigError) as exc:
            hint = "check keys, relationship types and label against the schema; " + relation_hint(schema)
            return tool_output(error_payload(NAME, step, query, "store_error", str(exc), hint))
        truncated = len(triples) > fetch
        triples = triples[:fetch]
        seeds = set(known)
        rows: list[dict[str, Any]] = []
        for t in triples:
            _, src_name = node_label_name(bundle, t.src)
            _, dst_name = node_label_name(bundle, t.dst)
            rows.append(
                {
                    "src": t.src,
                    "src_label": t.src_label,
                    "src_name": src_name,
                    "rel": t.rel,
                    "dst": t.dst,
                    "dst_label": t.dst_label,
                    "dst_name": dst_name,
                    "props": t.props,
                }
            )
        if do_rank and q:
            neighbor_keys = list(dict.fromkeys(_neighbor_key(r["src"], r["dst"], seeds) for r in rows))
            scores = relevance(neighbor_keys, q)
            for r in rows:
                r["score"] = round(scores.get(_neighbor_key(r["src"], r["dst"], seeds), -1.0), 4)
            rows.sort(key=lambda r: -float(r["score"]))
        if len(rows) > limit:
            rows = rows[:limit]
            truncated = True
        payload: dict[str, Any] = {"triples": rows, "truncated": truncated, "provenance": provenance(NAME, step, query)}
        if unknown_keys:
            payload["unknown_keys"] = unknown_keys
        return tool_output(payload)

    return StructuredTool.from_function(
        run, name=NAME, description=DESCRIPTION, args_schema=SearchNodesArgs, response_format="content_and_artifact"
    )
