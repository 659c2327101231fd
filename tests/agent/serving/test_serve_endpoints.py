"""The app one `skb serve` replica runs (`agent.serving.endpoints`), in process without Ray: /ask answers as
`ask()` does, bad requests get a 4xx naming the problem and the app keeps answering, the token guards every
route; and `skb serve` refuses what `skb mcp` refuses before anything starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agent.api import ask
from agent.config import AgentConfig
from agent.serving.endpoints import build_serve_app, token_digest
from agent.serving.toolkit import SKBToolkit

TOKEN = "s3rve-" + "y" * 24 + "-Kq7"
QUESTIONS = (
    "Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?",
    "Which genes are associated with Marfan syndrome?",
    "What are the phenotypes of Crouzon syndrome?",
)


@pytest.fixture(scope="module")
def client(hpo_bundle: Any) -> Iterator[TestClient]:
    app = build_serve_app(SKBToolkit(hpo_bundle, callbacks=[]), token_sha256=token_digest(TOKEN), max_body_bytes=64_000)
    with TestClient(app, base_url="http://127.0.0.1:8000", headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


@pytest.mark.parametrize("question", QUESTIONS)
def test_ask_returns_the_context_ask_returns(client: TestClient, hpo_bundle: Any, question: str) -> None:
    r = client.post("/ask", json={"question": question, "k": 5, "k_prime": 3})
    assert r.status_code == 200, r.text
    body = r.json()
    expected = ask(question, bundle=hpo_bundle, config=AgentConfig(k=5, k_prime=3))
    assert [c["key"] for c in body["context"]] == [c.key for c in expected.context]
    assert body["context"][0]["provenance"] == [p.model_dump() for p in expected.context[0].provenance]
    assert body["answer"] == expected.answer and body["top_answer"] == expected.context[0].name
    assert body["answers"][0]["key"] == expected.context[0].key and body["generation"]


def test_dotted_settings_apply_and_a_typo_is_a_400(client: TestClient, hpo_bundle: Any) -> None:
    question = QUESTIONS[1]
    r = client.post("/ask", json={"question": question, "k": 3, "settings": {"k_prime": 0, "clause.candidates": 2}})
    assert r.status_code == 200, r.text
    expected = ask(question, bundle=hpo_bundle, config=AgentConfig(k=3, k_prime=0, clause_candidates=2))
    assert [c["key"] for c in r.json()["context"]] == [c.key for c in expected.context]
    typo = client.post("/ask", json={"question": question, "settings": {"clause.candidatez": 2}})
    assert typo.status_code == 400 and "clause.candidatez" in typo.json()["error"]["message"]


def test_search_mode_answers_from_one_search(client: TestClient, hpo_bundle: Any) -> None:
    r = client.post("/ask", json={"question": "aortic root aneurysm", "k": 2, "mode": "hybrid"})
    assert r.status_code == 200, r.text
    keys = [c["key"] for c in r.json()["context"]]
    assert keys == [h.key for h in hpo_bundle.search("aortic root aneurysm", mode="hybrid", k=2)]
    assert r.json()["context"][0]["provenance"][0]["tool"] == "hybrid"


def test_bad_requests_get_a_4xx_and_the_app_keeps_answering(client: TestClient) -> None:
    assert client.post("/ask", content=b"{not json").status_code == 400
    assert client.post("/ask", content=b"\xff\xfe").status_code == 400
    invalid = client.post("/ask", json={"question": "", "k": 0, "colour": "red"})
    assert invalid.status_code == 422
    message = invalid.json()["error"]["message"]
    assert "question" in message and "k" in message and "colour" in message
    oversized = client.post("/ask", content=b'{"question": "' + b"x" * 70_000 + b'"}')
    assert oversized.status_code == 413
    long_question = client.post("/ask", json={"question": "x" * 4001})
    assert long_question.status_code == 422 and "4000" in long_question.json()["error"]["message"]
    assert client.get("/ask").status_code == 405
    assert client.get("/health").json()["status"] == "ok"


def test_every_route_needs_the_token(client: TestClient) -> None:
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong-token-wrong-token"}):
        assert client.get("/health", headers=headers).status_code == 401
        assert client.post("/ask", json={"question": QUESTIONS[0]}, headers=headers).status_code == 401
        assert client.post("/mcp", json={}, headers=headers).status_code == 401
    assert client.get("/health").status_code == 200


def test_serve_refuses_beyond_loopback_without_a_token_and_names_a_missing_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import typer
    from typer.testing import CliRunner

    from agent.cli.serve import serve_command

    monkeypatch.delenv("SKB_MCP_TOKEN", raising=False)
    app = typer.Typer()
    app.command()(serve_command)
    exposed = CliRunner().invoke(app, ["--index-dir", str(tmp_path), "--host", "0.0.0.0"])
    assert exposed.exit_code == 2 and "set a bearer token" in exposed.output
    both = CliRunner().invoke(app, ["--index-dir", str(tmp_path), "--replicas", "2", "--max-replicas", "3"])
    assert both.exit_code == 2 and "not both" in both.output
    missing = CliRunner().invoke(app, ["--index-dir", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "no index at" in missing.output


def test_serve_without_ray_names_the_extra_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import typer
    from typer.testing import CliRunner

    from agent.cli.serve import serve_command

    monkeypatch.delenv("SKB_MCP_TOKEN", raising=False)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError, as where it is not installed
    monkeypatch.delitem(sys.modules, "agent.serving.replicas", raising=False)
    app = typer.Typer()
    app.command()(serve_command)
    result = CliRunner().invoke(app, ["--index-dir", str(tmp_path)])
    assert result.exit_code == 2 and "pip install 'skb-agent[ray]'" in result.output
