"""Opening a saved index's metadata file, the same way for every index kind.

Why one function: the BM25 and HNSW indexes each keep their ids, labels and parameters in one JSON
file; a missing file must say how to build the index, a checksum mismatch must be caught before any
file is trusted, and an unparsable one must say to rebuild -- written once, the two kinds cannot drift.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from graphs.errors import IndexCorruptError, IndexNotFoundError
from graphs.manifest import verify_checksums

T = TypeVar("T")


def read_index_meta(
    dir: Path, meta_file: str, what: str, checksums: dict[str, str] | None, parse: Callable[[dict[str, Any]], T]
) -> T:
    """``parse`` applied to the JSON of ``dir/meta_file``, after ``checksums`` (from the manifest) are verified.

    ``what`` names the index in errors ("BM25 index"). A missing file is IndexNotFoundError; a file that is
    not JSON, or that ``parse`` rejects with ValueError, KeyError or TypeError, is IndexCorruptError."""
    meta_path = dir / meta_file
    if not meta_path.is_file():
        raise IndexNotFoundError(f"no {what} in {dir} ({meta_file} missing) -- build one with `skb index`")
    if checksums is not None:
        verify_checksums(dir, checksums, what=what)
    try:
        return parse(json.loads(meta_path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError) as exc:
        raise IndexCorruptError(f"{meta_path} cannot be parsed ({exc}) -- rebuild it with `skb index`") from exc
