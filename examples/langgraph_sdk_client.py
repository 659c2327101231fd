"""Chat with the agent served by `langgraph dev` (LangGraph Server) through the LangGraph SDK.

    SKB_INDEX_DIR=.skb/hpo langgraph dev --no-browser --port 2024     # in the repo root
    python examples/langgraph_sdk_client.py --url http://127.0.0.1:2024

Two turns in one thread (the server keeps the conversation), with step updates and the answer
streamed as it is produced.
"""

from __future__ import annotations

import argparse
from typing import Any

from langgraph_sdk import get_sync_client

ASSISTANT = "skb_agent"  # the graph id in langgraph.json


def chat(url: str, questions: list[str]) -> list[dict[str, Any]]:
    """Ask ``questions`` in one new thread; returns the thread's final messages."""
    client = get_sync_client(url=url)
    thread = client.threads.create()
    for question in questions:
        print(f"\n>>> {question}")
        for part in client.runs.stream(
            thread["thread_id"],
            ASSISTANT,
            input={"messages": [{"role": "user", "content": question}]},
            stream_mode=["updates", "messages-tuple"],
        ):
            if part.event == "updates":
                print("  step:", ", ".join(part.data))
            elif part.event == "messages":
                message, metadata = part.data
                if metadata.get("langgraph_node") == "finalize" and message.get("type", "").startswith("ai"):
                    print(message.get("content", ""), end="", flush=True)
            elif part.event == "error":
                raise RuntimeError(f"the run failed on the server: {part.data}")
        print()
    state = client.threads.get_state(thread["thread_id"])
    messages: list[dict[str, Any]] = state["values"]["messages"]
    print(f"\nthread {thread['thread_id']} holds {len(messages)} messages")
    return messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:2024")
    parser.add_argument(
        "questions",
        nargs="*",
        default=[
            "Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?",
            "Which genes are associated with Marfan syndrome?",
        ],
    )
    args = parser.parse_args()
    chat(args.url, args.questions)


if __name__ == "__main__":
    main()
