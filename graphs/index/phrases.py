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
``phrases.bin`` (an inner-product graph over the L2-normalised phrase vectors, ids = rows: hnswlib's, or
USearch's in an index built with mapped graphs, ``graphs.index.ann``) and ``entries.json`` (node key and kind per
row). Why a graph and not a dot product: an exact
scan of ~60k x 384 vectors costs 10-60 ms per question on a shared CPU; the graph answers a
clause in well under a millisecond with the same top candidates.
"""

from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from graphs.errors import IndexCorruptError
from graphs.manifest import atomic_write_json, sha256_file

if TYPE_CHECKING:
    from graphs.embedding.embedder import Embedder
    from graphs.skb.model import SKB

PhraseKind = Literal["name", "synonym", "definition"]

#: Directory of the artifact inside an index (the manifest lists its files as ``phrases/<file>``).
PHRASE_DIR = "phrases"
GRAPH_FILE = "phrases.bin"
ENTRIES_FILE = "entries.json"
#: Definition sentences kept per node: the first ones say what the term is; later ones add detail.
MAX_DEFINITION_SENTENCES = 3
#: Shortest definition sentence worth a vector (shorter ones are fragments such as "e.g.").
MIN_SENTENCE_CHARS = 12
#: hnswlib build and search parameters (recall of the top 10 phrases ~0.99 at this size).
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 100
HNSW_EF = 96

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
    from graphs.skb.profile import profile_for

    linking = profile_for(skb).linking
    labels = set(linking.vocabulary_labels)
    if not labels:
        return
    for node in skb.iter_nodes():
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


def node_phrases(skb: SKB, key: str) -> list[tuple[PhraseKind, str]]:
    """(kind, text) of one vocabulary node's phrases, as ``phrase_entries`` lists them (empty for other nodes).

    Why a second function: ``phrase_entries``' source is part of the stored definition table's digest, so
    it stays as it is; this one serves query-time re-scoring (``agent.linking.rescoring``), one node at a time.
    """
    from graphs.skb.profile import profile_for

    node = skb.nodes.get(key)
    linking = profile_for(skb).linking
    if node is None or node.label not in set(linking.vocabulary_labels):
        return []
    ntype = skb.node_types.get(node.label)
    items: list[tuple[PhraseKind, str]] = [("name", node.name)]
    if ntype is not None and ntype.synonym_field:
        items.extend(("synonym", s) for s in _as_list(node.props.get(ntype.synonym_field)))
    for fld in linking.definition_fields:
        for text in _as_list(node.props.get(fld)):
            items.extend(("definition", s) for s in definition_sentences(text))
    out: list[tuple[PhraseKind, str]] = []
    seen: set[str] = set()
    for kind, text in items:
        text = " ".join(text.split())
        if text and text.lower() not in seen:
            seen.add(text.lower())
            out.append((kind, text))
    return out


class PhraseIndex:
    """A graph over phrase vectors (hnswlib's, or USearch's where ``mapped``), with the node key and kind of each
    row."""

    def __init__(self, graph: Any, keys: list[str], kinds: list[PhraseKind], *, mapped: bool = False) -> None:
        self.graph = graph
        self.keys = keys
        self.kinds = kinds
        #: The graph is USearch's, searched from its memory-mapped file once saved (``graphs.index.ann``).
        self.mapped = mapped
        #: Rows a search can return: a row whose key is "" is marked deleted in the graph (``graphs.update``).
        self.live = sum(1 for key in keys if key)

    def search_phrases(self, queries: np.ndarray, k: int, pool: int) -> list[list[tuple[str, list[float]]]]:
        """Per query row, the ``k`` best nodes by their best phrase, each with the cosines of all its phrases
        among the ``pool`` nearest phrases (best first).

        Why not every phrase of each node: reading vectors back out of the graph costs ~25 us a row, and a
        phrase outside the nearest ``pool`` is far enough below the best that a soft maximum hardly sees it.
        """
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if not self.live or not len(q):
            return [[] for _ in range(len(q))]
        ids, dists = self.graph.knn_query(q, k=min(self.live, max(pool, k)))
        out: list[list[tuple[str, list[float]]]] = []
        for row_ids, row_d in zip(ids, dists):
            sims: dict[str, list[float]] = {}
            for i, d in zip(row_ids.tolist(), row_d.tolist()):
                key = self.keys[int(i)]
                if key in sims:
                    sims[key].append(1.0 - float(d))
                elif len(sims) < k:
                    sims[key] = [1.0 - float(d)]
            out.append(sorted(sims.items(), key=lambda kv: -kv[1][0]))
        return out

    def __len__(self) -> int:
        return len(self.keys)

    def search(self, queries: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
        """Per query row, the ``k`` best nodes by their best phrase (cosine of unit vectors)."""
        q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if not self.live or not len(q):
            return [[] for _ in range(len(q))]
        pool = min(self.live, max(6 * k, 30))
        ids, dists = self.graph.knn_query(q, k=pool)
        out: list[list[tuple[str, float]]] = []
        for row_ids, row_d in zip(ids, dists):
            best: dict[str, float] = {}
            for i, d in zip(row_ids.tolist(), row_d.tolist()):
                key = self.keys[int(i)]
                if key not in best:
                    best[key] = 1.0 - float(d)
                    if len(best) >= k:
                        break
            out.append(sorted(best.items(), key=lambda kv: -kv[1]))
        return out

    # -- persistence -----------------------------------------------------------------
    def save(self, directory: Path) -> dict[str, str]:
        """Write the graph and the entries; returns ``{relative name: sha256}`` for the manifest."""
        from graphs.index.hnsw_shards import save_graph

        directory.mkdir(parents=True, exist_ok=True)
        graph_digest = save_graph(self.graph, directory / GRAPH_FILE)
        entries: dict[str, Any] = {"keys": self.keys, "kinds": self.kinds, **({"mapped": True} if self.mapped else {})}
        atomic_write_json(directory / ENTRIES_FILE, entries, indent=None)
        return {GRAPH_FILE: graph_digest, ENTRIES_FILE: sha256_file(directory / ENTRIES_FILE)}

    @classmethod
    def load(cls, directory: Path, dim: int, checksums: dict[str, str] | None = None) -> PhraseIndex:
        """Read the artifact, checking each file against the manifest's digest when given."""
        from graphs.index.ann import load_graph

        for name in (GRAPH_FILE, ENTRIES_FILE):
            path = directory / name
            expected = (checksums or {}).get(name)
            if expected is not None and sha256_file(path) != expected:
                raise IndexCorruptError(
                    f"{path} does not match the checksum in the manifest; rebuild the index with "
                    f"`skb index --force --index-dir {directory.parent}`"
                )
        raw = json.loads((directory / ENTRIES_FILE).read_text(encoding="utf-8"))
        keys, kinds, mapped = list(raw["keys"]), list(raw["kinds"]), bool(raw.get("mapped", False))
        graph = load_graph(directory / GRAPH_FILE, dim, mapped=mapped, space="ip", max_elements=len(keys))
        # a mapped graph counts its live rows; hnswlib's counts the rows marked deleted (blank keys) too
        count = sum(1 for key in keys if key) if mapped else len(keys)
        if graph.get_current_count() != count or len(kinds) != len(keys):
            raise IndexCorruptError(
                f"{directory} holds {graph.get_current_count()} vectors for {len(keys)} phrases; rebuild the "
                f"index with `skb index --force --index-dir {directory.parent}`"
            )
        graph.set_ef(HNSW_EF)
        graph.set_num_threads(1)
        return cls(graph, keys, kinds, mapped=mapped)


