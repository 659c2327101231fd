"""A dense index of the phrases that name or describe vocabulary nodes: names, synonyms, definition sentences.

Why a separate artifact: the node-text HNSW embeds one long text per node (name, synonyms,
definition, neighbour names) truncated to the embedder's window, so a question that *describes*
a term ("the palpebral fissure inclination is more than two standard deviations below the
mean") lands near many nodes at similar cosine and the right one is not reliably first. One
vector per phrase -- each name, each synonym, each definition sentence -- lets a question clause
be compared with exactly the text it paraphrases. Which labels form the vocabulary and which
properties hold definitions comes from the domain profile (``[linking] vocabulary_labels`` and
``definition_fields``), so the mechanism is the same for phenotypes, product categories or drug
classes; an SKB whose profile names no vocabulary gets no artifact, and an index built without
it keeps working with clause linking against definitions switched off.

Files (``phrases/`` in the index, each listed with its sha256 in the manifest):
``vectors.npy`` (float16, L2-normalised rows), ``entries.json`` (key and kind per row).
A brute-force dot product over ~60k x 384 float16 rows costs a few milliseconds per clause batch,
so no approximate index is needed at this size.
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from graphs.errors import IndexCorruptError
from graphs.manifest import atomic_write_bytes, atomic_write_json, sha256_file

if TYPE_CHECKING:
    from graphs.embedder import Embedder
    from graphs.model import SKB

PhraseKind = Literal["name", "synonym", "definition"]

#: Directory of the artifact inside an index (the manifest lists its files as ``phrases/<file>``).
PHRASE_DIR = "phrases"
VECTORS_FILE = "vectors.npy"
ENTRIES_FILE = "entries.json"
#: Definition sentences kept per node: the first ones say what the term is; later ones add detail.
MAX_DEFINITION_SENTENCES = 3
#: Shortest definition sentence worth a vector (shorter ones are fragments such as "e.g.").
MIN_SENTENCE_CHARS = 12

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


def definition_sentences(text: str, limit: int = MAX_DEFINITION_SENTENCES) -> list[str]:
    """The first ``limit`` sentences of a definition, whitespace-normalised (fragments dropped)."""
    out: list[str] = []
    for raw in _SENTENCE.split(" ".join(str(text).split())):
        sentence = raw.strip()
        if len(sentence) >= MIN_SENTENCE_CHARS:
            out.append(sentence)
        if len(out) >= limit:
            break
    return out


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value if v is not None and str(v).strip()]
    return [str(value)] if str(value).strip() else []


def phrase_entries(skb: SKB) -> Iterator[tuple[str, PhraseKind, str]]:
    """(node key, kind, text) for every phrase of the profile's vocabulary labels, deduplicated per node."""
    from graphs.loaders.profiles import profile_for

    linking = profile_for(skb).linking
    labels = set(linking.vocabulary_labels)
    if not labels:
        return
    for node in skb.nodes.values():
        if node.label not in labels:
            continue
        seen: set[str] = set()
        ntype = skb.node_types.get(node.label)
        items: list[tuple[PhraseKind, str]] = [("name", node.name)]
        if ntype is not None and ntype.synonym_field:
            items.extend(("synonym", s) for s in _as_list(node.props.get(ntype.synonym_field)))
        for fld in linking.definition_fields:
            for text in _as_list(node.props.get(fld)):
                items.extend(("definition", s) for s in definition_sentences(text))
        for kind, text in items:
            text = " ".join(text.split())
            folded = text.lower()
            if text and folded not in seen:
                seen.add(folded)
                yield node.key, kind, text


