"""Where the files derived from installed packages live (converted models, the lemma table): one directory per user,
shared by every index and process on the machine.

Why apart from the modules that write there: the encoder's model cache (``graphs.embedding``) and the lemma table
(``graphs.skb``) sit in different layers, and both must agree on the directory.
"""

from __future__ import annotations

import os
from pathlib import Path


def model_cache_dir() -> Path:
    """Where converted models live: ``$SKB_MODEL_CACHE``, else the XDG user cache."""
    env = os.environ.get("SKB_MODEL_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "skb-agent" / "models"
