"""End to end on a tiny MetaQA-like KB: triples loader + profile, real index (FalkorDB, HNSW, MiniLM), offline agent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from agent import AgentConfig, ask
from graphs.loaders import load_dataset
from tests.paths import FIXTURES

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

FIXTURE = FIXTURES / "metaqa_mini" / "kb.txt"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexBundle]:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle

    index_dir = tmp_path_factory.mktemp("metaqa_mini") / "index"
    build_index(load_dataset("metaqa", FIXTURE), index_dir, IndexConfig(dataset="metaqa"))
    handle = IndexBundle.open(index_dir)
    yield handle
    handle.close()


def _keys(question: str, bundle: IndexBundle) -> list[str]:
    result = ask(question, bundle=bundle, config=AgentConfig(k=5, k_prime=0, policy="never"))
    return [item.key for item in result.context]


@pytest.mark.integration
def test_one_hop(bundle: IndexBundle) -> None:
    assert _keys("who directed [Harbor Lights]", bundle)[0] == "Ada Quill"


@pytest.mark.integration
def test_multi_answer_returns_every_end_node(bundle: IndexBundle) -> None:
    keys = _keys("which movies did [Ada Quill] direct", bundle)
    assert set(keys[:2]) == {"Harbor Lights", "Salt Roads"}


@pytest.mark.integration
def test_two_hop_excludes_the_topic(bundle: IndexBundle) -> None:
    keys = _keys("the actor [Cora Vance] co-starred with who", bundle)
    assert set(keys[:2]) == {"Dev Okafor", "Gus Hale"} and "Cora Vance" not in keys


@pytest.mark.integration
def test_three_hop_never_walks_back_through_the_topic(bundle: IndexBundle) -> None:
    # Harbor Lights shares Cora Vance with Night Ferry, directed by Dev Okafor; Harbor Lights' own
    # director (Ada Quill) is reachable only by walking back through the topic, so it is no answer.
    result = ask(
        "who directed the movies that share actors with [Harbor Lights]",
        bundle=bundle,
        config=AgentConfig(k=5, k_prime=0, policy="never"),
    )
    assert [i.key for i in result.context][:1] == ["Dev Okafor"]
    assert "Ada Quill" not in [i.key for i in result.context if i.origin == "seed"][:1]
    # the walk is one read-only cypher call per path, and finish
    tools = [p.tool for item in result.context[:1] for p in item.provenance]
    assert "cypher" in tools
    assert result.tool_calls <= 1 + 5  # paths walked (profile: paths_walked) + finish


@pytest.mark.integration
def test_a_name_in_two_roles_answers_along_either_relation(bundle: IndexBundle) -> None:
    # "Harbor Lights" is a Movie node that is also a tag of Night Ferry
    assert _keys("which movies are tagged [Harbor Lights]", bundle)[0] == "Night Ferry"
    # Dev Okafor acts and directs
    assert _keys("what films did [Dev Okafor] direct", bundle)[0] == "Night Ferry"


@pytest.mark.integration
def test_bracketed_mention_is_linked_alone_and_exactly(bundle: IndexBundle) -> None:
    from agent.linking.entities import EntityLinker

    linker = EntityLinker(bundle)
    # "Drama" and "English" are node names too, but only the bracketed topic is linked
    linked = linker.link("is [Salt Roads] a Drama in English")
    assert [(e.key, e.method, e.mention) for e in linked] == [("Salt Roads", "exact", "Salt Roads")]
    # without brackets the whole question is linked as before
    keys = {e.key for e in linker.link("is Salt Roads a Drama in English")}
    assert {"Salt Roads", "Drama", "English"} <= keys
    # a bracket that is no exact name falls back to the usual stages on the bracket text only
    fuzzy = linker.link("who directed [salt road]")
    assert [e.key for e in fuzzy][:1] == ["Salt Roads"]
