"""A rebuild swapped in while `SKBToolkit.answer` runs a question (another thread of the server following it): the
question is asked again on the new build and answered without an error, from that build alone."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler

import graphs.bundle as bundle_module
from agent.api import ask
from agent.config import AgentConfig
from agent.serving.toolkit import SKBToolkit
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle

QUESTION = "Which genes are associated with Marfan syndrome?"


class RebuildOnFirstTool(BaseCallbackHandler):
    """On the first tool call of the first run: swap a rebuild in, and let another (unpinned) thread follow it,
    as a concurrent request of the same replica would."""

    def __init__(self, skb: Any, bundle: IndexBundle) -> None:
        self.skb, self.bundle, self.tool_calls, self.rebuilt = skb, bundle, 0, False

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> None:
        self.tool_calls += 1
        if self.rebuilt:
            return
        self.rebuilt = True
        build_index(self.skb, self.bundle.index_dir, IndexConfig(dataset="hpo"))
        follower = threading.Thread(target=lambda: self.bundle.manifest)
        follower.start()
        follower.join()


def test_a_question_that_raced_a_rebuild_is_asked_again_on_the_new_build(hpo_mini_skb: Any, tmp_path: Path) -> None:
    index_dir = tmp_path / "index"
    build_index(hpo_mini_skb, index_dir, IndexConfig(dataset="hpo"))
    with IndexBundle.open(index_dir) as bundle:
        first = bundle.manifest.generation
        rebuild = RebuildOnFirstTool(hpo_mini_skb, bundle)
        toolkit = SKBToolkit(bundle, callbacks=[rebuild])
        text, result = toolkit.answer(QUESTION, k=5)
        assert rebuild.rebuilt and bundle.reloads == 1 and bundle.manifest.generation != first
        assert not result.degraded, result.degraded
        expected = ask(QUESTION, bundle=bundle, config=AgentConfig(k=5))
        assert [c.key for c in result.context] == [c.key for c in expected.context]
        assert '"top_answer"' in text


def _without(skb: Any, gone: str) -> Any:
    from graphs.skb.model import SKB

    out = SKB(skb.name, skb.node_types.values())
    out.profile = skb.profile
    for key, node in skb.nodes.items():
        if key != gone:
            out.add_node(node)
    for edge in skb.edges:
        if gone not in (edge.src, edge.dst):
            out.add_edge(edge)
    return out


@pytest.mark.parametrize("followed", [True, False], ids=["another-caller-followed", "only-swapped-on-disk"])
def test_a_retrieval_tool_call_that_raced_a_rebuild_runs_again_on_the_new_build(
    hpo_mini_skb: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, followed: bool
) -> None:
    """The toolkit's own tools (what an MCP client calls) read the vectors, then the graph: a rebuild that deletes the
    top hit, swapped in between and followed by another thread, must not leave the call reading the old vectors'
    keys in the new graph. The call runs again on the new build and answers from it alone; the memory the old build
    held goes back to the system once. Also when no other caller followed the swap (the old build's graph server is
    stopped right after it, so a call still reading the old build may have failed on its connection)."""
    given_back: list[bool] = []
    monkeypatch.setattr(bundle_module, "give_back_freed_memory", lambda: given_back.append(True) or True)
    index_dir = tmp_path / "index"
    build_index(hpo_mini_skb, index_dir, IndexConfig(dataset="hpo"))

    def hits(tool: Any) -> list[str]:
        message = tool.invoke({"type": "tool_call", "id": "1", "name": tool.name,
                               "args": {"text": "Marfan syndrome", "k": 5}})  # fmt: skip
        return [hit.key for hit in message.artifact.hits]

    with IndexBundle.open(index_dir) as bundle:
        tool = next(t for t in SKBToolkit(bundle).get_tools() if t.name == "semantic_search")
        before = hits(tool)
        gone = before[0]
        searched = {"calls": 0}
        first_hnsw = bundle.hnsw
        plain_search = first_hnsw.search

        def search_then_rebuild(*args: Any, **kwargs: Any) -> Any:
            found = plain_search(*args, **kwargs)
            searched["calls"] += 1
            if searched["calls"] == 1:  # the old build's hits are in hand: swap in a build without the top one
                build_index(_without(hpo_mini_skb, gone), index_dir, IndexConfig(dataset="hpo"))
                if followed:
                    follower = threading.Thread(target=lambda: bundle.manifest)
                    follower.start()
                    follower.join()
            return found

        first_hnsw.search = search_then_rebuild  # type: ignore[method-assign]
        after = hits(tool)
        assert searched["calls"] == 1 and bundle.reloads == 1 and given_back == [True]
        assert gone not in after and gone not in bundle.skb.nodes
        assert after == hits(tool)  # what a call on the new build alone returns
