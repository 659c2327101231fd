"""The agent's statistics stored at index time: entity-linker lexicon, name table, scoring models.

Why: building the lexicon (normalising ~60k names and synonyms) and the ontology scoring models
(transitive closure, propagated annotations, information content) took seconds on every process
start for the same index. ``skb index`` runs ``precompute_lexicon`` and ``precompute_scoring``
(``graphs.skb_state.PRECOMPUTERS``); ``agent.linking.lexicon_for`` and
``agent.ontology_scoring.model_for``/``find_hierarchy`` read the records back and fall back to
computing when a record is missing or was computed by other code or another domain profile (the
digest covers the source of the computing modules and the resolved profile).

Records keep node references as positions in the SKB's node order (``CompactSKB.node_keys``), so
the bulk is numpy arrays opened memory-mapped; only small tables are JSON.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
from scipy import sparse

from graphs.loaders.profiles import profile_for
from graphs.model import SKB, Edge, GraphSchema, Node
from graphs.skb_compact import code_digest
from graphs.skb_state import Record, digest_of, read_state, state_dir_of, write_state

LEXICON = "lexicon"
NAMES = "names"
SCORING = "scoring"
DEFINITIONS = "definitions"


def _profile_json(skb: SKB, section: str) -> str:
    """The profile section a record depends on (``linking`` for the lexicon, ``scoring`` for the models):
    a new knob elsewhere in the profile does not retire a valid record."""
    return str(getattr(profile_for(skb), section).model_dump_json())


_DIGESTS: weakref.WeakKeyDictionary[SKB, dict[str, str]] = weakref.WeakKeyDictionary()


def lexicon_digest(skb: SKB) -> str:
    """The code and profile the lexicon record depends on (computed once per SKB)."""
    per = _DIGESTS.setdefault(skb, {})
    if LEXICON not in per:
        from agent import linking as ln

        # only the computing functions, not whole modules: the linker changes often without touching the record
        code = code_digest(ln.build_lexicon, ln.frame_words, ln.normalise, ln.stem, ln._fold, ln._label_words, ln._Entry, ln.Lexicon,
                            sorted(ln.FRAME_WORDS), ln._ACRONYM.pattern)
        per[LEXICON] = digest_of(code, _profile_json(skb, "linking"))
    return per[LEXICON]


def definitions_digest(skb: SKB) -> str:
    """The code, profile and lexicon frame the definition table depends on (computed once per SKB)."""
    per = _DIGESTS.setdefault(skb, {})
    if DEFINITIONS not in per:
        from agent import clause_linking as cl
        from graphs import phrase_index as pi

        code = code_digest(cl.build_definition_table, cl.trim_frame, cl.MIN_DEFINITION_TOKENS, pi.phrase_entries,
                            pi.definition_sentences, pi.MAX_DEFINITION_SENTENCES, pi.MIN_SENTENCE_CHARS)
        per[DEFINITIONS] = digest_of(code, lexicon_digest(skb))
    return per[DEFINITIONS]


def scoring_digest(skb: SKB) -> str:
    """The code and profile the scoring record depends on (computed once per SKB)."""
    per = _DIGESTS.setdefault(skb, {})
    if SCORING not in per:
        from agent import ontology_scoring as os_

        code = code_digest(os_.build_model, os_._build_ancestors, os_.edge_weight, os_.detect_hierarchy,
                            os_.find_annotation, os_.AnnotationModel, os_.Hierarchy, os_.Annotation, os_.DEFAULT_EDGE_WEIGHT)
        per[SCORING] = digest_of(code, code_digest(Node, Edge), _profile_json(skb, "scoring"))
    return per[SCORING]


def _node_keys(skb: SKB) -> list[str]:
    keys = getattr(skb, "node_keys", None)
    return list(keys()) if callable(keys) else list(skb.nodes)


# -- lexicon ---------------------------------------------------------------------------------
def precompute_lexicon(skb: SKB, state_dir: Path, schema: GraphSchema | None = None) -> None:
    """Store the lexicon (name table, token index, prefix vocabulary) and the display-name table."""
    from agent.linking import build_lexicon

    lex = build_lexicon(skb)
    keys = _node_keys(skb)
    position = {key: i for i, key in enumerate(keys)}
    row_of = {toks: i for i, toks in enumerate(lex.table)}
    tokens: list[str] = []
    ptr = [0]
    nodes: list[int] = []
    primary: list[bool] = []
    case: dict[str, str] = {}
    for toks, entries in lex.table.items():
        tokens.append(" ".join(toks))
        for entry in entries:
            if entry.case_sensitive is not None:
                case[str(len(nodes))] = entry.case_sensitive
            nodes.append(position[entry.key])
            primary.append(entry.primary)
        ptr.append(len(nodes))
    vocab = list(lex.by_token)
    by_ptr = [0]
    by_rows: list[int] = []
    for token in vocab:
        by_rows.extend(row_of[toks] for toks in lex.by_token[token])
        by_ptr.append(len(by_rows))
    meta = {
        "tokens": tokens, "case": case, "frame": sorted(lex.frame), "max_len": lex.max_len, "vocab": vocab,
        "token_df": [lex.token_df[t] for t in vocab], "vocab_by_prefix": lex.vocab_by_prefix,
    }
    arrays: dict[str, np.ndarray] = {
        "ptr": np.asarray(ptr, dtype=np.int64),
        "node": np.asarray(nodes, dtype=np.int32),
        "primary": np.asarray(primary, dtype=np.bool_),
        "by_ptr": np.asarray(by_ptr, dtype=np.int64),
        "by_rows": np.asarray(by_rows, dtype=np.int32),
    }
    write_state(state_dir, LEXICON, lexicon_digest(skb), meta, arrays)
    write_state(state_dir, NAMES, lexicon_digest(skb), {"names": [skb.nodes[key].name for key in keys]}, {})


def precompute_definitions(skb: SKB, state_dir: Path, schema: GraphSchema | None = None) -> None:
    """Store the definition table (``agent.clause_linking.DefinitionTable``): sorted sentences, node positions."""
    from agent.clause_linking import build_definition_table
    from agent.linking import frame_words
    from graphs.phrase_index import phrase_entries

    table = build_definition_table(phrase_entries(skb), frame_words(skb))
    position = {key: i for i, key in enumerate(_node_keys(skb))}
    ptr = np.zeros(len(table.keys) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(keys) for keys in table.keys])
    nodes = np.asarray([position[key] for keys in table.keys for key in keys], dtype=np.int32)
    meta = {"sentences": [" ".join(toks) for toks in table.sentences]}
    write_state(state_dir, DEFINITIONS, definitions_digest(skb), meta, {"ptr": ptr, "node": nodes})


def stored_definitions(skb: SKB) -> Any:
    """The stored ``DefinitionTable`` of ``skb``'s index, or None (build it instead)."""
    found = _stored(skb, DEFINITIONS, definitions_digest)
    if found is None:
        return None
    from agent.clause_linking import DefinitionTable

    meta, arrays = found
    keys = _node_keys(skb)
    ptr, node = np.asarray(arrays["ptr"]), np.asarray(arrays["node"])
    sentences = [tuple(joined.split(" ")) for joined in meta["sentences"]]
    return DefinitionTable(sentences, [tuple(keys[int(n)] for n in node[ptr[i] : ptr[i + 1]]) for i in range(len(sentences))])


