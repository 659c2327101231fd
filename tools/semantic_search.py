"""PASemiQA *Query*: dense (HNSW) top-K nodes for a free-text description, optionally one node type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import Field

from tools.common import (
    InjectedArgs,
    embed_query,
    error_payload,
    label_hint,
    provenance,
    schema_of,
    tool_output,
    truncate,
)

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

NAME = "semantic_search"
DESCRIPTION = (
    "Find nodes whose text is semantically similar to a description (dense vector search). "
    "Use for descriptions, phenotypes or names that were not linked yet. Optionally restrict to one node label. "
    'Returns {"hits": [{"key","label","name","score","text"}]} best first.'
)


class SemanticSearchArgs(InjectedArgs):
    text: str = Field(min_length=1, max_length=2000, description="what to look for, in natural language")
    label: str | None = Field(default=None, description="only nodes with this label (node type)")
    k: int = Field(default=20, ge=1, le=5000, description="how many hits to return")


def make_semantic_search(bundle: IndexBundle) -> BaseTool:
    def run(
        text: str, label: str | None = None, k: int = 20, step: int = 0, question: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        query = text if label is None else f"{text} [label={label}]"
        schema = schema_of(bundle)
        if label is not None and label not in schema.label_names():
            return tool_output(
                error_payload(NAME, step, query, "unknown_label", f"no node label {label!r}", label_hint(schema))
            )
        vector = embed_query(bundle, text)
        hits = bundle.hnsw.search(vector, k, label=label)
        rows = []
        for key, score in hits:
            node = bundle.skb.nodes.get(key)
            if node is None:
                continue
            rows.append(
                {
                    "key": key,
                    "label": node.label,
                    "name": node.name,
                    "score": round(float(score), 4),
                    "text": truncate(bundle.skb.node_text(key)),
                }
            )
        return tool_output({"hits": rows, "provenance": provenance(NAME, step, query)})

    return StructuredTool.from_function(
        run, name=NAME, description=DESCRIPTION, args_schema=SemanticSearchArgs, response_format="content_and_artifact"
    )
