"""A lower-case word's lemmas by part of speech (lemminflect's ``getAllLemmas``), read from a memory-mapped table.

Why a table: lemminflect reads its dictionary of 70,000 words into Python dictionaries on the first lookup, 33 MB of
each process's own memory (and 9 MB more to import it) in every process that answers a question. The same answers,
written once as two sorted arrays in the model cache (``graphs.cache_dir``) and mapped, cost a process almost none of
its own: the serving processes of one machine share the pages.

The table holds ``getAllLemmas(word)`` for every lower-case word of lemminflect's dictionary and of its overrides (the
only words for which it answers anything); any other word has none. It is made by the first process that needs it
(about a second), named by lemminflect's version, and checked against the sha256 of its files in a sidecar; where the
cache cannot be written, or lemminflect does not expose its word list, lookups go to lemminflect itself.
"""

from __future__ import annotations

import json
import logging
import threading
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from graphs.cache_dir import model_cache_dir
from graphs.manifest import atomic_write_bytes, atomic_write_text, sha256_file

log = logging.getLogger(__name__)

FORMAT = 1
_GROUP, _ITEM = "\x1e", "\x1f"  # between parts of speech; between a part of speech and its lemmas


def _lemminflect_version() -> str:
    try:
        return version("lemminflect")
    except PackageNotFoundError:
        return "unknown"


def table_paths(cache_dir: Path | None = None) -> tuple[Path, Path, Path]:
    """(words, lemmas, sidecar) of the table for the installed lemminflect."""
    root = cache_dir or model_cache_dir()
    name = f"lemmas-{_lemminflect_version()}-f{FORMAT}"
    return root / f"{name}.words.npy", root / f"{name}.lemmas.npy", root / f"{name}.json"


def _encode(lemmas: dict[str, Any]) -> str:
    return _GROUP.join(_ITEM.join([upos, *forms]) for upos, forms in lemmas.items())


def _decode(text: str) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for group in text.split(_GROUP) if text else ():
        upos, *forms = group.split(_ITEM)
        out[upos] = tuple(forms)
    return out


def _dictionary_words() -> list[str] | None:
    """The lower-case words lemminflect answers for (None where its lookup tables are not reachable)."""
    from lemminflect.core.Lemmatizer import Lemmatizer

    lemmatizer = Lemmatizer()
    try:
        words = set(lemmatizer._getLemmaDict()) | set(lemmatizer._getOverridesDict())
    except (AttributeError, TypeError):  # another lemminflect: look words up one at a time instead
        return None
    return sorted(w for w in words if w == w.lower())


def _npy(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def write_table(cache_dir: Path | None = None) -> bool:
    """Write the table for the installed lemminflect; False where lemminflect's word list is not reachable."""
    from lemminflect import getAllLemmas

    words = _dictionary_words()
    if words is None:
        return False
    rows = [(w.encode("utf-8"), _encode(getAllLemmas(w)).encode("utf-8")) for w in words]
    rows = sorted((w, v) for w, v in rows if v)
    keys = np.array([w for w, _ in rows], dtype=bytes)
    values = np.array([v for _, v in rows], dtype=bytes)
    words_path, lemmas_path, sidecar = table_paths(cache_dir)
    words_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(words_path, _npy(keys))
    atomic_write_bytes(lemmas_path, _npy(values))
    record = {"format": FORMAT, "lemminflect": _lemminflect_version(), "words": len(keys),
              "sha256": {p.name: sha256_file(p) for p in (words_path, lemmas_path)}}
    atomic_write_text(sidecar, json.dumps(record, indent=1))
    return True


class LemmaTable:
    """``getAllLemmas`` answers for lower-case words, looked up by binary search in the mapped arrays."""

    def __init__(self, words: np.ndarray, lemmas: np.ndarray) -> None:
        self._words, self._lemmas = words, lemmas
        self._width = words.dtype.itemsize

    def __len__(self) -> int:
        return len(self._words)

    def get(self, word: str) -> dict[str, tuple[str, ...]]:
        key = word.encode("utf-8")
        if not key or len(key) > self._width:  # a longer key would be cut to the width and match a prefix
            return {}
        i = int(np.searchsorted(self._words, key))
        if i >= len(self._words) or self._words[i] != key:
            return {}
        return _decode(self._lemmas[i].decode("utf-8"))


def open_table(cache_dir: Path | None = None) -> LemmaTable | None:
    """The table mapped, after checking its files against the sidecar; None where it is missing or damaged."""
    words_path, lemmas_path, sidecar = table_paths(cache_dir)
    try:
        record = json.loads(sidecar.read_text(encoding="utf-8"))
        digests = record["sha256"]
        if record.get("format") != FORMAT or any(sha256_file(p) != digests.get(p.name)
                                                 for p in (words_path, lemmas_path)):
            return None
        words = np.load(words_path, mmap_mode="r", allow_pickle=False)
        lemmas = np.load(lemmas_path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if words.dtype.kind != "S" or lemmas.dtype.kind != "S" or words.shape != lemmas.shape or words.ndim != 1:
        return None
    return LemmaTable(words, lemmas)


_TABLE: list[LemmaTable | None] = []
_LOCK = threading.Lock()


def _table() -> LemmaTable | None:
    """This process's table: opened once, made where it is missing or damaged (None: ask lemminflect)."""
    if _TABLE:
        return _TABLE[0]
    with _LOCK:
        if not _TABLE:
            table = open_table()
            if table is None:
                try:
                    table = open_table() if write_table() else None
                except OSError as exc:  # a cache this process cannot write: lemminflect answers instead
                    log.info("lemma table not written (%s); lemminflect answers in memory", exc)
            _TABLE.append(table)
    return _TABLE[0]


def lemmas_of(word: str) -> dict[str, tuple[str, ...]]:
    """``lemminflect.getAllLemmas(word)`` for a lower-case ``word``: its lemmas by part of speech ({} for none)."""
    table = _table()
    if table is not None:
        return table.get(word)
    from lemminflect import getAllLemmas

    return {upos: tuple(forms) for upos, forms in getAllLemmas(word).items()}
