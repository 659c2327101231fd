"""A scripted chat model: the test double for the LLM planner (fakes are allowed only for the LLM).

Each call pops the next scripted response: an AIMessage, a callable that builds one from the
messages it was given (to echo keys a tool returned), or an exception instance to raise
(to exercise retry and error paths).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

ScriptedResponse = AIMessage | Callable[[list[BaseMessage]], AIMessage] | BaseException


class ScriptExhaustedError(AssertionError):
    """The model was called more often than the test scripted."""


class ScriptedChatModel(BaseChatModel):
    """Plays back ``responses`` in order; records every prompt in ``calls`` and bound tools in ``bound_tools``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    responses: list[Any] = Field(default_factory=list)
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    bound_tools: list[dict[str, Any]] = Field(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _index: int = PrivateAttr(default=0)

    def __init__(self, responses: Sequence[ScriptedResponse] = (), **kwargs: Any) -> None:
        super().__init__(responses=list(responses), **kwargs)  # type: ignore[call-arg]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def remaining(self) -> int:
        return len(self.responses) - self._index

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with self._lock:
            self.calls.append(list(messages))
            if self._index >= len(self.responses):
                raise ScriptExhaustedError(f"ScriptedChatModel called {self._index + 1} times; only {len(self.responses)} scripted")
            item = self.responses[self._index]
            self._index += 1
        if isinstance(item, BaseException):
            raise item
        message = item(list(messages)) if callable(item) else item
        if not isinstance(message, AIMessage):
            raise TypeError(f"scripted response must be an AIMessage, got {type(message).__name__}")
        return ChatResult(generations=[ChatGeneration(message=message.model_copy())])

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        self.bound_tools = [convert_to_openai_tool(t) for t in tools]
        return self.bind(tools=self.bound_tools, **kwargs)
