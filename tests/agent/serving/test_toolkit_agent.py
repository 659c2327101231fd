"""Our tools inside someone else's agent (issue 30): model-facing texts are generic, `ask` comes first and
answers compactly within its token budget, and a real LangChain agent (`create_agent`) runs over the
tools -- with a scripted tool-calling model, through the example (warnings as errors) and against the
local OpenAI-compatible HTTP stub. Real index fixtures; only the model is fake."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from mcp import Client

from agent.config import AgentConfig
from agent.serving.answers import NOTE
from agent.serving.mcp import INSTRUCTIONS, INSTRUCTIONS_NO_ASK, build_server
from agent.serving.toolkit import AGENT_INSTRUCTIONS, ASK_DESCRIPTION, FOLLOW_UP_PREFIX, SKBToolkit, tool_input_schema
from tests.openai_stub import Stub, completion
from tests.paths import FIXTURES, REPO
from tools import make_tools
from tools.results import estimate_tokens

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

MARFAN = "Which genes are associated with Marfan syndrome?"
APERT = "Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?"

#: Words of the datasets we benchmark on. None may appear in a text a model reads about our tools:
#: the tools must read as tools over *any* typed graph.
DOMAIN_WORDS = (
    "hpo", "human phenotype", "phenotype", "phenotypes", "disease", "diseases", "gene", "genes", "syndrome",
    "symptom", "symptoms", "patient", "patients", "clinical", "medical", "omim", "orpha", "orphanet", "mondo",
    "metaqa", "movie", "movies", "film", "films", "actor", "actors", "director", "directed", "genre", "starred",
    "imdb", "stark", "amazon", "product", "products", "mag", "paper", "papers", "author", "authors",
    "drug", "drugs", "protein", "proteins", "marfan", "apert", "fbn1",
)  # fmt: skip
_DOMAIN = re.compile(r"\b(" + "|".join(re.escape(w) for w in DOMAIN_WORDS) + r")\b", re.IGNORECASE)


def domain_words_in(text: str) -> list[str]:
    return sorted({m.group(0).lower() for m in _DOMAIN.finditer(text)})


def _tool_texts(tools: list[BaseTool]) -> dict[str, str]:
    return {t.name: t.description + "\n" + json.dumps(tool_input_schema(t)) for t in tools}


def _mcp_texts(toolkit: SKBToolkit) -> dict[str, str]:
    async def main() -> dict[str, str]:
        async with Client(build_server(toolkit)) as client:
            listed = (await client.list_tools()).tools
            texts = {f"mcp:{t.name}": (t.description or "") + "\n" + json.dumps(t.input_schema) for t in listed}
            texts["mcp:instructions"] = client.instructions or ""
            return texts

    return asyncio.run(main())


def test_the_domain_word_check_can_fail() -> None:
    # the old semantic_search description, and words inside JSON schemas, are caught; substrings are not
    assert domain_words_in("Use for descriptions, phenotypes or names that were not linked yet.") == ["phenotypes"]
    assert domain_words_in('{"description": "a Gene key"}') == ["gene"]
    assert domain_words_in("general, generic, magnitude, moviegoer, paperwork") == []


def test_every_model_facing_tool_text_is_generic(hpo_bundle: IndexBundle) -> None:
    texts: dict[str, str] = {}
    texts.update(_tool_texts(make_tools(hpo_bundle)))  # our own loop's tools, finish included
    with_ask = SKBToolkit(hpo_bundle, callbacks=[])
    texts.update({f"toolkit:{k}": v for k, v in _tool_texts(with_ask.get_tools()).items()})
    texts.update(
        {
            f"toolkit-no-ask:{k}": v
            for k, v in _tool_texts(SKBToolkit(hpo_bundle, include_ask=False).get_tools()).items()
        }
    )
    texts.update(_mcp_texts(with_ask))
    texts.update(
        {"instructions": with_ask.instructions, "mcp-instructions": INSTRUCTIONS, "mcp-no-ask": INSTRUCTIONS_NO_ASK}
    )
    texts["ask-note"] = NOTE
    assert {"semantic_search", "search_nodes", "cypher", "finish", "toolkit:ask", "mcp:ask", "mcp:instructions"} <= set(
        texts
    )
    found = {name: words for name, text in texts.items() if (words := domain_words_in(text))}
    assert found == {}, f"domain words in model-facing tool texts: {found}"


def test_ask_first_and_the_primitives_marked_as_follow_ups(hpo_bundle: IndexBundle) -> None:
    toolkit = SKBToolkit(hpo_bundle, callbacks=[])
    tools = toolkit.get_tools()
    assert [t.name for t in tools] == ["ask", "semantic_search", "search_nodes", "cypher"]
    assert tools[0].description == ASK_DESCRIPTION and "whole question" in ASK_DESCRIPTION
    assert all(t.description.startswith(FOLLOW_UP_PREFIX) for t in tools[1:])
    assert toolkit.instructions == AGENT_INSTRUCTIONS and "ask" in AGENT_INSTRUCTIONS
    # without ask there is nothing to follow up on: the primitives read as they do in our own loop
    alone = SKBToolkit(hpo_bundle, include_ask=False).get_tools()
    own = {t.name: t.description for t in make_tools(hpo_bundle)}
    assert [t.name for t in alone] == ["semantic_search", "search_nodes", "cypher"]
    assert all(t.description == own[t.name] for t in alone)
    assert SKBToolkit(hpo_bundle, include_ask=False).instructions == ""


def _ask(toolkit: SKBToolkit, **args: Any) -> ToolMessage:
    tool = {t.name: t for t in toolkit.get_tools()}["ask"]
    message = tool.invoke({"type": "tool_call", "id": "1", "name": "ask", "args": args})
    assert isinstance(message, ToolMessage)
    return message


def test_ask_answers_compactly_with_evidence_and_keeps_the_full_result(hpo_bundle: IndexBundle) -> None:
    toolkit = SKBToolkit(hpo_bundle, callbacks=[])
    message = _ask(toolkit, question=APERT)
    compact = json.loads(str(message.content))
    assert compact["top_answer"] == "Apert syndrome" == compact["answers"][0]["name"]
    top = compact["answers"][0]
    assert top["key"] in {"OMIM:101200", "ORPHA:87"} and top["label"] == "Disease" and top["rank"] == 1
    # the evidence names the question's entities one edge away, with the relation type
    assert top["evidence"].startswith("HAS_PHENOTYPE: ") and "Proptosis" in top["evidence"]
    assert 1 <= len(compact["answers"]) <= 5 and compact["more"] == len(message.artifact["context"]) - len(
        compact["answers"]
    )
    assert estimate_tokens(str(message.content)) <= toolkit.ask_output_tokens
    # the whole AgentResult is the artifact (what MCP hands out as structured content)
    assert message.artifact["question"] == APERT and message.artifact["context"][0]["key"] == top["key"]
    assert "provenance" not in str(message.content)


def test_ask_budget_and_full_context_on_request(hpo_bundle: IndexBundle) -> None:
    roomy = json.loads(str(_ask(SKBToolkit(hpo_bundle, callbacks=[]), question=APERT).content))
    tight = SKBToolkit(hpo_bundle, callbacks=[], ask_output_tokens=240)  # real tokens: one answer costs ~160
    text = str(_ask(tight, question=APERT).content)
    answers = json.loads(text)["answers"]
    assert estimate_tokens(text) <= 240 and 1 <= len(answers) < len(roomy["answers"])
    assert answers == roomy["answers"][: len(answers)]
    # a k below the default lists fewer answers
    assert len(json.loads(str(_ask(SKBToolkit(hpo_bundle, callbacks=[]), question=APERT, k=2).content))["answers"]) <= 2
    # detail=full: the whole ranking within the tools' budget
    budget = 300
    full_kit = SKBToolkit(hpo_bundle, callbacks=[], agent_config=AgentConfig(tool_output_tokens=budget))
    full = _ask(full_kit, question=APERT, detail="full")
    body = json.loads(str(full.content))
    assert estimate_tokens(str(full.content)) <= budget and body["target_type"] == "Disease"
    assert body["context"][0]["key"] in {"OMIM:101200", "ORPHA:87"} and {"score", "origin", "tools"} <= set(
        body["context"][0]
    )
    assert (
        body["omitted"] == len(full.artifact["context"]) - len(body["context"]) > 0 and "token budget" in body["note"]
    )


def test_a_model_sending_null_for_optional_arguments_gets_the_defaults(hpo_bundle: IndexBundle) -> None:
    tool = {t.name: t for t in SKBToolkit(hpo_bundle, callbacks=[]).get_tools()}["semantic_search"]
    message = tool.invoke(
        {
            "type": "tool_call",
            "id": "1",
            "name": "semantic_search",
            "args": {"text": "Proptosis", "k": None, "label": None},
        }
    )
    # the default k (20) was used: the typed result holds them all (the text shows what fits its token budget)
    assert len(message.artifact.hits) == min(20, len(hpo_bundle.skb.nodes))
    with pytest.raises(Exception, match="text"):  # a required argument stays required
        tool.invoke({"text": None})


# -- a graph with other labels and relation names ----------------------------------------------------

METAQA_MINI = FIXTURES / "metaqa_mini" / "kb.txt"


@pytest.fixture(scope="module")
def other_bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexBundle]:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle
    from graphs.loaders import load_dataset

    index_dir = tmp_path_factory.mktemp("other_graph") / "index"
    build_index(load_dataset("metaqa", METAQA_MINI), index_dir, IndexConfig(dataset="metaqa"))
    handle = IndexBundle.open(index_dir)
    yield handle
    handle.close()


@pytest.mark.integration
def test_compact_answers_on_a_graph_with_other_labels_and_relations(other_bundle: IndexBundle) -> None:
    toolkit = SKBToolkit(other_bundle, callbacks=[])
    tools = toolkit.get_tools()
    assert tools[0].name == "ask"
    message = _ask(toolkit, question="which movies did [Ada Quill] direct")
    compact = json.loads(str(message.content))
    names = {a["name"] for a in compact["answers"][:2]}
    assert names == {"Harbor Lights", "Salt Roads"} and compact["top_answer"] in names
    rels = set(other_bundle.schema().relation_names())
    evidence = compact["answers"][0]["evidence"]
    assert evidence.split(":")[0] in rels and "Ada Quill" in evidence  # this graph's relation and entity
    assert estimate_tokens(str(message.content)) <= toolkit.ask_output_tokens


# -- a real LangChain agent over the tools -----------------------------------------------------------


def test_create_agent_with_a_scripted_tool_calling_model(hpo_bundle: IndexBundle) -> None:
    from langchain.agents import create_agent

    sys.path.insert(0, str(REPO / "examples"))
    try:
        from toolkit_agent import scripted_model
    finally:
        sys.path.remove(str(REPO / "examples"))
    model = scripted_model(MARFAN)
    toolkit = SKBToolkit(hpo_bundle, callbacks=[])
    agent = create_agent(model, toolkit.get_tools(), system_prompt=toolkit.instructions)
    state = agent.invoke({"messages": [{"role": "user", "content": MARFAN}]})
    kinds = [type(m).__name__ for m in state["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    tool_message = state["messages"][2]
    assert tool_message.name == "ask" and tool_message.artifact["context"][0]["key"] == "FBN1"
    assert state["messages"][-1].content == "FBN1"
    # the model was offered ask first, with the system prompt
    assert model.bound_tools[0]["function"]["name"] == "ask"
    assert model.calls[0][0].content == toolkit.instructions


def test_the_example_runs_an_agent_with_warnings_as_errors(
    hpo_index_dir: Path, hpo_bundle: IndexBundle, tmp_path: Path
) -> None:
    env = dict(os.environ)
    env.update(
        {
            "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
            "SKB_TRACE_DB": str(tmp_path / "traces.sqlite"),
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    example = str(REPO / "examples" / "toolkit_agent.py")
    run = subprocess.run(
        [sys.executable, "-W", "error", example, "--index-dir", str(hpo_index_dir), "--scripted"],
        check=False,
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0] == "tools: ['ask', 'semantic_search', 'search_nodes', 'cypher']"
    assert lines[1].startswith("tool call: ask(") and lines[-1] == "answer: FBN1"
    # no model at all: a clear error and exit code 2
    bad = subprocess.run(
        [sys.executable, example, "--index-dir", str(hpo_index_dir)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert bad.returncode == 2 and "--base-url" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run(
        [sys.executable, example, "--index-dir", str(tmp_path), "--scripted"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )
    assert bad.returncode == 2 and "not an index" in bad.stderr


def test_readme_and_examples_use_no_deprecated_agent_api() -> None:
    texts = {p.name: p.read_text() for p in [REPO / "README.md", *sorted((REPO / "examples").glob("*.py"))]}
    deprecated = re.compile(r"from langgraph\.prebuilt import create_react_agent|create_react_agent\(|initialize_agent\(")
    assert {name for name, text in texts.items() if deprecated.search(text)} == set()
    assert "create_agent(" in texts["README.md"] and "create_agent(" in texts["toolkit_agent.py"]


def _agent_reply(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The stub plays a good model: call ask with the user's question, then answer with top_answer."""
    messages = request["messages"]
    tool_results = [m for m in messages if m["role"] == "tool"]
    if not tool_results:
        question = next(m["content"] for m in messages if m["role"] == "user")
        return completion(calls=[("ask", json.dumps({"question": question}))], tokens=321)
    return completion(content="It is " + json.loads(tool_results[-1]["content"])["top_answer"] + ".", tokens=654)


