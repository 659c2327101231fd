"""Semantic chunking of plain documents into Chunk nodes (SAGE's document side).

Why semantic rather than fixed-size chunks: a retriever returns whole chunks, and a
chunk that straddles two topics matches neither question well. Following SAGE, each
sentence is represented by the embedding of its window ``[s_{i-1}, s_i, s_{i+1}]``
(one sentence alone is too short to embed reliably); where the cosine between adjacent
windows drops to or below a low percentile of the document's own adjacent cosines
(default the 20th), the topic changed, and a chunk ends there (placed exactly where
the non-overlapping windows on either side of the dip differ most). A per-document
percentile adapts to how homogeneous each document is, which no absolute cut-off does.

Graph produced by :func:`load_documents`:

- ``Document`` (key = path relative to the folder, POSIX style): name (first Markdown
  heading, else the first line of a .txt file when it is short, else the file name), text, path.
- ``Chunk`` (key = ``f"{doc}#{i}"``): name (``"<doc title> [i+1/n]"``), text, doc, index,
  first/last sentence numbers.
- ``(:Chunk)-[:PART_OF]->(:Document)``, ``(:Chunk)-[:NEXT]->(:Chunk)`` in reading order,
  and ``(:Chunk)-[:IS_SIMILAR {score, fields}]-(:Chunk)`` from :mod:`graphs.sage.edges` over the
  chunk texts (across documents as well as within one).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from graphs.errors import ConfigError, LoaderError
from graphs.skb.model import SKB, Edge, Node, NodeType

if TYPE_CHECKING:
    from graphs.embedding.embedder import Embedder

__all__ = [
    "CHUNK",
    "DOCUMENT",
    "Chunk",
    "chunk_document",
    "load_documents",
    "semantic_boundaries",
    "split_sentences",
]

DOCUMENT = "Document"
CHUNK = "Chunk"
DOC_SUFFIXES = (".txt", ".md", ".markdown")

NODE_TYPES = [
    NodeType(
        label=DOCUMENT,
        description="A source document (a .txt or .md file); its text is split into Chunk nodes",
        text_fields=["name"],
    ),
    NodeType(
        label=CHUNK,
        description="A semantically coherent passage of a Document (consecutive sentences on one topic)",
        text_fields=["name", "text"],
    ),
]

# Tokens ending in a period that do not end a sentence. Lower-cased, without the final period.
_ABBREVIATIONS = frozenset(
    (
        "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "etc", "al", "fig", "figs", "eq", "eqs",
        "no", "nos", "vol", "vols", "p", "pp", "ch", "sec", "approx", "ca", "cf", "e.g", "i.e", "viz", "resp",
        "dept", "univ", "inc", "ltd", "co", "corp", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
        "oct", "nov", "dec", "mon", "tue", "wed", "thu", "fri", "sat", "sun", "gen", "gov", "col", "lt", "sgt",
        "capt", "ref", "refs",
    )
)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
# A candidate boundary: terminal punctuation (with closing quotes/brackets), whitespace,
# then something that can start a sentence.
_BOUNDARY = re.compile(r"([.!?]+[\"'\u201d\u2019)\]]*)\s+(?=[\"'\u201c\u2018(\[]?[A-Z0-9\u00C0-\u024F])")


def _is_abbreviation(before: str) -> bool:
    """Does the text before a period end in an abbreviation, an initial or a number?"""
    token = before.rsplit(None, 1)[-1] if before.split() else ""
    token = token.lstrip("(\"'[\u201c\u2018")
    low = token.lower().rstrip(".")
    if not low:
        return False
    if low in _ABBREVIATIONS:
        return True
    if len(low) == 1 and low.isalpha():
        return True  # an initial: "J. Smith", "Fig. S. 2"
    return re.fullmatch(r"(?:[a-z]\.)+[a-z]", low) is not None  # "e.g", "u.s"


def _split_paragraph(text: str) -> list[str]:
    out: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(text):
        punct = m.group(1)
        single_period = punct.startswith(".") and len(punct.rstrip("\"'\u201d\u2019)]")) == 1
        if single_period and _is_abbreviation(text[start : m.start()]):
            continue
        piece = text[start : m.end(1)].strip()
        if piece:
            out.append(piece)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences of a plain or Markdown text.

    Blank lines, Markdown headings and list items always end a sentence (they are
    structure, not prose); inside a paragraph a sentence ends at ``.``, ``!`` or ``?``
    followed by whitespace and a capital or digit, except after common abbreviations
    (``e.g.``, ``Dr.``, ``et al.``, ``Fig.``) and single-letter initials.
    """
    sentences: list[str] = []
    block: list[str] = []

    def flush() -> None:
        if block:
            sentences.extend(_split_paragraph(" ".join(block)))
            block.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("```"):
            flush()
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            sentences.append(heading.group(1).strip())
            continue
        if _LIST_ITEM.match(line):
            flush()
            block.append(_LIST_ITEM.sub("", line, count=1).strip())
            continue
        block.append(stripped)
    flush()
    return [s for s in sentences if s]


