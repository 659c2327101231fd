"""Multi-turn chat with the agent in-process: SQLite memory per thread, streamed steps and answer.

    python examples/chat_memory.py --index-dir .skb/hpo --thread demo

Run it twice with the same --thread: the second run continues the same conversation (the thread
lives in <index-dir>/threads.sqlite).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage

from agent.serving.langgraph_app import chat_graph


def turn(graph: Any, thread_id: str, question: str) -> str:
    """One chat turn: prints each finished step and the answer as it streams; returns the answer."""
    config = {"configurable": {"thread_id": thread_id}}
    answer = ""
    for mode, chunk in graph.stream(
        {"messages": [HumanMessage(question)]}, config, stream_mode=["updates", "messages"]
    ):
        if mode == "updates":
            print("  step:", ", ".join(chunk))
        else:
            message, metadata = chunk
            if metadata.get("langgraph_node") == "finalize" and isinstance(message, AIMessage | AIMessageChunk):
                answer += str(message.content)
                print(message.content, end="", flush=True)
    print()
    return answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index-dir", type=Path, default=Path(".skb/hpo"))
    parser.add_argument("--thread", default="demo")
    parser.add_argument(
        "questions",
        nargs="*",
        default=[
            "Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?",
            "Which genes are associated with Marfan syndrome?",
        ],
    )
    args = parser.parse_args()
    graph = chat_graph(args.index_dir)
    for question in args.questions:
        print(f"\n>>> {question}")
        turn(graph, args.thread, question)
    state = graph.get_state({"configurable": {"thread_id": args.thread}})
    print(f"\nthread {args.thread!r} now holds {len(state.values['messages'])} messages")


if __name__ == "__main__":
    main()
