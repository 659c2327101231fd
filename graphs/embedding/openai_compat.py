"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI, vLLM, llama.cpp, Ollama).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphs.embedding.base import _check_texts, l2_normalise
from graphs.errors import ConfigError, SKBError


class OpenAIEmbedder:
    """Any OpenAI-compatible /v1/embeddings endpoint via langchain-openai.

    Token-length checking is off (``check_embedding_ctx_length=False``) because it
    needs tiktoken vocabularies (a download) and sends token ids, which non-OpenAI
    servers (vLLM, llama.cpp, Ollama) often reject.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        dim: int | None = None,
        batch_size: int = 256,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        if not model:
            raise ConfigError("OpenAI embedder needs a model name, e.g. --embedder openai:text-embedding-3-small")
        self.model_name = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if self.base_url is None:
                raise ConfigError(
                    f"OpenAI embedder {model!r} needs an API key -- set OPENAI_API_KEY, "
                    "or set OPENAI_BASE_URL to a local OpenAI-compatible server"
                )
            key = "not-needed"  # local servers usually ignore it, but the client insists on one
        self._api_key = key
        self._dim = dim
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_retries = max_retries
        self._client: Any = None
        self._lock = threading.Lock()

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                from langchain_openai import OpenAIEmbeddings
                from pydantic import SecretStr

                self._client = OpenAIEmbeddings(
                    model=self.model_name,
                    base_url=self.base_url,
                    api_key=SecretStr(self._api_key),
                    check_embedding_ctx_length=False,
                    chunk_size=self.batch_size,
                    timeout=self.timeout,
                    max_retries=self.max_retries,
                    # The openai client asks for base64 by default; several compatible servers only do floats.
                    model_kwargs={"encoding_format": "float"},
                )
            return self._client

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed_query("dimension probe")
        assert self._dim is not None
        return self._dim

    def _call(self, texts: list[str]) -> list[list[float]]:
        import openai

        where = self.base_url or "api.openai.com"
        try:
            result: list[list[float]] = self._get_client().embed_documents(texts)
            return result
        except openai.AuthenticationError as exc:
            raise ConfigError(
                f"embedding server {where} rejected the API key for model {self.model_name!r} -- check OPENAI_API_KEY"
            ) from exc
        except openai.NotFoundError as exc:
            raise ConfigError(
                f"embedding server {where} does not serve model {self.model_name!r} (404) -- check the model name "
                "and OPENAI_BASE_URL (it usually ends in /v1)"
            ) from exc
        except openai.BadRequestError as exc:
            raise SKBError(f"embedding server {where} refused the request for {self.model_name!r}: {exc}") from exc
        except openai.APIConnectionError as exc:
            raise SKBError(
                f"cannot reach the embedding server {where} ({exc}) -- is it running? check OPENAI_BASE_URL"
            ) from exc
        except openai.APIError as exc:
            raise SKBError(f"embedding server {where} failed for model {self.model_name!r}: {exc}") from exc

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = _check_texts(texts)
        if not items:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        # Servers reject empty inputs; a single space embeds as "nothing" everywhere we tried.
        raw = self._call([t if t.strip() else " " for t in items])
        try:
            arr = np.asarray(raw, dtype=np.float32)
        except ValueError as exc:
            raise SKBError(f"embedding server returned ragged vectors for {self.model_name!r}") from exc
        if arr.ndim != 2 or arr.shape[0] != len(items):
            raise SKBError(
                f"embedding server returned {arr.shape[0] if arr.ndim else 0} vectors for {len(items)} texts "
                f"(model {self.model_name!r})"
            )
        if self._dim is None:
            self._dim = int(arr.shape[1])
        elif arr.shape[1] != self._dim:
            raise SKBError(
                f"embedding server returned {arr.shape[1]}-dimensional vectors for {self.model_name!r}, "
                f"expected {self._dim} -- the server's model changed; rebuild the index with `skb index`"
            )
        return l2_normalise(arr)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]