class _StoredTable(Mapping[tuple[str, ...], list[Any]]):
    """The lexicon's token tuple -> entries table over the stored arrays; entries built on first lookup."""

    def __init__(self, tokens: list[str], arrays: dict[str, np.ndarray], keys: list[str], case: dict[str, str]):
        self._tokens = tokens
        self._row = {joined: i for i, joined in enumerate(tokens)}
        self._ptr, self._node, self._primary = arrays["ptr"], arrays["node"], arrays["primary"]
        self._keys = keys
        self._case = case
        self._cache: dict[int, list[Any]] = {}

    def entries(self, row: int) -> list[Any]:
        hit = self._cache.get(row)
        if hit is None:
            from agent.linking import _Entry

            lo, hi = int(self._ptr[row]), int(self._ptr[row + 1])
            hit = [
                _Entry(self._keys[int(n)], bool(p), self._case.get(str(j)))
                for j, n, p in zip(range(lo, hi), self._node[lo:hi].tolist(), self._primary[lo:hi].tolist())
            ]
            self._cache[row] = hit
        return hit

    def __getitem__(self, toks: tuple[str, ...]) -> list[Any]:
        return self.entries(self._row[" ".join(toks)])

    def get(self, toks: tuple[str, ...], default: Any = None) -> Any:  # type: ignore[override]
        row = self._row.get(" ".join(toks))
        return default if row is None else self.entries(row)

    def __contains__(self, toks: object) -> bool:
        return isinstance(toks, tuple) and " ".join(toks) in self._row

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        return (tuple(joined.split(" ")) for joined in self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)