@dataclass
class PhraseIndex:
    """Row-aligned phrase vectors, node keys and kinds."""

    vectors: np.ndarray
    keys: list[str]
    kinds: list[PhraseKind]

    def __len__(self) -> int:
        return len(self.keys)

    def has_kind(self, kind: PhraseKind) -> bool:
        return kind in self.kinds

    def search(
        self, queries: np.ndarray, k: int, *, kinds: Sequence[PhraseKind] | None = None
    ) -> list[list[tuple[str, float]]]:
        """Per query row, the ``k`` best nodes by their best phrase (cosine), restricted to ``kinds``."""
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        sims = q @ self.vectors.T.astype(np.float32, copy=False) if self.vectors.dtype != np.float32 else q @ self.vectors.T
        if kinds is not None:
            mask = self._mask(tuple(kinds))
            sims[:, ~mask] = -1.0
        out: list[list[tuple[str, float]]] = []
        pool = min(len(self.keys), max(4 * k, 32))
        for row in sims:
            top = np.argpartition(-row, pool - 1)[:pool] if pool < len(row) else np.arange(len(row))
            top = top[np.argsort(-row[top], kind="stable")]
            best: dict[str, float] = {}
            for i in top:
                key = self.keys[int(i)]
                if key not in best:
                    best[key] = float(row[i])
                    if len(best) >= k:
                        break
            out.append([(key, score) for key, score in best.items() if score > -1.0])
        return out

    _masks: dict[tuple[str, ...], np.ndarray] | None = None

    def _mask(self, kinds: tuple[str, ...]) -> np.ndarray:
        if self._masks is None:
            self._masks = {}
        hit = self._masks.get(kinds)
        if hit is None:
            wanted = set(kinds)
            hit = self._masks[kinds] = np.fromiter((k in wanted for k in self.kinds), dtype=bool, count=len(self.kinds))
        return hit

    # -- persistence -----------------------------------------------------------------
    def save(self, directory: Path) -> dict[str, str]:
        """Write the two files; returns ``{relative name: sha256}`` for the manifest."""
        import io

        directory.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(self.vectors, dtype=np.float16), allow_pickle=False)
        atomic_write_bytes(directory / VECTORS_FILE, buf.getvalue())
        atomic_write_json(directory / ENTRIES_FILE, {"keys": self.keys, "kinds": self.kinds}, indent=None)
        return {name: sha256_file(directory / name) for name in (VECTORS_FILE, ENTRIES_FILE)}

    @classmethod
    def load(cls, directory: Path, checksums: dict[str, str] | None = None) -> PhraseIndex:
        """Read the artifact, checking each file against the manifest's digest when given."""
        for name in (VECTORS_FILE, ENTRIES_FILE):
            path = directory / name
            expected = (checksums or {}).get(name)
            if expected is not None and sha256_file(path) != expected:
                raise IndexCorruptError(
                    f"{path} does not match the checksum in the manifest; rebuild the index with "
                    f"`skb index --force --index-dir {directory.parent}`"
                )
        vectors = np.load(directory / VECTORS_FILE, allow_pickle=False)
        raw = json.loads((directory / ENTRIES_FILE).read_text(encoding="utf-8"))
        keys, kinds = list(raw["keys"]), list(raw["kinds"])
        if vectors.ndim != 2 or len(keys) != len(vectors) or len(kinds) != len(keys):
            raise IndexCorruptError(
                f"{directory} holds {len(vectors)} vectors for {len(keys)} phrases; rebuild the index with "
                f"`skb index --force --index-dir {directory.parent}`"
            )
        return cls(np.asarray(vectors, dtype=np.float32), keys, kinds)


def build_phrase_index(
    skb: SKB, embedder: Embedder, *, batch: int = 512, progress: Callable[[int, int], None] | None = None
) -> PhraseIndex | None:
    """Embed every vocabulary phrase (None when the profile names no vocabulary labels)."""
    entries = list(phrase_entries(skb))
    if not entries:
        return None
    texts = [text for _, _, text in entries]
    chunks: list[np.ndarray] = []
    for start in range(0, len(texts), batch):
        chunks.append(np.asarray(embedder.embed(texts[start : start + batch]), dtype=np.float32))
        if progress is not None:
            progress(min(start + batch, len(texts)), len(texts))
    vectors = np.vstack(chunks)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.maximum(norms, 1e-12)
    return PhraseIndex(vectors.astype(np.float32), [k for k, _, _ in entries], [kind for _, kind, _ in entries])


_LOADED: weakref.WeakKeyDictionary[Any, PhraseIndex | None] = weakref.WeakKeyDictionary()
_LOAD_LOCK = threading.Lock()


def phrase_index_for(bundle: Any) -> PhraseIndex | None:
    """The bundle's phrase index, loaded once per build (None for an index built without one).

    Keyed by the bundle's SKB object: a rebuild swapped in under an open bundle gives a new SKB,
    so the artifact of the new build is loaded with it.
    """
    skb = getattr(bundle, "skb", None)
    manifest = getattr(bundle, "manifest", None)
    index_dir = getattr(bundle, "index_dir", None)
    if skb is None or manifest is None or index_dir is None:
        return None
    with _LOAD_LOCK:
        if skb in _LOADED:
            return _LOADED[skb]
        files = getattr(manifest, "files", {}) or {}
        prefix = PHRASE_DIR + "/"
        checksums = {name[len(prefix) :]: digest for name, digest in files.items() if name.startswith(prefix)}
        found: PhraseIndex | None = None
        if VECTORS_FILE in checksums and ENTRIES_FILE in checksums:
            # the bundle verified the manifest's files when it opened the index: no second hash here
            found = PhraseIndex.load(Path(index_dir) / PHRASE_DIR)
        _LOADED[skb] = found
        return found
