"""The 'docs' dataset: a plain folder of .txt/.md files as Document and Chunk nodes.

Chunking is semantic (see :mod:`graphs.loaders.chunking`), so loading embeds sentence windows
with the offline MiniLM model; the embeddings are cached by content hash in
``~/.cache/skb-agent/emb`` unless ``SKB_EMBED_CACHE`` names another directory, so
re-indexing an unchanged folder does not re-embed it.
"""

from __future__ import annotations

import os
from pathlib import Path

from graphs.errors import LoaderError
from graphs.skb.model import SKB


def _cache_dir() -> Path:
    env = os.environ.get("SKB_EMBED_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "skb-agent" / "emb"


def load_docs(path: Path | None = None) -> SKB:
    """Load every .txt/.md file under ``path`` (recursive) into an SKB."""
    if path is None:
        raise LoaderError("docs", "no folder given", fix="pass --data <folder of .txt/.md files>")
    from graphs.embedding.embedder import get_embedder
    from graphs.loaders.chunking import load_documents

    return load_documents(Path(path), get_embedder("minilm", cache_dir=_cache_dir()))