def test_example_and_eval_against_an_openai_compatible_endpoint(
    openai_stub: Stub,
    hpo_index_dir: Path,
    hpo_bundle: IndexBundle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SKB_TRACE_DB", str(tmp_path / "traces.sqlite"))
    sys.path.insert(0, str(REPO / "examples"))
    try:
        from toolkit_agent import main as example_main
    finally:
        sys.path.remove(str(REPO / "examples"))
    openai_stub.replies = [_agent_reply, _agent_reply]
    assert (
        example_main(
            ["--index-dir", str(hpo_index_dir), "--base-url", openai_stub.url, "--model", "stub", "--question", MARFAN]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines()[-1] == "answer: It is FBN1."
    first = openai_stub.requests[0]["body"]
    assert first["tools"][0]["function"]["name"] == "ask"
    assert first["messages"][0] == {"role": "system", "content": AGENT_INSTRUCTIONS}

    # the measuring script: first tool, top-1 named in the final answer, tokens from the endpoint's usage
    from evals.studies.toolkit_agent import main as eval_main

    bench = tmp_path / "bench.csv"
    with bench.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "query", "answer_ids", "style"])
        writer.writerow(["0", MARFAN, '["FBN1"]', "names"])
        writer.writerow(["1", APERT, '["OMIM:101200", "ORPHA:87"]', "names"])
        writer.writerow(["2", "skipped: another style", "[]", "definitions"])
    openai_stub.replies = [_agent_reply] * 4
    out = tmp_path / "run"
    args = ["--index-dir", str(hpo_index_dir), "--bench", str(bench), "--style", "names", "-n", "5"]
    assert (
        eval_main(
            [*args, "--base-url", openai_stub.url, "--model", "stub", "--system-prompt", "toolkit", "--out", str(out)]
        )
        == 0
    )
    rows = [json.loads(line) for line in (out / "questions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["0", "1"] and all(r["first_tool"] == "ask" for r in rows)
    assert rows[0]["ask_top1"] == {"key": "FBN1", "name": "FBN1"} and rows[0]["final_names_ask_top1"]
    assert rows[0]["prompt_tokens"] == 321 + 654 and rows[0]["llm_calls"] == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ask_first"] == 2 and summary["final_names_ask_top1"] == 2 and summary["ask_top1_correct"] == 2
    assert eval_main([*args, "--bench", str(tmp_path / "missing.csv"), "--out", str(out)]) == 2
