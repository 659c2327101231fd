"""SKBRetriever: LangChain's standard retriever tests, then the mapping, overrides, callbacks and the example,
on real indexes (hpo_mini, and a MetaQA-like KB with other labels and relations)."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda
from langchain_tests.integration_tests import RetrieversIntegrationTests

from agent import AgentConfig, SKBRetriever, ask
from agent.tracing.tracer import LocalTracer, TraceStore
from graphs.errors import ConfigError, IndexNotFoundError
from tests.paths import REPO

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

QUESTION = "Which genes are associated with Marfan syndrome?"
METAQA = REPO / "tests" / "fixtures" / "metaqa_mini" / "kb.txt"


@pytest.fixture(scope="module")
def metaqa_bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexBundle]:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle
    from graphs.loaders import load_dataset

    index_dir = tmp_path_factory.mktemp("metaqa_mini_retriever") / "index"
    build_index(load_dataset("metaqa", METAQA), index_dir, IndexConfig(dataset="metaqa"))
    handle = IndexBundle.open(index_dir)
    yield handle
    handle.close()


# -- LangChain's standard tests (langchain-tests) ------------------------------------------------


class TestAgentModeStandard(RetrieversIntegrationTests):
    """The agent mode; ``k`` is the seed count, ``k_prime=0`` so exactly ``k`` Documents come back."""

    _bundle: Any = None

    @pytest.fixture(autouse=True)
    def _open(self, hpo_bundle: IndexBundle) -> None:
        type(self)._bundle = hpo_bundle

    @property
    def retriever_constructor(self) -> type[SKBRetriever]:
        return SKBRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"bundle": self._bundle, "k_prime": 0}

    @property
    def retriever_query_example(self) -> str:
        return QUESTION


@pytest.mark.integration
class TestSearchModeStandardOtherLabels(RetrieversIntegrationTests):
    """The hybrid search mode on a graph whose labels and relations are not HPO's."""

    _bundle: Any = None

    @pytest.fixture(autouse=True)
    def _open(self, metaqa_bundle: IndexBundle) -> None:
        type(self)._bundle = metaqa_bundle

    @property
    def retriever_constructor(self) -> type[SKBRetriever]:
        return SKBRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"bundle": self._bundle, "mode": "hybrid"}

    @property
    def retriever_query_example(self) -> str:
        return "a movie directed by Ada Quill"


# -- the Document mapping --------------------------------------------------------------------------


def test_documents_are_the_agent_context_with_text_and_metadata(hpo_bundle: IndexBundle) -> None:
    config = AgentConfig(k=5, k_prime=0, policy="never")
    result = ask(QUESTION, bundle=hpo_bundle, config=config)
    docs = SKBRetriever(bundle=hpo_bundle, config=config).invoke(QUESTION)
    assert [d.metadata["key"] for d in docs] == [item.key for item in result.context]
    assert docs[0].metadata["key"] == "FBN1"
    for doc, item in zip(docs, result.context, strict=True):
        meta = doc.metadata
        assert doc.id == item.key
        assert doc.page_content == hpo_bundle.skb.node_text(item.key) and doc.page_content
        assert (meta["label"], meta["name"], meta["rank"], meta["origin"]) == (item.label, item.name, item.rank, "seed")
        assert meta["score"] == pytest.approx(item.score)
        assert meta["provenance"] == [p.model_dump() for p in item.provenance] and meta["provenance"]
        assert {p["tool"] for p in meta["provenance"]} <= {"semantic_search", "search_nodes", "cypher", "finish"}
        assert meta["mode"] == "agent"
    assert [d.metadata["rank"] for d in docs] == list(range(1, len(docs) + 1))


def test_sage_neighbours_follow_the_seeds_with_their_origin(hpo_bundle: IndexBundle) -> None:
    question = "Which skull phenotype is craniosynostosis?"  # phenotypes around a phenotype: SAGE has neighbours
    docs = SKBRetriever(bundle=hpo_bundle, k=2, k_prime=3, policy="always").invoke(question)
    origins = [d.metadata["origin"] for d in docs]
    assert origins[:2] == ["seed", "seed"] and origins[2:] and set(origins[2:]) == {"sage"}
    assert len(docs) <= 5
    assert all(d.metadata["provenance"][-1]["tool"] == "sage_expand" for d in docs[2:])
    never = SKBRetriever(bundle=hpo_bundle, k=2, k_prime=3, policy="never").invoke(question)
    assert [d.metadata["origin"] for d in never] == ["seed", "seed"]


