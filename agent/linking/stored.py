"""The linker's tables stored at index time: lexicon, display-name table, definition sentences.

Why: building the lexicon (normalising ~60k names and synonyms) took seconds on every process start for
the same index. ``skb index`` runs ``precompute_lexicon`` and ``precompute_definitions`` (registered as
``skb_agent.index_state`` entry points, see ``graphs.skb.state.precompute``); ``lexicon_for`` and
``definition_table_for`` read the records back and fall back to computing when a record is missing or
was computed by other code or another domain profile (the digest covers the source of the computing
functions and the profile's ``linking`` section).

Records keep node references as positions in the SKB's node order (``CompactSKB.node_keys``), so the
bulk is numpy arrays opened memory-mapped; only small tables are JSON.
"""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from agent.linking import definitions as df
from agent.linking import lexicon as lx
from agent.linking.definitions import DefinitionTable, build_definition_table
from agent.linking.lexicon import Lexicon, _Entry, build_lexicon, frame_words
from graphs.index import phrases as pi
from graphs.index.phrases import phrase_entries
from graphs.skb.digest import code_digest
from graphs.skb.model import SKB, GraphSchema
from graphs.skb.state import PerSKB, digest_of, node_keys, profile_section_json, stored_record, write_state

LEXICON = "lexicon"
NAMES = "names"
DEFINITIONS = "definitions"

_DIGESTS: weakref.WeakKeyDictionary[SKB, dict[str, str]] = weakref.WeakKeyDictionary()


def lexicon_digest(skb: SKB) -> str:
    """The code and profile the lexicon record depends on (computed once per SKB)."""
    per = _DIGESTS.setdefault(skb, {})
    if LEXICON not in per:
        # only the computing functions, not whole modules: the linker changes often without touching the record
        code = code_digest(lx.build_lexicon, lx.frame_words, lx.normalise, lx.stem, lx._fold, lx._label_words, lx._Entry, lx.Lexicon,
                            sorted(lx.FRAME_WORDS), lx._ACRONYM.pattern)
        per[LEXICON] = digest_of(code, profile_section_json(skb, "linking"))
    return per[LEXICON]


def definitions_digest(skb: SKB) -> str:
    """The code, profile and lexicon frame the definition table depends on (computed once per SKB)."""
    per = _DIGESTS.setdefault(skb, {})
    if DEFINITIONS not in per:
        code = code_digest(df.build_definition_table, df.trim_frame, df.MIN_DEFINITION_TOKENS, pi.phrase_entries,
                            pi.definition_sentences, pi.MAX_DEFINITION_SENTENCES, pi.MIN_SENTENCE_CHARS)
        per[DEFINITIONS] = digest_of(code, lexicon_digest(skb))
    return per[DEFINITIONS]


# -- lexicon ---------------------------------------------------------------------------------
def precompute_lexicon(skb: SKB, state_dir: Path, schema: GraphSchema | None = None) -> None:
    """Store the lexicon (name table, token index, prefix vocabulary) and the display-name table."""
    lex = build_lexicon(skb)
    keys = node_keys(skb)
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
    """Store the definition table (``agent.linking.clauses.DefinitionTable``): sorted sentences, node positions."""
    table = _build_definitions(skb)
    position = {key: i for i, key in enumerate(node_keys(skb))}
    ptr = np.zeros(len(table.keys) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(keys) for keys in table.keys])
    nodes = np.asarray([position[key] for keys in table.keys for key in keys], dtype=np.int32)
    meta = {"sentences": list(table.sentences)}  # each sentence's tokens joined by a space
    write_state(state_dir, DEFINITIONS, definitions_digest(skb), meta, {"ptr": ptr, "node": nodes})


def stored_definitions(skb: SKB) -> Any:
    """The stored ``DefinitionTable`` of ``skb``'s index, or None (build it instead)."""
    found = stored_record(skb, DEFINITIONS, definitions_digest)
    if found is None:
        return None
    meta, arrays = found
    keys = node_keys(skb)
    return DefinitionTable(meta["sentences"], _Defined(np.asarray(arrays["ptr"]), np.asarray(arrays["node"]), keys))


