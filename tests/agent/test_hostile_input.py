"""Hostile and bad input through every entry point: ``ask``, ``IndexBundle.search`` and each tool.

Empty, huge (1 MB), binary, mixed-script unicode (RTL overrides, zero-width, emoji, NUL, lone
surrogates) and the injection corpus. Each input gets a result or a clear SKBError (ConfigError for
empty/oversized questions) within a deadline -- never a crash, never a hang -- and every result
serialises to valid UTF-8 JSON.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import ValidationError

from agent import AgentConfig, ask, build_agent
from graphs.errors import ConfigError, SKBError
from tests.reliability_support import corpus, within
from tools import make_tools

pytestmark = pytest.mark.integration

MB = 1024 * 1024
HOSTILE: dict[str, str] = {
    "empty": "",
    "whitespace": " \t\n\r\u00a0\u2003",
    "huge-1mb": ("brachyturricephaly syndactyly " * (MB // 30 + 1))[:MB],
    "binary": bytes(range(256)).decode("latin-1") * 4,
    "nul": "Apert\x00syndrome\x00\x00",
    "rtl-zero-width": "\u202eemordnys trepA\u202c \u200b\u200c\u200d\u2060\ufeff \u200f\u061c",
    "emoji": "🧬🦴👶🏽‍👩‍👧 Crouzon 🤷🏿‍♀️ syndrome 🇺🇳",
    "mixed-scripts": "Апер syndrome متلازمة أبير תסמונת 阿佩尔综合征 アペール症候群",
    "lone-surrogate": "Apert \ud800 syndrome \udfff",
    "combining": "A\u0301\u0302\u0303p\u0308e\u0327r\u0336t" * 50,
    "control": "".join(chr(c) for c in range(32)) + "Marfan" + "\x7f\x85\u2028\u2029",
    "long-token": "x" * 15_000,
    "brackets": "((((([[[[{{{{" * 500,
}
HOSTILE.update({f"corpus-{e['id']}": e["text"] for e in corpus()})
TOO_BIG = {"huge-1mb"}
EMPTY = {"empty", "whitespace"}


@pytest.fixture(scope="module")
def tools(hpo_bundle: Any) -> dict[str, Any]:
    return {t.name: t for t in make_tools(hpo_bundle, cypher_timeout_ms=2000)}


def utf8_json(text: str) -> Any:
    text.encode("utf-8")  # raises on lone surrogates
    return json.loads(text)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_ask(hpo_bundle: Any, name: str) -> None:
    question = HOSTILE[name]
    call = lambda: ask(question, bundle=hpo_bundle, config=AgentConfig())
    if name in EMPTY:
        with pytest.raises(ConfigError, match="needs a question"):
            within(60, call, f"ask({name})")
        return
    if name in TOO_BIG:
        with pytest.raises(ConfigError, match="max_question_chars"):
            within(60, call, f"ask({name})")
        return
    result = within(180, call, f"ask({name})")
    assert result.answer and all(item.key in hpo_bundle.skb.nodes for item in result.context)
    utf8_json(result.to_json())


@pytest.mark.parametrize("mode", ["bm25", "vss", "hybrid"])
def test_bundle_search(hpo_bundle: Any, mode: str) -> None:
    for name, text in HOSTILE.items():
        hits = within(120, lambda: hpo_bundle.search(text, mode=mode, k=5), f"search({name}, {mode})")  # noqa: B023
        assert len(hits) <= 5 and all(h.key in hpo_bundle.skb.nodes for h in hits), name
        json.dumps([h.model_dump() for h in hits]).encode("utf-8")


def test_bundle_search_bad_arguments_are_config_errors(hpo_bundle: Any) -> None:
    with pytest.raises(ConfigError, match="unknown node type"):
        hpo_bundle.search("x", label="Illness")
    with pytest.raises(ConfigError, match="unknown search mode"):
        hpo_bundle.search("x", mode="regex")


@pytest.mark.parametrize("name", [n for n in HOSTILE if n not in EMPTY])
def test_every_tool(tools: dict[str, Any], name: str) -> None:
    text = HOSTILE[name]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("semantic_search", {"text": text}),
        ("semantic_search", {"text": "syndrome", "label": text}),
        ("search_nodes", {"keys": [text]}),
        ("search_nodes", {"keys": ["OMIM:101200"], "rel_types": [text]}),
        ("search_nodes", {"keys": ["OMIM:101200"], "target_label": text}),
        ("search_nodes", {"keys": ["OMIM:101200"], "question": text}),
        ("cypher", {"query": text}),
        ("cypher", {"query": "MATCH (n) WHERE n.name = $v RETURN n.key", "params": {"v": text}}),
        ("finish", {"keys": [text, "OMIM:101200"]}),
    ]
    for tool_name, args in calls:
        try:
            content = within(120, lambda: tools[tool_name].invoke(args), f"{tool_name}({name})")  # noqa: B023
        except ValidationError:
            continue  # too long / NUL in a query: refused by the schema, with the reason
        payload = utf8_json(content)
        if "error" in payload:
            assert payload["error"]["message"] and payload["error"]["hint"], payload


@pytest.mark.parametrize(
    ("tool_name", "args", "error_type"),
    [
        ("search_nodes", {"keys": ["NOPE:1", "NOPE:2"]}, "unknown_key"),
        ("search_nodes", {"keys": ["OMIM:101200"], "target_label": "Illness"}, "unknown_label"),
        ("search_nodes", {"keys": ["OMIM:101200"], "rel_types": ["CURES"]}, "unknown_relation"),
        ("semantic_search", {"text": "x", "label": "Illness"}, "unknown_label"),
        ("cypher", {"query": "MATCH (n:Illness) RETURN n"}, "unknown_schema"),
        ("cypher", {"query": "MATCH (n)-[:CURES]->(m) RETURN m"}, "unknown_schema"),
        ("cypher", {"query": "MATCH (n) RETURN n.colour"}, "unknown_schema"),
        ("cypher", {"query": "MATCH (n RETURN n"}, "syntax"),
        ("cypher", {"query": "MATCH (n) WHERE n.name = 'unterminated RETURN n"}, "syntax"),
        ("cypher", {"query": "CALL db.dropAll()"}, "read_only_violation"),
        ("cypher", {"query": "MATCH (n) RETURN n; MATCH (m) DELETE m"}, "read_only_violation"),
    ],
)
def test_unknown_names_get_structured_errors(
    tools: dict[str, Any], tool_name: str, args: dict[str, Any], error_type: str
) -> None:
    payload = utf8_json(within(60, lambda: tools[tool_name].invoke(args)))
    assert payload["error"]["type"] == error_type, payload
    assert payload["error"]["hint"]


@pytest.mark.parametrize(
    ("tool_name", "args"),
    [
        ("search_nodes", {"keys": []}),
        ("search_nodes", {"keys": "OMIM:101200"}),
        ("search_nodes", {"keys": ["OMIM:101200"], "direction": "sideways"}),
        ("search_nodes", {"keys": ["OMIM:101200"], "limit": -1}),
        ("search_nodes", {"keys": ["k"] * 201}),
        ("semantic_search", {"text": ""}),
        ("semantic_search", {"text": "x" * 2001}),
        ("semantic_search", {"text": "x", "k": 10**9}),
        ("semantic_search", {}),
        ("cypher", {"query": ""}),
        ("cypher", {"query": "MATCH (n) RETURN n", "max_rows": 0}),
        ("cypher", {"query": "MATCH (n) RETURN n", "params": [1, 2]}),
        ("cypher", {"query": "MATCH (n)\x00 RETURN n"}),
        ("finish", {"keys": ["a"], "confidence": 7}),
        ("finish", {"keys": None}),
    ],
)
def test_malformed_arguments_are_validation_errors(tools: dict[str, Any], tool_name: str, args: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        tools[tool_name].invoke(args)


def test_messages_input_without_a_human_question_is_a_config_error(hpo_bundle: Any) -> None:
    graph = build_agent(AgentConfig(), hpo_bundle)
    for messages in ([], [SystemMessage("you are evil")], [AIMessage("hi")], [HumanMessage("   ")]):
        with pytest.raises(ConfigError, match="needs a question"):
            graph.invoke({"messages": messages})


def test_bad_configurable_values_are_config_errors(hpo_bundle: Any) -> None:
    graph = build_agent(AgentConfig(), hpo_bundle)
    for bad in ({"k": -1}, {"policy": "sometimes"}, {"max_question_chars": 0}, {"degrade_to_offline": "maybe"}):
        with pytest.raises(ConfigError):
            graph.invoke({"question": "Marfan syndrome"}, {"configurable": bad})


def test_question_limit_is_configurable(hpo_bundle: Any) -> None:
    with pytest.raises(ConfigError, match="limit is max_question_chars=10"):
        ask("Marfan syndrome features", bundle=hpo_bundle, config=AgentConfig(max_question_chars=10))
    result = ask("Marfan", bundle=hpo_bundle, config=AgentConfig(max_question_chars=10))
    assert result.context


def test_store_errors_stay_skb_errors(hpo_bundle: Any) -> None:
    """Direct store reads with hostile text are SKBErrors, never driver exceptions."""
    for text in ("\x00", "MATCH (n RETURN", "RETURN $p", "CALL db.labels() YIELD x"):
        try:
            hpo_bundle.store.query(text, {"p": "\ud800"}, timeout_ms=1000)
        except SKBError:
            pass
