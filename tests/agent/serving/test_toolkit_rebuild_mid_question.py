"""A rebuild swapped in while `SKBToolkit.answer` runs a question (another thread of the server following it): the
question is asked again on the new build and answered without an error, from that build alone."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

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
