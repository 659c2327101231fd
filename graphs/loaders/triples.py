"""Triple files (``head|relation|tail`` or tab-separated, optionally ``.gz``) into an SKB, typed by a profile.

Why a profile: a triples file has names and relation names only. Node labels come from the
profile's relation signatures (``directed_by = "Movie -> Person"``: every head of
``directed_by`` is a Movie, every tail a Person); what the profile leaves out, or all of it when there
is none, is induced from the triples (``graphs.skb.induce``).

Node key = the entity name, exactly as written (case and accents kept), so benchmark answer
lists of names match node keys.

A name in several roles (a person who acts and directs, a tag spelled like a title, a title
that is a year) is ONE node: its key must be the plain name, and two nodes cannot share a key.
Its label is the highest-precedence label among its roles (``label_precedence``, entity labels
before ``literal_labels``); the other labels are kept in the ``roles`` property, and all its edges
stay attached, so a walk along any relation still reaches it. Planners therefore read the
relations a node actually has (not only those its label suggests) when they choose a path.
"""

from __future__ import annotations

import codecs
import gc
import gzip
from pathlib import Path

from graphs.errors import LoaderError
from graphs.loaders.lines import MAX_LINE_BYTES, check_data_path, line_blocks
from graphs.skb.induce import merge
from graphs.skb.model import SKB, Edge, Node, NodeType
from graphs.skb.names import NAME_FIX, key_problem, name_problem
from graphs.skb.profile import Profile, load_profile

#: File names looked for when ``path`` is a directory.
CANDIDATE_FILES = ("kb.txt", "kb.tsv", "triples.txt", "triples.tsv")


def _resolve(path: Path) -> Path:
    check_data_path(path)
    if path.is_file():
        return path
    if path.is_dir():
        for name in CANDIDATE_FILES:
            for cand in (path / name, path / f"{name}.gz"):
                if cand.is_file():
                    return cand
        raise LoaderError(
            str(path), "no triples file in this directory", fix=f"name it one of {', '.join(CANDIDATE_FILES)} or pass the file"
        )
    raise LoaderError(str(path), "file not found", fix="pass a head|relation|tail file (or tab-separated, .gz ok)")


def _lines(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> list[str]:
    """The file's lines (``str.splitlines``), read in bounded blocks (``graphs.loaders.lines``)."""
    lines: list[str] = []
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as fh:
            for block in line_blocks(fh, str(path), max_line_bytes=max_line_bytes):
                if not lines and block.startswith(codecs.BOM_UTF8):
                    # a byte-order mark (Windows editors write one) must not become part of the first key
                    block = block[len(codecs.BOM_UTF8):]
                lines.extend(block.decode("utf-8").splitlines())
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise LoaderError(str(path), f"cannot read ({exc})", fix="the file must be UTF-8 text (gzip ok)") from exc
    return lines


def read_triples(path: Path, max_line_bytes: int = MAX_LINE_BYTES) -> list[tuple[str, str, str]]:
    """Distinct (head, relation, tail) triples in file order; blank lines and ``#`` comments skipped.

    The separator is a tab if the first data line has one, else ``|``. A tail may contain the
    separator (the line is split at the first two). A line over ``max_line_bytes`` is refused before
    it is read whole.
    """
    path = _resolve(Path(path))
    lines = _lines(path, max_line_bytes)
    sep: str | None = None
    out: list[tuple[str, str, str]] = []
    seen: set[tuple[str, str, str]] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        if sep is None:
            sep = "\t" if "\t" in line else "|"
        parts = line.split(sep, 2)
        if len(parts) != 3:
            raise LoaderError(
                str(path), f"expected head{sep}relation{sep}tail, got {line[:80]!r}", record=f"line {lineno}",
                fix="one triple per line, three fields",
            )
        head, rel, tail = (p.strip() for p in parts)
        if not head or not rel or not tail:
            raise LoaderError(str(path), f"empty field in {line[:80]!r}", record=f"line {lineno}",
                              fix="every triple needs a head, a relation and a tail")
        problem = name_problem(rel)
        if problem:
            raise LoaderError(str(path), f"relation {rel!r} {problem}", record=f"line {lineno}", fix=NAME_FIX)
        for end, name in (("head", head), ("tail", tail)):
            problem = key_problem(name)
            if problem:  # the name is the node's key
                raise LoaderError(str(path), f"the {end} {name[:60]!r}... {problem}", record=f"line {lineno}",
                                  fix="shorten the name (node keys are names in a triples file)")
        triple = (head, rel, tail)
        if triple not in seen:
            seen.add(triple)
            out.append(triple)
    return out


def load_triples(path: Path, profile: Profile | Path | None = None) -> SKB:
    """Load a triples file into an SKB typed by ``profile`` (a Profile, a profile file, or None)."""
    given = load_profile(profile) if isinstance(profile, Path | str) else profile
    triples = read_triples(Path(path))
    src = str(path)
    # what the profile leaves unwritten (types, relation words, planner settings) is read from the data
    prof = merge(given, triples)
    roles: dict[str, set[str]] = {}
    for head, rel, tail in triples:
        spec = prof.relations.get(rel)
        h_label = spec.head_label if spec else prof.default_label
        t_label = spec.tail_label if spec else prof.default_label
        roles.setdefault(head, set()).add(h_label)
        roles.setdefault(tail, set()).add(t_label)
    labels_used = sorted({lab for labs in roles.values() for lab in labs})
    types = [
        NodeType(label=lab, description=prof.labels[lab].description if lab in prof.labels else "")
        for lab in labels_used
    ]
    skb = SKB(prof.name, types)
    skb.profile = prof
    rank = prof.precedences(labels_used)  # once per label, not once per name
    was_enabled = gc.isenabled()
    gc.disable()  # hundreds of thousands of small objects, none cyclic
    try:
        for name, labs in roles.items():
            ordered = sorted(labs, key=lambda lab: (rank[lab], lab))
            props: dict[str, object] = {"name": name}
            if len(ordered) > 1:
                props["roles"] = ordered
            skb.add_node(Node(name, ordered[0], props), source=src)
        for head, rel, tail in triples:
            skb.add_edge(Edge(head, rel, tail))
    finally:
        if was_enabled:
            gc.enable()
    return skb
