"""Shared plumbing for the retrieval tools: argument injection, the tool class, query vectors, node texts, schema cache.

Why injected arguments: the agent knows the step number and the question, the model does not
and must not be asked for them. ``InjectedToolArg`` hides them from the schema the model sees
while letting the agent (or a direct caller) pass them, so tools stay stateless and reentrant.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from langchain_core.callbacks import CallbackManager, Callbacks
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolArg, StructuredTool, ToolException
from langchain_core.tools.base import FILTERED_ARGS, _format_output, _handle_tool_error, _handle_validation_error
from pydantic import BaseModel, ValidationError, model_validator

from graphs.skb.model import SKB, GraphSchema
from graphs.text_safety import clean_text

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle
    from graphs.embedding.embedder import Embedder

QuestionGetter = Callable[[], "str | None"]

#: Longest node text or cell string a tool puts into a model's context.
MAX_TEXT_CHARS = 240


class InjectedArgs(BaseModel):
    """Arguments the agent supplies and the model never sees.

    Also the base of every tool's arguments, so it reads an explicit ``null`` for an optional argument
    whose default is not null as "use the default": small models fill every optional argument, and
    ``{"k": null}`` failing validation costs them a turn (and often the answer)."""

    step: Annotated[int, InjectedToolArg] = 0
    question: Annotated[str | None, InjectedToolArg] = None

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            k: v
            for k, v in data.items()
            if not (v is None and k in fields and not fields[k].is_required() and fields[k].default is not None)
        }


#: Injected argument names per (tool class, argument schema): a handful of entries, one per tool kind.
_INJECTED: dict[tuple[type, Any], frozenset[str]] = {}


class SKBTool(StructuredTool):
    """A StructuredTool whose function takes only its own arguments (no config, no callbacks).

    Why: StructuredTool resolves the function's type hints on every call to find a RunnableConfig
    parameter (about half a millisecond per call with postponed annotations, several calls per
    question); our tool functions never take one, so this ``_run`` declares none and calls the
    function directly. Callbacks and tracing still wrap the call in ``BaseTool.run``."""

    in_process: Callable[[dict[str, Any]], bool] | None = None
    """For a call's arguments: True when the call runs on this process's own data alone (no graph store,
    model or network to wait on). A round of such calls runs on the calling thread (``agent.nodes.act``):
    threads only contend for the interpreter lock there. None: the call may wait, run it beside others."""

    def _filter_injected_args(self, tool_input: dict[str, Any]) -> dict[str, Any]:
        """The input without injected arguments, for callbacks: the keys to drop are computed once per tool
        class and argument schema (LangChain resolves the schema's annotations on every call, ~1 ms)."""
        key = (type(self), self.args_schema)
        dropped = _INJECTED.get(key)
        if dropped is None:
            fields = getattr(self.args_schema, "model_fields", None)
            if not isinstance(fields, dict):
                return super()._filter_injected_args(tool_input)
            kept = super()._filter_injected_args(dict.fromkeys(fields))
            if len(_INJECTED) >= 64:  # a bound: tools built with generated schemas would add one each
                _INJECTED.clear()
            dropped = _INJECTED[key] = frozenset(FILTERED_ARGS) | self._injected_args_keys | (set(fields) - set(kept))
        return {k: v for k, v in tool_input.items() if k not in dropped}

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        if self.func is None:
            raise NotImplementedError(f"tool {self.name} has no synchronous function")
        return self.func(*args, **kwargs)

    def run(
        self,
        tool_input: str | dict[str, Any],
        verbose: bool | None = None,
        start_color: str | None = "green",
        color: str | None = "green",
        callbacks: Callbacks = None,
        *,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        run_name: str | None = None,
        run_id: Any = None,
        config: RunnableConfig | None = None,
        tool_call_id: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """``BaseTool.run`` without its callback events when no handler would receive them.

        Why: a tool call under a LangGraph node with no tracer or callback configured still paid for a
        run manager, its start and end events, a patched child config and a copied context (about a
        third of a millisecond per call, several calls per question), all for no listener. The fast
        path validates and runs the same way and returns the same ``ToolMessage``; with any handler
        (a tracer, ``LANGSMITH_TRACING``, a callback the caller passes) the call goes through
        ``BaseTool.run`` unchanged. Our tool functions take no config or run manager (see ``_run``)."""
        manager = CallbackManager.configure(
            callbacks, self.callbacks, self.verbose or bool(verbose), tags, self.tags, metadata, self.metadata
        )
        if manager.handlers or kwargs:
            return super().run(
                tool_input, verbose, start_color, color, callbacks, tags=tags, metadata=metadata,
                run_name=run_name, run_id=run_id, config=config, tool_call_id=tool_call_id, **kwargs,
            )
        content: Any = None
        artifact: Any = None
        status = "success"
        try:
            tool_args, tool_kwargs = self._to_args_and_kwargs(tool_input, tool_call_id)
            response = self._run(*tool_args, **tool_kwargs)
        except ValidationError as exc:
            if not self.handle_validation_error:
                raise
            content, status = _handle_validation_error(exc, flag=self.handle_validation_error), "error"
        except ToolException as exc:
            if not self.handle_tool_error:
                raise
            content, status = _handle_tool_error(exc, flag=self.handle_tool_error), "error"
        else:
            if self.response_format == "content_and_artifact":
                if not isinstance(response, tuple) or len(response) != 2:
                    raise ValueError(
                        "Since response_format='content_and_artifact' a two-tuple of the message content and raw "
                        f"tool output is expected. Instead, generated response is of type: {type(response)}."
                    )
                content, artifact = response
            else:
                content = response
        return _format_output(content, artifact, tool_call_id, self.name, status)


def truncate(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def node_label_name(bundle: IndexBundle, key: str) -> tuple[str, str]:
    node = bundle.skb.nodes.get(key)
    if node is None:
        return "", key
    return node.label, node.name


def schema_of(bundle: IndexBundle) -> GraphSchema:
    """The bundle's graph schema (computed once and cached by the bundle)."""
    return bundle.schema()


_QUERY_CACHE_SIZE = 512
_query_lock = threading.Lock()
_query_cache: OrderedDict[tuple[int, str], tuple[object, np.ndarray]] = OrderedDict()


#: Query vectors being computed in the background (``prefetch_query``), by the same key as the cache.
_pending: dict[tuple[int, str], Future[np.ndarray]] = {}


def _embed_and_cache(embedder: Embedder, key: tuple[int, str], text: str) -> np.ndarray:
    try:
        vector = np.asarray(embedder.embed_query(text), dtype=np.float32)
        vector.setflags(write=False)
        with _query_lock:
            _query_cache[key] = (embedder, vector)
            while len(_query_cache) > _QUERY_CACHE_SIZE:
                _query_cache.popitem(last=False)
        return vector
    finally:  # a failed prefetch is not waited for again: the next caller computes afresh
        with _query_lock:
            _pending.pop(key, None)


def prefetch_query(bundle: IndexBundle, text: str, executor: Executor) -> None:
    """Start computing the query vector of ``text`` on ``executor``; ``embed_query`` then waits for it
    instead of computing it again.

    Why: the question's vector is one MiniLM forward pass (about 1 GFLOP, the largest single cost of an
    offline question) and the first tool round needs it; started when the question arrives, it runs on
    another core while the planner decides that round's calls."""
    embedder = bundle.embedder
    text = clean_text(text)
    key = (id(embedder), text)
    with _query_lock:
        hit = _query_cache.get(key)
        if (hit is not None and hit[0] is embedder) or key in _pending:
            return
        _pending[key] = executor.submit(_embed_and_cache, embedder, key, text)


def embed_query(bundle: IndexBundle, text: str) -> np.ndarray:
    """The query vector, memoised: one agent run ranks many tool results against the same question,
    and a MiniLM forward pass costs far more than a lookup. A prefetched vector still being computed
    is waited for."""
    embedder = bundle.embedder
    text = clean_text(text)  # a lone surrogate makes the tokenizer raise TypeError
    key = (id(embedder), text)
    with _query_lock:
        hit = _query_cache.get(key)
        if hit is not None and hit[0] is embedder:
            _query_cache.move_to_end(key)
            return hit[1]
        pending = _pending.get(key)
    if pending is not None:
        return pending.result()
    return _embed_and_cache(embedder, key, text)


class EmbeddingMatrix:
    """Every node vector of an index as one contiguous float32 matrix plus a key -> row map.

    Why: ranking a hub's neighbours by relevance is one matrix-vector product over the rows of
    those neighbours; asking the HNSW index for one vector per key costs a Python round trip each.
    """

    def __init__(self, keys: Sequence[str], matrix: np.ndarray, row: Mapping[str, int] | None = None) -> None:
        """``row``: each key's row where the caller has it (the index's own dictionary), else made here."""
        self.row: Mapping[str, int] = {key: i for i, key in enumerate(keys)} if row is None else row
        self.matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        self.matrix.setflags(write=False)

    def scores(self, keys: list[str], query: np.ndarray) -> np.ndarray:
        """Cosine of each key's vector with ``query`` (vectors are unit length); NaN for keys without one."""
        rows = np.fromiter((self.row.get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
        out = np.full(len(keys), np.nan, dtype=np.float32)
        present = rows >= 0
        if present.any():
            out[present] = self.matrix[rows[present]] @ np.asarray(query, dtype=np.float32)
        return out


_matrix_lock = threading.Lock()
_matrices: dict[int, tuple[object, EmbeddingMatrix]] = {}


def embedding_matrix(bundle: IndexBundle) -> EmbeddingMatrix:
    """The bundle's node vectors as one matrix, copied out of the HNSW index once per index."""
    hnsw = bundle.hnsw
    with _matrix_lock:
        hit = _matrices.get(id(hnsw))
        if hit is not None and hit[0] is hnsw:
            return hit[1]
        keys = hnsw.keys  # a tuple (graphs.heap)
        matrix = EmbeddingMatrix(keys, hnsw.vectors(keys), hnsw.key_positions())
        _matrices[id(hnsw)] = (hnsw, matrix)
        for ident in [i for i, (h, _) in _matrices.items() if h is not hnsw and i != id(hnsw)][:-3]:
            _matrices.pop(ident, None)  # keep a few indexes' matrices, not every one ever opened
        return matrix


_snippet_lock = threading.Lock()
#: Per graph (weakly: a rebuilt index's old graph is not kept alive), node key -> text cut to MAX_TEXT_CHARS.
_snippets: weakref.WeakKeyDictionary[SKB, dict[str, str]] = weakref.WeakKeyDictionary()


def node_snippet(bundle: IndexBundle, key: str) -> str:
    """The node's text cut to MAX_TEXT_CHARS, computed once per node and graph.

    Why: a node's text is built from its fields and, for some types, the names of many neighbours;
    ``semantic_search`` shows it for every hit of every call, and the same nodes come back question
    after question."""
    skb = bundle.skb
    with _snippet_lock:
        texts = _snippets.get(skb)
        if texts is None:
            texts = _snippets[skb] = {}
    text = texts.get(key)
    if text is None:
        text = texts[key] = truncate(skb.node_text(key))
    return text


def question_for(question: str | None, getter: QuestionGetter | None) -> str | None:
    if question:
        return question
    return getter() if getter is not None else None


def label_hint(schema: GraphSchema) -> str:
    return "valid labels: " + ", ".join(schema.label_names())


def relation_hint(schema: GraphSchema) -> str:
    return "valid relationship types: " + ", ".join(schema.relation_names())