def _windows(sentences: Sequence[str], radius: int) -> list[str]:
    n = len(sentences)
    return [" ".join(sentences[max(0, i - radius) : min(n, i + radius + 1)]) for i in range(n)]


def semantic_boundaries(
    sentences: Sequence[str],
    embedder: Embedder,
    *,
    percentile: float = 20.0,
    window: int = 1,
    min_chunk_sentences: int = 2,
    max_chunk_sentences: int | None = None,
) -> list[int]:
    """Indices ``i`` such that a chunk ends after sentence ``i``.

    Candidates are the gaps whose adjacent-window cosine is at or below the
    ``percentile`` of the document's gaps, taken lowest cosine first. Each is moved
    within ``window`` sentences to where the non-overlapping windows on either side are
    least alike (overlapping windows smear one topic change over several gaps), and is
    skipped if it would leave a chunk shorter than ``min_chunk_sentences``.
    ``max_chunk_sentences`` then splits over-long chunks at their own lowest gap.
    """
    if not 0.0 <= percentile <= 100.0:
        raise ConfigError(f"chunking percentile must be in [0, 100], got {percentile}")
    if window < 0:
        raise ConfigError(f"chunking window radius must be >= 0, got {window}")
    if min_chunk_sentences < 1:
        raise ConfigError(f"min_chunk_sentences must be >= 1, got {min_chunk_sentences}")
    if max_chunk_sentences is not None and max_chunk_sentences < min_chunk_sentences:
        raise ConfigError("max_chunk_sentences must be >= min_chunk_sentences")
    n = len(sentences)
    if n < 2 * min_chunk_sentences:
        return []
    vecs = np.asarray(embedder.embed(_windows(sentences, window)), dtype=np.float32)
    vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    gaps = np.einsum("ij,ij->i", vecs[:-1], vecs[1:])  # gaps[i]: between sentence i and i+1
    # Overlapping windows dip over up to 2*window+1 neighbouring gaps around one topic change,
    # and the deepest is not always the true one. The cut is placed where the windows just
    # before and just after the gap (which do not overlap) are least alike.
    last = n - 1
    before = np.clip(np.arange(n - 1) - window, 0, last)
    after = np.clip(np.arange(n - 1) + 1 + window, 0, last)
    across = np.einsum("ij,ij->i", vecs[before], vecs[after])
    threshold = float(np.percentile(gaps, percentile))
    cuts: list[int] = []
    for i in np.argsort(gaps, kind="stable"):
        if gaps[i] > threshold:
            break
        lo, hi = max(0, int(i) - window), min(n - 2, int(i) + window)
        cut = lo + int(np.argmin(across[lo : hi + 1]))
        if cut not in cuts and _fits(cuts, cut, n, min_chunk_sentences):
            cuts.append(cut)
    cuts.sort()
    if max_chunk_sentences is not None:
        cuts = _split_long(cuts, gaps, n, min_chunk_sentences, max_chunk_sentences)
    return cuts


def _fits(cuts: list[int], cut: int, n: int, min_len: int) -> bool:
    edges = sorted([-1, *cuts, cut, n - 1])
    return all(b - a >= min_len for a, b in itertools.pairwise(edges))


def _split_long(cuts: list[int], gaps: np.ndarray, n: int, min_len: int, max_len: int) -> list[int]:
    out = list(cuts)
    changed = True
    while changed:
        changed = False
        edges = [-1, *sorted(out), n - 1]
        for a, b in itertools.pairwise(edges):
            if b - a <= max_len:
                continue
            lo, hi = a + min_len, b - min_len  # a cut at c makes chunks (a, c] and (c, b]
            if lo > hi:
                continue
            c = lo + int(np.argmin(gaps[lo : hi + 1]))
            out.append(c)
            changed = True
            break
    return sorted(out)


