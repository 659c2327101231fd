"""Our retrieval tools inside your own agent: `langchain.agents.create_agent` over `SKBToolkit` tools.

    # any OpenAI-compatible endpoint (a local server, vLLM, Ollama, a hosted API)
    python examples/toolkit_agent.py --index-dir .skb/hpo --base-url http://127.0.0.1:8765/v1 --model local
    OPENAI_API_KEY=... python examples/toolkit_agent.py --index-dir .skb/hpo --model gpt-4o-mini
    # offline: a scripted tool-calling model stands in for the LLM (what CI runs)
    python examples/toolkit_agent.py --index-dir .skb/hpo --scripted

The toolkit lists `ask` first (the whole retrieval agent: one call answers a question) and the
primitives after it (semantic_search, search_nodes, cypher) for follow-ups; `toolkit.instructions`
is a short system prompt that leads even a small model to call `ask` and reply with its top answer.
The agent loop, the tool calls and the tool messages are LangChain's own; only the model is scripted
with `--scripted`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_QUESTION = "Which genes are associated with Marfan syndrome?"


def scripted_model(question: str) -> Any:
    """A tool-calling chat model that plays a good agent's two turns: call `ask`, then reply with the
    top answer it read from the tool message."""
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

    from agent.fake_llm import ScriptedChatModel

    def reply(messages: list[BaseMessage]) -> AIMessage:
        result = next(m for m in reversed(messages) if isinstance(m, ToolMessage))
        return AIMessage(json.loads(str(result.content))["top_answer"])

    call = AIMessage("", tool_calls=[{"name": "ask", "args": {"question": question}, "id": "call-1"}])
    return ScriptedChatModel([call, reply])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index-dir", type=Path, default=Path(".skb/hpo"))
    parser.add_argument("--question", default=DEFAULT_QUESTION)
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"), help="OpenAI-compatible endpoint")
    parser.add_argument("--model", default="gpt-4o-mini")
    parser.add_argument("--scripted", action="store_true", help="a scripted model instead of an endpoint")
    args = parser.parse_args(argv)
    if not (args.index_dir / "manifest.json").is_file():
        print(
            f"error: {args.index_dir} is not an index (no manifest.json); build one with `skb index`", file=sys.stderr
        )
        return 2
    if not args.scripted and not (args.base_url or os.environ.get("OPENAI_API_KEY")):
        print(
            "error: no model: pass --base-url URL (any OpenAI-compatible endpoint), set OPENAI_API_KEY, "
            "or use --scripted",
            file=sys.stderr,
        )
        return 2

    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, ToolMessage

    from agent import SKBToolkit

    if args.scripted:
        model: Any = scripted_model(args.question)
    else:
        from langchain_openai import ChatOpenAI
        from pydantic import SecretStr

        key = os.environ.get("OPENAI_API_KEY") or "none"  # local endpoints take any key
        model = ChatOpenAI(model=args.model, base_url=args.base_url, api_key=SecretStr(key), temperature=0)

    with SKBToolkit(args.index_dir) as toolkit:
        tools = toolkit.get_tools()
        print("tools:", [t.name for t in tools])
        agent = create_agent(model, tools, system_prompt=toolkit.instructions)
        state = agent.invoke({"messages": [{"role": "user", "content": args.question}]}, {"recursion_limit": 12})
    for message in state["messages"]:
        if isinstance(message, AIMessage) and message.tool_calls:
            print("tool call:", ", ".join(f"{c['name']}({json.dumps(c['args'])})" for c in message.tool_calls))
        elif isinstance(message, ToolMessage):
            print(f"{message.name} ->", str(message.content)[:200])
    print("answer:", state["messages"][-1].content)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