def build_phrase_index(
    skb: SKB, embedder: Embedder, *, batch: int = 512, progress: Callable[[int, int], None] | None = None,
    mapped: bool = False,
) -> PhraseIndex | None:
    """Embed every vocabulary phrase (None when the profile names no vocabulary labels); ``mapped``: a USearch
    graph, searched from its memory-mapped file once saved (``graphs.index.ann``)."""
    entries = list(phrase_entries(skb))
    if not entries:
        return None
    from graphs.embedding.embedder import embed_all

    vectors = embed_all(embedder, [text for _, _, text in entries], chunk=batch, progress=progress)
    return PhraseIndex(graph_of(vectors, mapped=mapped), [k for k, _, _ in entries],
                       [kind for _, kind, _ in entries], mapped=mapped)


def graph_of(vectors: np.ndarray, *, mapped: bool = False) -> Any:
    """An inner-product graph over unit vectors, ids = row numbers (USearch's where ``mapped``, else hnswlib's)."""
    from graphs.index.ann import new_graph
    from graphs.manifest import HNSWParams

    params = HNSWParams(M=HNSW_M, ef_construction=HNSW_EF_CONSTRUCTION, ef=HNSW_EF, mapped=mapped)
    graph = new_graph(int(vectors.shape[1]), len(vectors), params, 0, space="ip")
    graph.add_items(vectors, np.arange(len(vectors)))
    graph.set_ef(HNSW_EF)
    return graph


_LOADED: weakref.WeakKeyDictionary[Any, PhraseIndex | None] = weakref.WeakKeyDictionary()
_LOAD_LOCK = threading.Lock()


def has_phrase_index(bundle: Any) -> bool:
    """Whether the bundle's index holds the artifact, from its manifest alone (nothing is read).

    Why: the phrase graph is ~100 MB in memory on HPO; a question with no described clause must not
    load it, so callers ask this first and load (``phrase_index_for``) only when they use it."""
    manifest = getattr(bundle, "manifest", None)
    if manifest is None:
        return False
    listed = manifest.listed() if hasattr(manifest, "listed") else set(getattr(manifest, "files", {}) or {})
    return f"{PHRASE_DIR}/{GRAPH_FILE}" in listed and f"{PHRASE_DIR}/{ENTRIES_FILE}" in listed


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
        # large files are recorded in data_files (size + sampled digest), small ones in files
        listed = manifest.listed() if hasattr(manifest, "listed") else set(getattr(manifest, "files", {}) or {})
        prefix = PHRASE_DIR + "/"
        names = {name[len(prefix) :] for name in listed if name.startswith(prefix)}
        found: PhraseIndex | None = None
        if GRAPH_FILE in names and ENTRIES_FILE in names:
            # the bundle verified the manifest's files when it opened the index: no second hash here
            found = PhraseIndex.load(Path(index_dir) / PHRASE_DIR, int(manifest.embedder.dim))
        _LOADED[skb] = found
        return found