@dataclass(frozen=True)
class Chunk:
    """Consecutive sentences ``first..last`` (inclusive) of one document."""

    index: int
    first: int
    last: int
    text: str


def chunk_document(
    text: str,
    embedder: Embedder,
    *,
    percentile: float = 20.0,
    window: int = 1,
    min_chunk_sentences: int = 2,
    max_chunk_sentences: int | None = 40,
) -> list[Chunk]:
    """Split a document into semantically coherent chunks (see :func:`semantic_boundaries`)."""
    sentences = split_sentences(text)
    if not sentences:
        return []
    cuts = semantic_boundaries(
        sentences,
        embedder,
        percentile=percentile,
        window=window,
        min_chunk_sentences=min_chunk_sentences,
        max_chunk_sentences=max_chunk_sentences,
    )
    chunks: list[Chunk] = []
    start = 0
    for end in [*cuts, len(sentences) - 1]:
        chunks.append(Chunk(index=len(chunks), first=start, last=end, text=" ".join(sentences[start : end + 1])))
        start = end + 1
    return chunks


def _title(path: Path, text: str) -> str:
    for line in text.splitlines():
        m = _HEADING.match(line)
        if m:
            return m.group(1).strip()
    if path.suffix == ".txt":
        for line in text.splitlines():
            line = line.strip()
            if line:
                return line if len(line) <= 100 and not line.endswith(".") else path.stem
    return path.stem


def load_documents(
    folder: Path,
    embedder: Embedder | None = None,
    *,
    name: str | None = None,
    percentile: float = 20.0,
    window: int = 1,
    min_chunk_sentences: int = 2,
    max_chunk_sentences: int | None = 40,
    similarity_percentile: float | None = 95.0,
    similarity_knn: int = 10,
) -> SKB:
    """An SKB of Document and Chunk nodes from the .txt/.md files under ``folder`` (recursive).

    ``embedder`` defaults to the offline MiniLM model. ``similarity_percentile=None``
    skips the IS_SIMILAR edges between chunks.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise LoaderError(str(folder), "not a directory", fix="pass a folder of .txt or .md files")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in DOC_SUFFIXES)
    files = [p for p in files if not any(part.startswith(".") for part in p.relative_to(folder).parts)]
    if not files:
        raise LoaderError(str(folder), "no .txt or .md files found", fix="put plain-text or Markdown documents there")
    if embedder is None:
        from graphs.embedding.embedder import get_embedder

        embedder = get_embedder("minilm")
    skb = SKB(name or folder.name or "docs", NODE_TYPES)
    for path in files:
        rel = path.relative_to(folder).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise LoaderError(str(path), f"not UTF-8 text ({exc})", fix="convert the file to UTF-8") from exc
        title = _title(path, text)
        skb.add_node(Node(key=rel, label=DOCUMENT, props={"name": title, "text": text, "path": rel}), source=str(path))
        chunks = chunk_document(
            text,
            embedder,
            percentile=percentile,
            window=window,
            min_chunk_sentences=min_chunk_sentences,
            max_chunk_sentences=max_chunk_sentences,
        )
        previous: str | None = None
        for ch in chunks:
            key = f"{rel}#{ch.index}"
            props = {
                "name": f"{title} [{ch.index + 1}/{len(chunks)}]",
                "text": ch.text,
                "doc": rel,
                "index": ch.index,
                "first_sentence": ch.first,
                "last_sentence": ch.last,
            }
            skb.add_node(Node(key=key, label=CHUNK, props=props), source=str(path))
            skb.add_edge(Edge(src=key, rel="PART_OF", dst=rel))
            if previous is not None:
                skb.add_edge(Edge(src=previous, rel="NEXT", dst=key))
            previous = key
    if similarity_percentile is not None:
        from graphs.sage.edges import SimilarityConfig, add_similarity_edges, build_similarity_edges

        if len(skb.nodes_of(CHUNK)) >= 2:
            sim = build_similarity_edges(
                skb,
                None,
                embedder,
                SimilarityConfig(percentile=similarity_percentile, knn=similarity_knn),
                fields={CHUNK: ["text"]},
            )
            add_similarity_edges(skb, sim)
    skb.validate(source=str(folder))
    return skb