@pytest.mark.integration
def test_search_modes_return_k_hits_of_the_label(metaqa_bundle: IndexBundle) -> None:
    retriever = SKBRetriever(bundle=metaqa_bundle, mode="bm25", k=3)
    expected = metaqa_bundle.search("Ada Quill", mode="bm25", k=3)
    docs = retriever.invoke("Ada Quill")
    assert [d.metadata["key"] for d in docs] == [h.key for h in expected]
    assert docs[0].metadata["provenance"] == [{"tool": "bm25", "step": 0, "query": "Ada Quill"}]
    labels = {h.label for h in metaqa_bundle.search("Harbor Lights", mode="vss", k=20)}
    assert len(labels) > 1  # so restricting to one label is a real filter
    label = min(labels)
    typed = retriever.invoke("Harbor Lights", mode="vss", label=label, k=4)
    assert typed and {d.metadata["label"] for d in typed} == {label}
    assert all(d.metadata["mode"] == "vss" for d in typed)


@pytest.mark.integration
def test_agent_mode_on_other_labels(metaqa_bundle: IndexBundle) -> None:
    docs = SKBRetriever(bundle=metaqa_bundle, k=2, k_prime=0, policy="never").invoke("which movies did [Ada Quill] direct")
    assert {d.metadata["key"] for d in docs} == {"Harbor Lights", "Salt Roads"}
    assert all(d.page_content == metaqa_bundle.skb.node_text(d.metadata["key"]) for d in docs)


# -- overrides: keywords, configurable, chains, batch, async ---------------------------------------


def test_configurable_reaches_the_retriever_inside_a_chain_and_keywords_win(hpo_bundle: IndexBundle) -> None:
    retriever = SKBRetriever(bundle=hpo_bundle, k=5, k_prime=0)
    assert len(retriever.invoke(QUESTION, {"configurable": {"k": 2}})) == 2
    chain = RunnableLambda(lambda q: q) | retriever
    assert len(chain.invoke(QUESTION, {"configurable": {"k": 3, "thread_id": "ignored"}})) == 3
    hits = chain.invoke("aortic root", {"configurable": {"mode": "bm25", "k": 4}})
    assert len(hits) == 4 and hits[0].metadata["mode"] == "bm25"
    assert len(retriever.invoke(QUESTION, {"configurable": {"k": 2}}, k=1)) == 1
    assert len(retriever.invoke(QUESTION)) == 5  # an override lasts one call


def test_batch_and_async_match_invoke(hpo_bundle: IndexBundle) -> None:
    retriever = SKBRetriever(bundle=hpo_bundle, k=3, k_prime=0)
    questions = [QUESTION, "Which disease is characterized by craniosynostosis and syndactyly?"]
    one_by_one = [[d.metadata["key"] for d in retriever.invoke(q)] for q in questions]
    assert [[d.metadata["key"] for d in docs] for docs in retriever.batch(questions)] == one_by_one

    async def both() -> tuple[list[Document], list[list[Document]]]:
        return await retriever.ainvoke(questions[0]), await retriever.abatch(questions)

    single, batched = asyncio.run(both())
    assert [d.metadata["key"] for d in single] == one_by_one[0]
    assert [[d.metadata["key"] for d in docs] for docs in batched] == one_by_one
    searched = asyncio.run(retriever.ainvoke("aortic root", mode="hybrid", k=2))
    assert [d.metadata["key"] for d in searched] == [h.key for h in hpo_bundle.search("aortic root", k=2)]


# -- callbacks and the local tracer ----------------------------------------------------------------


class _Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.retrievers: list[tuple[UUID, UUID | None]] = []
        self.chains: list[tuple[str, UUID | None]] = []
        self.ended: list[int] = []

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: UUID, parent_run_id: UUID | None = None,
                           **kwargs: Any) -> None:
        self.retrievers.append((run_id, parent_run_id))

    def on_retriever_end(self, documents: Any, **kwargs: Any) -> None:
        self.ended.append(len(documents))

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                       **kwargs: Any) -> None:
        self.chains.append((str(kwargs.get("name") or ""), parent_run_id))


def test_callbacks_see_the_agent_runs_as_children_of_the_retriever_run(hpo_bundle: IndexBundle) -> None:
    recorder = _Recorder()
    docs = SKBRetriever(bundle=hpo_bundle, k=3, k_prime=0).invoke(QUESTION, {"callbacks": [recorder]})
    [(retriever_run, parent)] = recorder.retrievers
    assert parent is None and recorder.ended == [len(docs)]
    agent_runs = [name for name, parent_id in recorder.chains if parent_id == retriever_run]
    assert agent_runs == ["skb-agent"]
    names = {name for name, _ in recorder.chains}
    assert {"link_entities", "plan", "finalize"} <= names