class _Defined(Sequence[tuple[str, ...]]):
    """The node keys each stored definition sentence defines, read from the stored arrays when a match asks."""

    def __init__(self, ptr: np.ndarray, node: np.ndarray, keys: Sequence[str]) -> None:
        self._ptr, self._node, self._keys = ptr, node, keys

    def __len__(self) -> int:
        return len(self._ptr) - 1

    def __getitem__(self, row: int) -> tuple[str, ...]:  # type: ignore[override]
        lo, hi = int(self._ptr[row]), int(self._ptr[row + 1])
        return tuple(self._keys[n] for n in self._node[lo:hi].tolist())


#: Most lexicon rows whose entries a process keeps built (a bound: a server's questions would otherwise keep every
#: row they touched, up to the whole lexicon; past it the kept rows are let go at once and built again when asked).
ENTRY_CACHE_MAX = 32_768


class _StoredTable(Mapping[tuple[str, ...], list[Any]]):
    """The lexicon's token tuple -> entries table over the stored arrays; entries built on first lookup and kept,
    up to ``ENTRY_CACHE_MAX`` rows."""

    def __init__(
        self, tokens: Sequence[str], arrays: dict[str, np.ndarray], keys: Sequence[str], case: dict[str, str]
    ):
        self._tokens = tokens
        self._row = {joined: i for i, joined in enumerate(tokens)}
        self._ptr, self._node, self._primary = arrays["ptr"], arrays["node"], arrays["primary"]
        self._keys = keys
        self._case = case
        self._cache: dict[int, list[Any]] = {}

    def entries(self, row: int) -> list[Any]:
        hit = self._cache.get(row)
        if hit is None:
            lo, hi = int(self._ptr[row]), int(self._ptr[row + 1])
            hit = [
                _Entry(self._keys[int(n)], bool(p), self._case.get(str(j)))
                for j, n, p in zip(range(lo, hi), self._node[lo:hi].tolist(), self._primary[lo:hi].tolist())
            ]
            if len(self._cache) >= ENTRY_CACHE_MAX:
                self._cache.clear()
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

    def __init__(self, vocab: Sequence[str], arrays: dict[str, np.ndarray], tokens: Sequence[str]) -> None:
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


def stored_lexicon(skb: SKB) -> Any:
    """The stored ``agent.linking.entities.Lexicon`` of ``skb``'s index, or None (compute it instead).

    Lookups build entries on demand: opening costs two dictionaries of strings, not ~60k objects."""
    found = stored_record(skb, LEXICON, lexicon_digest)
    if found is None:
        return None
    meta, arrays = found
    tokens: Sequence[str] = meta["tokens"]  # tuples (graphs.heap)
    vocab: Sequence[str] = meta["vocab"]
    return Lexicon(
        table=cast("dict[tuple[str, ...], list[Any]]", _StoredTable(tokens, arrays, node_keys(skb), meta["case"])),
        max_len=int(meta["max_len"]),
        by_token=cast("dict[str, list[tuple[str, ...]]]", _StoredIndex(vocab, arrays, tokens)),
        token_df=dict(zip(vocab, meta["token_df"], strict=True)),
        vocab_by_prefix={str(k): list(v) for k, v in meta["vocab_by_prefix"].items()},
        frame=frozenset(meta["frame"]),
    )


def stored_names(skb: SKB) -> dict[str, list[str]] | None:
    """Exact display name -> node keys, from the stored lexicon record (None: compute it)."""
    found = stored_record(skb, NAMES, lexicon_digest)
    if found is None:
        return None
    names = found[0].get("names")
    keys = node_keys(skb)
    if not isinstance(names, list | tuple) or len(names) != len(keys):
        return None
    table: dict[str, list[str]] = defaultdict(list)
    for name, key in zip(names, keys, strict=True):
        table[name].append(key)
    return dict(table)


def _stored_lexicon(skb: SKB) -> Lexicon | None:
    return cast("Lexicon | None", stored_lexicon(skb))


def _stored_definitions(skb: SKB) -> DefinitionTable | None:
    return cast("DefinitionTable | None", stored_definitions(skb))


def _build_definitions(skb: SKB) -> DefinitionTable:
    return build_definition_table(phrase_entries(skb), frame_words(skb))


lexicon_for = PerSKB(_stored_lexicon, build_lexicon)
"""The SKB's lexicon: stored by ``skb index`` when valid, else built here."""

definition_table_for = PerSKB(_stored_definitions, _build_definitions)
"""The SKB's definition table: stored by ``skb index`` when valid, else built here."""
