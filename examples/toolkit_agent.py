"""Reuse the retrieval tools in your own LangChain/LangGraph agent.

    python examples/toolkit_agent.py --index-dir .skb/hpo

`SKBToolkit(index_dir).get_tools()` returns ordinary LangChain tools (semantic_search,
search_nodes, cypher, ask). Bind them to any tool-calling chat model, e.g.
`create_react_agent(ChatOpenAI(model="gpt-4o-mini"), tools)`; here they are called directly so
the example runs offline.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agent import SKBToolkit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index-dir", type=Path, default=Path(".skb/hpo"))
    args = parser.parse_args()
    with SKBToolkit(args.index_dir) as toolkit:
        tools = {t.name: t for t in toolkit.get_tools()}
        print("tools:", ", ".join(tools))
        hits = json.loads(tools["semantic_search"].invoke({"text": "aortic root aneurysm", "k": 3}))["hits"]
        print("semantic_search:", [h["key"] for h in hits])
        triples = json.loads(tools["search_nodes"].invoke({"keys": [hits[0]["key"]], "direction": "both", "limit": 5}))[
            "triples"
        ]
        print("search_nodes:", [(t["src"], t["rel"], t["dst"]) for t in triples])
        result = json.loads(tools["ask"].invoke({"question": "Which genes are associated with Marfan syndrome?"}))
        print("ask:", [item["key"] for item in result["context"][:5]])


if __name__ == "__main__":
    main()