def test_local_tracer_records_a_retriever_call_like_an_ask(
    hpo_bundle: IndexBundle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "traces.sqlite"
    monkeypatch.setenv("SKB_TRACE_DB", str(db))
    monkeypatch.delenv("SKB_TRACING", raising=False)
    retriever = SKBRetriever(bundle=hpo_bundle, k=3, k_prime=0, trace=True)
    docs = retriever.invoke(QUESTION)
    from agent.tracing.tracer import tracer_for

    tracer: LocalTracer = tracer_for(None)
    tracer.flush()
    store = TraceStore(db, read_only=True)
    [summary] = store.list_traces()
    assert summary.name == "SKBRetriever" and summary.status == "success" and summary.preview.startswith("Which")
    assert summary.tool_calls >= 1
    tree = store.get_tree(summary.id)
    assert tree.run_type == "retriever"
    [agent_run] = tree.child_runs
    assert agent_run.name == "skb-agent"
    assert [c.name for c in agent_run.child_runs][:2] == ["link_entities", "plan"]
    assert [d["metadata"]["key"] for d in tree.outputs["documents"]] == [d.metadata["key"] for d in docs]
    SKBRetriever(bundle=hpo_bundle, k=3, k_prime=0).invoke(QUESTION)  # trace off: nothing more recorded
    tracer.flush()
    assert len(store.list_traces()) == 1
    store.close()


# -- bad input: clear errors -----------------------------------------------------------------------


def test_bad_settings_are_clear_errors(hpo_bundle: IndexBundle, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown SKBRetriever setting.*kk.*AgentConfig setting"):
        SKBRetriever(bundle=hpo_bundle, kk=3)
    retriever = SKBRetriever(bundle=hpo_bundle)
    with pytest.raises(ConfigError, match="unknown retriever mode 'graph'; use one of agent, hybrid, vss, bm25"):
        retriever.invoke(QUESTION, mode="graph")
    with pytest.raises(ConfigError, match="k: Input should be greater than or equal to 1 .got 0"):
        retriever.invoke(QUESTION, k=0)
    with pytest.raises(ConfigError, match="invalid agent setting.*policy"):
        retriever.invoke(QUESTION, policy="sometimes")
    with pytest.raises(ConfigError, match="unknown node type 'Nope'"):
        retriever.invoke(QUESTION, mode="bm25", label="Nope")
    with pytest.raises(ConfigError, match="SKBRetriever needs an index"):
        SKBRetriever()
    with pytest.raises(IndexNotFoundError, match="no index at"):
        SKBRetriever(tmp_path / "missing")


def test_settings_by_section_reach_the_agent(hpo_bundle: IndexBundle) -> None:
    """A ``section.key`` name is an agent setting in the constructor, per call and in ``configurable`` (a typo is
    still an error), the same as its field name."""
    retriever = SKBRetriever(bundle=hpo_bundle, **{"rerank.top": 7})
    assert retriever.config.rerank_top == 7
    _, merged = retriever._prepare({"configurable": {"clause.candidates": 3, "thread_id": "t"}}, {})
    assert merged == {"clause.candidates": 3}
    *_, config = retriever._settings({"clause.candidates": 3})
    assert config.clause_candidates == 3 and config.rerank_top == 7
    with pytest.raises(ConfigError, match="unknown SKBRetriever setting.*clause.candidatez"):
        retriever.invoke(QUESTION, **{"clause.candidatez": 3})


def test_a_retriever_opened_from_a_directory_owns_and_closes_it(hpo_index_dir: Path) -> None:
    with SKBRetriever(hpo_index_dir, mode="bm25", k=2) as retriever:
        assert len(retriever.invoke("aortic root")) == 2
        bundle = retriever.bundle
    assert bundle._store is None  # closed (bm25 never opened the graph store either)


# -- the example runs (CI) ---------------------------------------------------------------------------


def test_example_chain_runs_offline(hpo_index_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(REPO / "examples"))
    try:
        example = importlib.import_module("retriever_chain")
    finally:
        sys.path.remove(str(REPO / "examples"))
    answer = example.main(["--index-dir", str(hpo_index_dir)])
    out = capsys.readouterr().out
    assert answer == "The best supported answer is [FBN1]."
    assert out.splitlines()[0].startswith("1 FBN1 Gene FBN1") and "answer: The best supported answer is [FBN1]." in out


def test_readme_block_runs(hpo_index_dir: Path) -> None:
    from tests.doc_blocks import run_block

    out = run_block("retriever", hpo_index_dir).splitlines()
    assert out == ["FBN1 seed Gene: FBN1", "3", "2"]


def test_overhead_benchmark_reports_equal_rankings(hpo_index_dir: Path) -> None:
    from evals.studies.retriever_overhead import measure

    report = measure(hpo_index_dir, [QUESTION, "Which disease is characterized by craniosynostosis?"], warmup=1)
    assert report["questions"] == 2 and len(report["passes"]) == 2
    assert all(p["rankings_differ"] == 0 and p["retriever_ms"]["p50"] > 0 for p in report["passes"])
