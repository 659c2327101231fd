"""The HTTP application one `skb serve` replica runs: MCP at /mcp, ``POST /ask`` and ``GET /health``.

Why one ASGI app and no Ray in it: a replica is this app over one open index; Ray Serve only places,
balances and restarts copies of it (`agent.serving.replicas`). Built without Ray it can be tested, and
run, in process like any Starlette app.

MCP is the server `skb mcp` builds (`agent.serving.mcp.build_server`: the same tools, schemas and
payloads), over streamable HTTP in stateless mode: no session lives in a replica, so any replica answers
any request and a restarted replica loses nothing. ``/ask`` is the ``ask`` tool's path
(`SKBToolkit.answer`) for clients that speak plain JSON; the search modes answer from one search of the
index. Guards are those of `skb mcp --transport http`: a bearer token (required beyond loopback: the
caller checks), request bodies capped at the MCP SDK's limit, the SDK's Host/Origin checks on loopback.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, RequestBodyLimitMiddleware
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Scope

from agent.results import ContextItem, Provenance
from agent.serving.mcp import MCP_PATH, BearerTokenMiddleware, build_server, loopback_security
from agent.serving.toolkit import MAX_K, QUESTION_MAX_CHARS, SKBToolkit
from graphs.errors import ConfigError, IndexError_, SKBError, StoreError

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

log = logging.getLogger("skb.serve")

ASK_PATH = "/ask"
HEALTH_PATH = "/health"
AskMode = Literal["agent", "hybrid", "vss", "bm25"]


class AskRequest(BaseModel):
    """The body of ``POST /ask``. Limits are the ``ask`` tool's (`AskArgs`); ``settings`` are agent settings
    by field or dotted name (``{"clause.candidates": 3}``), checked as ``skb ask --set`` checks them."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=QUESTION_MAX_CHARS, description="the question, as asked")
    k: int | None = Field(default=None, ge=1, le=MAX_K, description="answer nodes to rank (default 20)")
    k_prime: int | None = Field(default=None, ge=0, le=MAX_K, description="similar neighbours to add (agent mode)")
    mode: AskMode = Field(
        default="agent", description="agent: the whole agent; hybrid | vss | bm25: one search of the index, k hits"
    )
    settings: dict[str, Any] = Field(default_factory=dict, description="agent settings for this question")


class AskResponse(BaseModel):
    """The compact answers (as the ``ask`` tool returns them; empty in the search modes) and the ranked context
    with provenance (`agent.results.ContextItem`), with the build that answered."""

    question: str
    mode: AskMode
    answer: str
    top_answer: str | None = None
    answers: list[dict[str, Any]] = Field(default_factory=list)
    context: list[ContextItem] = Field(default_factory=list)
    degraded: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    generation: str = ""


class DigestBearerMiddleware(BearerTokenMiddleware):
    """`BearerTokenMiddleware` that holds only the token's SHA-256: what a replica is given travels through the
    cluster's control plane (and its dashboard), so the token itself never does. Constant-time comparison."""

    def __init__(self, app: ASGIApp, token_sha256: str) -> None:
        super().__init__(app, token="-")
        self._digest = bytes.fromhex(token_sha256)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, credential = bytes(value).partition(b" ")
                presented = hashlib.sha256(credential.strip()).digest()
                return scheme.lower() == b"bearer" and hmac.compare_digest(presented, self._digest)
        return False


def token_digest(token: str) -> str:
    """The hex SHA-256 of a bearer token, as `build_serve_app` takes it."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status)


def _status_of(exc: SKBError) -> int:
    if isinstance(exc, ConfigError):
        return 400
    if isinstance(exc, StoreError | IndexError_):
        return 503  # the graph server or the index is not there right now: retrying may succeed
    return 500


def answer_request(toolkit: SKBToolkit, request: AskRequest) -> AskResponse:
    """``POST /ask``'s answer (blocking: run it in a worker thread)."""
    bundle = toolkit.bundle
    if request.mode == "agent":
        text, result = toolkit.answer(request.question, k=request.k, k_prime=request.k_prime, settings=request.settings)
        compact = json.loads(text)
        return AskResponse(
            question=request.question, mode="agent", answer=result.answer, top_answer=compact.get("top_answer"),
            answers=list(compact.get("answers") or []), context=result.context, degraded=result.degraded,
            notes=result.notes, generation=_generation(bundle),
        )  # fmt: skip
    if request.settings:
        raise ConfigError(f"settings apply to mode 'agent' only; mode {request.mode!r} runs one search")
    with bundle.pinned():
        hits = bundle.search(request.question, mode=request.mode, k=request.k or 20)
        generation = _generation(bundle)
    provenance = [Provenance(tool=request.mode, step=0, query=request.question)]
    context = [
        ContextItem(key=h.key, label=h.label, name=h.name, score=h.score, rank=rank, origin="seed", provenance=provenance)
        for rank, h in enumerate(hits, 1)
    ]
    return AskResponse(question=request.question, mode=request.mode, answer="", context=context, generation=generation)


def _generation(bundle: IndexBundle) -> str:
    return str(getattr(bundle.manifest, "generation", "") or "")


def build_serve_app(
    toolkit: SKBToolkit,
    *,
    host: str = "127.0.0.1",
    token_sha256: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_REQUEST_BODY_SIZE,
    replica: Mapping[str, Any] | None = None,
) -> Starlette:
    """/mcp (stateless streamable HTTP), /ask and /health over ``toolkit``; every route behind the token when
    ``token_sha256`` is given, and every request body capped at ``max_body_bytes`` (413 beyond).

    ``replica``: what /health reports about this copy (its id, pid) besides the index's generation."""
    manager = StreamableHTTPSessionManager(
        app=build_server(toolkit), stateless=True, security_settings=loopback_security(host),
        max_request_body_size=max_body_bytes,
    )  # fmt: skip

    async def ask(request: Request) -> JSONResponse:
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as exc:
            return _error(400, f"the body is not JSON ({exc}); send {{\"question\": \"...\"}}")
        try:
            parsed = AskRequest.model_validate(body)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
            return _error(422, f"invalid /ask request: {problems}")
        try:
            response = await anyio.to_thread.run_sync(answer_request, toolkit, parsed)
        except SKBError as exc:
            return _error(_status_of(exc), f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            log.exception("/ask failed")
            return _error(500, f"the question failed: {type(exc).__name__}: {exc}")
        return JSONResponse(response.model_dump(mode="json"))

    async def health(request: Request) -> JSONResponse:
        try:
            generation = await anyio.to_thread.run_sync(_generation, toolkit.bundle)
        except SKBError as exc:
            return _error(503, f"{type(exc).__name__}: {exc}")
        return JSONResponse({"status": "ok", "generation": generation, **dict(replica or {})})

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    middleware = [Middleware(RequestBodyLimitMiddleware, max_body_size=max_body_bytes)]
    if token_sha256 is not None:
        middleware.insert(0, Middleware(DigestBearerMiddleware, token_sha256=token_sha256))
    return Starlette(
        routes=[
            Route(MCP_PATH, endpoint=StreamableHTTPASGIApp(manager)),
            Route(ASK_PATH, endpoint=ask, methods=["POST"]),
            Route(HEALTH_PATH, endpoint=health, methods=["GET"]),
        ],
        middleware=middleware,
        lifespan=lifespan,
    )


__all__ = ["ASK_PATH", "HEALTH_PATH", "AskRequest", "AskResponse", "answer_request", "build_serve_app", "token_digest"]
