"""PASemiQA *Query*: dense (HNSW) top-K nodes for a free-text description, optionally one node type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool
from pydantic import Field

from tools.common import InjectedArgs, SKBTool, embed_query, label_hint, node_snippet, schema_of, truncate
from tools.results import DEFAULT_BUDGET_TOKENS, SemanticHit, SemanticHits, ToolProvenance, tool_error, tool_output

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

NAME = "semantic_search"
DESCRIPTION = (
    "Find nodes whose text is semantically similar to a description (dense vector search). "
    "Use for a description or a name that was not linked yet. Optionally restrict to one node label. "
    "Returns one line per hit (key | label | name | score | text), best first."
)

#: What a search on an index without node vectors returns (names the missing part and what to run).
NO_VECTORS = (
    "this index has no node vectors yet (built with --stage core), so dense search found nothing; use search_nodes "
    "or cypher meanwhile, and complete the index with the same `skb index` command without --stage core"
)


class SemanticSearchArgs(InjectedArgs):
    text: str = Field(min_length=1, max_length=2000, description="what to look for, in natural language")
    label: str | None = Field(default=None, description="only nodes with this label (node type)")
    k: int = Field(default=20, ge=1, le=5000, description="how many hits to return")


def make_semantic_search(bundle: IndexBundle, *, budget_tokens: int = DEFAULT_BUDGET_TOKENS) -> BaseTool:
    def run(
        text: str, label: str | None = None, k: int = 20, step: int = 0, question: str | None = None
    ) -> tuple[str, Any]:
        query = text if label is None else f"{text} [label={label}]"
        schema = schema_of(bundle)
        if label is not None and label not in schema.label_names():
            err = tool_error(NAME, step, query, "unknown_label", f"no node label {label!r}", label_hint(schema))
            return tool_output(err, budget_tokens)
        if "vectors" in bundle.missing:  # a staged index before its vectors: say so, not an empty list
            result = SemanticHits(provenance=ToolProvenance(tool=NAME, step=step, query=truncate(query, 500)), note=NO_VECTORS)
            return tool_output(result, budget_tokens)
        vector = embed_query(bundle, text)
        hits = bundle.hnsw.search(vector, k, label=label, per_label=True)  # the nearest nodes, not one walk's
        rows = []
        for key, score in hits:
            node = bundle.skb.nodes.get(key)
            if node is None:
                continue
            rows.append(
                SemanticHit(
                    key=key,
                    label=node.label,
                    name=node.name,
                    score=round(float(score), 4),
                    text=node_snippet(bundle, key),
                )
            )
        result = SemanticHits(provenance=ToolProvenance(tool=NAME, step=step, query=truncate(query, 500)), hits=rows)
        return tool_output(result, budget_tokens)

    return SKBTool.from_function(
        run, name=NAME, description=DESCRIPTION, args_schema=SemanticSearchArgs, response_format="content_and_artifact"
    )
