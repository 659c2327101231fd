"""The agent as a LangChain retriever feeding a prompt and a chat model (a classic RAG chain).

    python examples/retriever_chain.py --index-dir .skb/hpo
    python examples/retriever_chain.py --index-dir .skb/hpo --openai-model gpt-4o-mini   # a real model

`SKBRetriever` is an ordinary `BaseRetriever`: `retriever | format_docs` is the context of any chain,
`create_retrieval_chain`, `EnsembleRetriever`... Each Document's metadata keeps the agent's key, label,
score, rank, origin and provenance. Without `--openai-model` the chat model is the project's scripted
test double (`agent.fake_llm.ScriptedChatModel`) answering with the first node the prompt cites, so the
example runs offline (CI runs it).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

from agent import SKBRetriever
from agent.fake_llm import ScriptedChatModel

QUESTION = "Which genes are associated with Marfan syndrome?"

PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer from the context only. Cite node keys in square brackets."),
        ("human", "Context:\n{context}\n\nQuestion: {question}"),
    ]
)


def format_docs(docs: Sequence[Document]) -> str:
    """One line per Document: its key (for citations), its rank and origin, its text."""
    return "\n".join(
        f"[{d.metadata['key']}] (rank {d.metadata['rank']}, {d.metadata['origin']}) {d.page_content}" for d in docs
    )


def offline_model(questions: int = 1) -> BaseChatModel:
    """A chat model that needs no network: cites the first node of the context it is given."""

    def reply(messages: list[BaseMessage]) -> AIMessage:
        cited = re.search(r"^\[([^\]]+)\]", str(messages[-1].content), re.MULTILINE)
        return AIMessage(f"The best supported answer is [{cited.group(1)}]." if cited else "The context is empty.")

    return ScriptedChatModel([reply] * questions)


def build_chain(retriever: SKBRetriever, model: BaseChatModel) -> Any:
    return {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | model | StrOutputParser()


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index-dir", type=Path, default=Path(".skb/hpo"))
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--openai-model", help="answer with this model (OPENAI_API_KEY, OPENAI_BASE_URL)")
    args = parser.parse_args(argv)
    if args.openai_model:
        from langchain_openai import ChatOpenAI

        model: BaseChatModel = ChatOpenAI(model=args.openai_model)
    else:
        model = offline_model()
    with SKBRetriever(args.index_dir, k=5, k_prime=0) as retriever:
        for doc in retriever.invoke(args.question):
            meta = doc.metadata
            print(meta["rank"], meta["key"], meta["label"], meta["name"], round(meta["score"], 3),
                  [p["tool"] for p in meta["provenance"]])
        answer: str = build_chain(retriever, model).invoke(args.question)
    print("answer:", answer)
    return answer


if __name__ == "__main__":
    main()