class _StoredIndex(Mapping[str, list[tuple[str, ...]]]):
    """The lexicon's token -> name tuples index over the stored arrays."""

    def __init__(self, vocab: list[str], arrays: dict[str, np.ndarray], tokens: list[str]) -> None:
        self._vocab = vocab
        self._pos = {t: i for i, t in enumerate(vocab)}
        self._ptr, self._rows = arrays["by_ptr"], arrays["by_rows"]
        self._tokens = tokens

    def __getitem__(self, token: str) -> list[tuple[str, ...]]:
        i = self._pos[token]
        rows = self._rows[int(self._ptr[i]) : int(self._ptr[i + 1])].tolist()
        return [tuple(self._tokens[r].split(" ")) for r in rows]

    def get(self, token: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[token] if token in self._pos else default

    def __contains__(self, token: object) -> bool:
        return token in self._pos

    def __iter__(self) -> Iterator[str]:
        return iter(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)


def _stored(skb: SKB, record: str, digest: Callable[[SKB], str]) -> Record | None:
    """``record``'s (meta, arrays) from ``skb``'s index when stored by the current code, else None."""
    if state_dir_of(skb) is None:
        return None
    return read_state(skb, record, digest(skb))


def stored_lexicon(skb: SKB) -> Any:
    """The stored ``agent.linking.Lexicon`` of ``skb``'s index, or None (compute it instead).

    Lookups build entries on demand: opening costs two dictionaries of strings, not ~60k objects."""
    found = _stored(skb, LEXICON, lexicon_digest)
    if found is None:
        return None
    from agent.linking import Lexicon

    meta, arrays = found
    tokens: list[str] = meta["tokens"]
    vocab: list[str] = meta["vocab"]
    return Lexicon(
        table=cast("dict[tuple[str, ...], list[Any]]", _StoredTable(tokens, arrays, _node_keys(skb), meta["case"])),
        max_len=int(meta["max_len"]),
        by_token=cast("dict[str, list[tuple[str, ...]]]", _StoredIndex(vocab, arrays, tokens)),
        token_df=dict(zip(vocab, meta["token_df"], strict=True)),
        vocab_by_prefix={str(k): list(v) for k, v in meta["vocab_by_prefix"].items()},
        frame=frozenset(meta["frame"]),
    )


def stored_names(skb: SKB) -> dict[str, list[str]] | None:
    """Exact display name -> node keys, from the stored lexicon record (None: compute it)."""
    found = _stored(skb, NAMES, lexicon_digest)
    if found is None:
        return None
    names = found[0].get("names")
    keys = _node_keys(skb)
    if not isinstance(names, list) or len(names) != len(keys):
        return None
    table: dict[str, list[str]] = defaultdict(list)
    for name, key in zip(names, keys, strict=True):
        table[name].append(key)
    return dict(table)


# -- scoring models --------------------------------------------------------------------------
#: At most this many (target, term) models are stored per index (a schema with many labels has many pairs).
MAX_STORED_MODELS = 16


def precompute_scoring(skb: SKB, state_dir: Path, schema: GraphSchema | None = None) -> None:
    """Store every label's hierarchy and the scoring models of label pairs linked by a relation.

    Pairs whose term label has a hierarchy come first (the information-content ranking), then the
    others by annotation count, up to ``MAX_STORED_MODELS``; any other pair is computed on demand."""
    from agent.ontology_scoring import _META_LOCK, _SCHEMAS, build_model, detect_hierarchy, find_annotation, schema_for

    if schema is not None:
        with _META_LOCK:
            _SCHEMAS.setdefault(skb, schema)  # the build computed it once already
    schema = schema_for(skb)
    labels = schema.label_names()
    position = {key: i for i, key in enumerate(_node_keys(skb))}
    by_rel: dict[str, list[Any]] = defaultdict(list)
    for edge in skb.edges:  # one pass; each computation below then reads only its relations' edges
        by_rel[edge.rel].append(edge)
    hierarchies: dict[str, list[str] | None] = {}
    found: dict[str, Any] = {}
    for label in labels:
        self_rels = {r.rel for r in schema.relations if r.src_label == label and r.dst_label == label}
        found[label] = detect_hierarchy(_with_edges(skb, by_rel, self_rels), label)
        hierarchy = found[label]
        hierarchies[label] = None if hierarchy is None else [hierarchy.rel, hierarchy.narrow_to_broad]
    counts = {(r.rel, r.src_label, r.dst_label): r.count for r in schema.relations}
    pairs = []
    for term_label in labels:
        for target_label in labels:
            annotation = None if target_label == term_label else find_annotation(schema, target_label, term_label)
            if annotation is None:
                continue
            ends = (target_label, term_label) if annotation.direction == "out" else (term_label, target_label)
            weight = counts.get((annotation.rel, *ends), 0)
            pairs.append((found[term_label] is None, -weight, target_label, term_label, annotation))
    pairs.sort(key=lambda p: p[:4])
    models: list[dict[str, Any]] = []
    arrays: dict[str, np.ndarray] = {}
    for _, _, target_label, term_label, annotation in pairs[:MAX_STORED_MODELS]:
        rels = {annotation.rel} | ({found[term_label].rel} if found[term_label] is not None else set())
        model = build_model(_with_edges(skb, by_rel, rels), annotation, found[term_label])
        tag = f"m{len(models)}"
        models.append({
            "tag": tag, "target_label": target_label, "term_label": term_label,
            "rel": annotation.rel, "direction": annotation.direction, "max_ic": model.max_ic,
            "frequency_mix": model.frequency_mix, "size_penalty": model.size_penalty,
            "symmetric": model.symmetric,
        })
        arrays[f"{tag}.terms"] = np.asarray([position[k] for k in model.terms], dtype=np.int32)
        arrays[f"{tag}.targets"] = np.asarray([position[k] for k in model.targets], dtype=np.int32)
        arrays[f"{tag}.ic"] = np.asarray(model.ic, dtype=np.float32)
        for name in ("ancestors", "direct", "propagated"):
            matrix = getattr(model, name)
            arrays[f"{tag}.{name}.data"] = matrix.data
            arrays[f"{tag}.{name}.indices"] = matrix.indices
            arrays[f"{tag}.{name}.indptr"] = matrix.indptr
    write_state(state_dir, SCORING, scoring_digest(skb), {"hierarchies": hierarchies, "models": models}, arrays)


def _with_edges(skb: SKB, by_rel: dict[str, list[Any]], rels: set[str]) -> SKB:
    """A shallow copy of ``skb`` holding only the edges of ``rels`` (each relation's edges in their order).

    Why: the computations filter edges by relation; giving them only those edges makes building
    the stored models several times faster with identical results (they never mix two relations'
    edges in one loop, so the order within each relation is all that matters)."""
    import copy

    from agent.ontology_scoring import _META_LOCK, _SCHEMAS, schema_for

    view = copy.copy(skb)
    view.edges = [edge for rel in sorted(rels) for edge in by_rel.get(rel, ())]
    schema = schema_for(skb)
    with _META_LOCK:
        _SCHEMAS[view] = schema  # the whole SKB's schema (relation counts), not the view's
    return view


def stored_hierarchy(skb: SKB, label: str) -> tuple[bool, Any]:
    """``(True, Hierarchy | None)`` when the index stores ``label``'s hierarchy; ``(False, None)`` otherwise."""
    found = _stored(skb, SCORING, scoring_digest)
    if found is None or label not in found[0]["hierarchies"]:
        return False, None
    from agent.ontology_scoring import Hierarchy

    value = found[0]["hierarchies"][label]
    return True, None if value is None else Hierarchy(label, str(value[0]), value[1])


def stored_model(skb: SKB, target_label: str, term_label: str) -> Any:
    """The stored ``AnnotationModel`` for the pair, or None (not stored: compute it)."""
    found = _stored(skb, SCORING, scoring_digest)
    if found is None:
        return None
    meta, arrays = found
    spec = next(
        (m for m in meta["models"] if m["target_label"] == target_label and m["term_label"] == term_label), None
    )
    if spec is None:
        return None
    from agent.ontology_scoring import Annotation, AnnotationModel

    has, hierarchy = stored_hierarchy(skb, term_label)
    keys = _node_keys(skb)
    tag = spec["tag"]
    terms = [keys[i] for i in arrays[f"{tag}.terms"].tolist()]
    targets = [keys[i] for i in arrays[f"{tag}.targets"].tolist()]
    shape_tt = (len(targets), len(terms))

    def matrix(name: str, kind: type[sparse.csr_matrix | sparse.csc_matrix], shape: tuple[int, int]) -> Any:
        parts = (
            np.array(arrays[f"{tag}.{name}.data"]),
            np.array(arrays[f"{tag}.{name}.indices"]),
            np.array(arrays[f"{tag}.{name}.indptr"]),
        )
        return kind(parts, shape=shape)

    return AnnotationModel(
        terms=terms,
        term_index={k: i for i, k in enumerate(terms)},
        targets=targets,
        target_index={k: i for i, k in enumerate(targets)},
        ancestors=matrix("ancestors", sparse.csr_matrix, (len(terms), len(terms))),
        direct=matrix("direct", sparse.csr_matrix, shape_tt),
        propagated=matrix("propagated", sparse.csc_matrix, shape_tt),
        ic=np.array(arrays[f"{tag}.ic"], dtype=np.float32),
        max_ic=float(spec["max_ic"]),
        hierarchy=hierarchy if has else None,
        annotation=Annotation(target_label, term_label, str(spec["rel"]), spec["direction"]),
        frequency_mix=float(spec["frequency_mix"]),
        size_penalty=float(spec["size_penalty"]),
        symmetric=float(spec["symmetric"]),
    )


def link_pairs(
    skb: SKB, rel: str, row_label: str, target_index: dict[str, int]
) -> tuple[list[str], np.ndarray, np.ndarray] | None:
    """``(row keys, rows, cols)`` of ``rel`` edges (either direction) from ``row_label`` nodes to the
    targets of ``target_index``, vectorised over a memory-mapped SKB's arrays; None for other SKBs
    (``ontology_scoring.link_matrix`` then scans the edges)."""
    from graphs.skb_compact import CompactSKB

    if not isinstance(skb, CompactSKB):
        return None
    rels, rel_ids, src, dst = skb.edge_arrays()
    labels, node_label = skb.label_ids()
    keys = skb.node_keys()
    n = len(keys)
    row_nodes = np.flatnonzero(np.asarray(node_label) == labels.index(row_label)) if row_label in labels else np.zeros(0, dtype=np.int64)
    row_of = np.full(n, -1, dtype=np.int64)
    row_of[row_nodes] = np.arange(len(row_nodes))
    col_of = np.full(n, -1, dtype=np.int64)
    if target_index:
        col_of[skb.positions(list(target_index))] = np.fromiter(target_index.values(), dtype=np.int64, count=len(target_index))
    if rel in rels:
        mask = np.asarray(rel_ids) == rels.index(rel)
        s, d = np.asarray(src)[mask], np.asarray(dst)[mask]
    else:
        s = d = np.zeros(0, dtype=np.int64)
    a, b = np.concatenate([s, d]), np.concatenate([d, s])
    rows, cols = row_of[a], col_of[b]
    keep = (rows >= 0) & (cols >= 0)
    return [keys[i] for i in row_nodes.tolist()], rows[keep], cols[keep]
