"""Entity linking: which nodes of the graph does a question mention?

Why three stages: exact lexicon matches (names and synonyms) are precise and cost
microseconds, so they go first and claim their tokens; what is left is split into
segments at commas, semicolons and conjunctions, and each segment is matched fuzzily
(token overlap + character similarity, for inflections and typos) and, failing that,
by embedding nearest neighbours (for paraphrases the lexicon lacks, e.g. "fits" for
seizures). Question-frame words ("which gene", "patient", "disorder") are never
linked: they are derived from the schema's label names plus a small generic
vocabulary, so the same linker works on products, papers or drugs.

The lexicon is built once per SKB (a few seconds on HPO) and cached.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel

from agent.linking.clauses import clause_spans, embed_clauses, is_description, weighted_candidates
from agent.linking.lexicon import (
    _BRACKET,
    _SPLIT_WORDS,
    _Entry,
    _Token,
    _tokenise,
)
from agent.linking.rescoring import NodeWords, rescore
from agent.linking.settings import ClauseSettings
from agent.linking.stored import definition_table_for, lexicon_for, stored_names
from graphs.index.phrases import PhraseIndex, has_phrase_index, phrase_index_for
from graphs.skb.model import SKB

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle

LinkMethod = Literal["exact", "fuzzy", "embedding"]

#: Nearest phrases read per shortlisted term when a clause's shortlist is re-scored (``agent.linking.rescoring``):
#: enough for the phrases of every shortlisted term that come near the clause (8 gives the same links on the
#: development cases, at a dearer graph search).
PHRASE_POOL_PER_TERM = 4

#: Names and synonyms whose vectors the embedding linker keeps (1.5 KB each at 384 dimensions); past it the cache
#: starts again. A question reads a few dozen; a server answering for months would otherwise hold every name.
MAX_PHRASE_VECTORS = 20_000


class LinkedEntity(BaseModel):
    key: str
    label: str
    name: str
    mention: str
    score: float
    method: LinkMethod
    group: int | None = None
    """Clause number when the entity is one of several weighted candidates for one described clause
    (``agent.linking.clauses``); the ranking lets each clause count once, by its best candidate."""
    weight: float = 1.0
    """Link confidence the ranking multiplies the entity's evidence by (1.0 for names and synonyms)."""


# -- linker ----------------------------------------------------------------------------


@dataclass
class _Span:
    start: int  # token index, inclusive
    end: int  # token index, exclusive


class EntityLinker:
    """Links a question to graph nodes: exact, then fuzzy, then embedding fallback.

    ``fuzzy_threshold`` is a SequenceMatcher ratio on normalised strings; ``embedding_threshold``
    a cosine similarity between the segment and the node text (MiniLM: unrelated text scores
    below ~0.45, paraphrases of a node's name or synonym above ~0.6).
    """

    def __init__(
        self,
        bundle: IndexBundle | Any,
        *,
        fuzzy_threshold: float = 0.88,
        embedding_threshold: float = 0.6,
        embedding_candidates: int = 8,
        max_synonym_keys: int = 3,
        use_embedding: bool = True,
    ) -> None:
        self.bundle = bundle
        self.skb: SKB = bundle.skb
        self.lexicon = lexicon_for(self.skb)
        self.fuzzy_threshold = fuzzy_threshold
        self.embedding_threshold = embedding_threshold
        self.max_synonym_keys = max_synonym_keys
        self.use_embedding = use_embedding and getattr(bundle, "hnsw", None) is not None
        self.embedding_candidates = embedding_candidates
        self._phrase_vecs: dict[str, np.ndarray] = {}
        self._names: dict[str, list[str]] | None = None
        self._node_words = NodeWords(self.skb)

    # -- public ------------------------------------------------------------------------
    def link(
        self,
        question: str,
        max_entities: int = 20,
        *,
        exclude_labels: Sequence[str] = (),
        clauses: ClauseSettings | None = None,
        confidence_power: float = 0.0,
    ) -> list[LinkedEntity]:
        """Entities mentioned in the question, in order of mention; ``exclude_labels`` only
        restricts the fuzzy/embedding fallbacks (exact mentions of any label are kept).

        ``clauses`` switches on clause linking (``agent.linking.clauses``): clauses that describe a
        vocabulary term are matched whole against the index's phrase vectors and give several
        weighted candidates each. ``max_entities`` counts mentions (a clause, or the nodes sharing one
        name, count once) and caps the entities of one mention.
        It needs the index's phrase artifact and an embedder; without them it is a no-op.
        ``confidence_power`` > 0 gives fuzzy and embedding links the ranking weight
        ``score ** confidence_power`` (exact names keep 1.0): a guessed term counts less than a named one.

        A bracketed mention (``who directed [The Lost World]``, the benchmark convention for the
        topic entity) is linked alone: a node whose name is exactly the bracket text wins
        (case-sensitive, so ``Up`` and ``up`` stay apart), else the bracket text goes through the
        usual stages. Without brackets the whole question is linked as before.
        """
        found: list[LinkedEntity] = []
        match = _BRACKET.search(question)
        if match is not None and match.group(1).strip():
            found = self._link_bracket(match.group(1).strip(), max_entities, exclude_labels)
        if not found:
            found = self._link_text(question, max_entities, exclude_labels, clauses)
        if confidence_power > 0:
            found = [
                e.model_copy(update={"weight": round(float(e.score) ** confidence_power, 4)})
                if e.group is None and e.method != "exact" and 0.0 < e.score < 1.0
                else e
                for e in found
            ]
        return found

    def _link_bracket(self, mention: str, max_entities: int, exclude: Sequence[str]) -> list[LinkedEntity]:
        exact = [key for key in self._by_name().get(mention, ()) if key in self.skb.nodes]
        if exact:
            return [self._entity(key, mention, 1.0, "exact") for key in exact][:max_entities]
        found = self._link_text(mention, max_entities, exclude)
        return [ent.model_copy(update={"mention": mention}) for ent in found]

    def _by_name(self) -> dict[str, list[str]]:
        """Exact display name -> keys (built on first bracketed question)."""
        if self._names is None:
            stored = stored_names(self.skb)
            if stored is not None:
                self._names = stored
                return stored
            table: dict[str, list[str]] = defaultdict(list)
            for node in self.skb.nodes.values():
                table[node.name].append(node.key)
            self._names = dict(table)
        return self._names

    def _link_text(
        self,
        question: str,
        max_entities: int,
        exclude_labels: Sequence[str],
        clauses: ClauseSettings | None = None,
    ) -> list[LinkedEntity]:
        tokens = _tokenise(question)
        out: list[LinkedEntity] = []
        claimed = [False] * len(tokens)
        exact_in_segment: set[int] = set()
        seg_of = self._segments_ids(tokens)
        exact = self._exact(tokens)
        described: list[tuple[int, int]] = []
        held: dict[int, list[tuple[_Span, list[_Entry]]]] = {}
        if clauses is not None:
            described = self._described_clauses(question, tokens, exact, clauses)
            if described:
                # Exact names inside a described clause wait for the clause's candidates (below).
                kept = []
                for pair in exact:
                    clause = next((c for c, (s, e) in enumerate(described) if s <= pair[0].start < e), None)
                    if clause is None:
                        kept.append(pair)
                    else:
                        held.setdefault(clause, []).append(pair)
                exact = kept
                for s, e in described:
                    for i in range(s, e):
                        claimed[i] = True
        for span, entries in exact:
            mention = question[tokens[span.start].start : tokens[span.end - 1].end]
            for entry in entries:
                out.append(self._entity(entry.key, mention, 1.0, "exact"))
            for i in range(span.start, span.end):
                claimed[i] = True
            exact_in_segment.add(seg_of[span.start])
        for span in self._leftovers(tokens, claimed):
            content = [t for t in tokens[span.start : span.end] if t.norm not in self.lexicon.frame]
            if not content:
                continue
            if seg_of[span.start] in exact_in_segment and len(content) < 2:
                continue  # a lone modifier ("few", "severe") next to a linked term
            mention = question[tokens[span.start].start : tokens[span.end - 1].end]
            found = self._fuzzy(tuple(t.norm for t in tokens[span.start : span.end]), exclude_labels)
            if found:
                out.extend(self._entity(k, mention, s, "fuzzy") for k, s in found)
                continue
            if self.use_embedding:
                out.extend(self._entity(k, mention, s, "embedding") for k, s in self._embed(mention, exclude_labels))
        if described and clauses is not None:
            out.extend(self._settle_clauses(question, tokens, described, held, clauses, exclude_labels))
        # ``max_entities`` counts mentions, and caps the entities of one mention: the nodes sharing one name
        # are one mention (a name shared by 20 concepts of a million-node graph took every place, and the
        # question's second name was never linked)
        seen: set[str] = set()
        unique: list[LinkedEntity] = []
        mentions: dict[tuple[str, int | str], int] = {}
        for ent in out:
            if ent.key in seen:
                continue
            mention_id: tuple[str, int | str] = (
                ("clause", ent.group) if ent.group is not None else ("mention", ent.mention.casefold())
            )
            taken = mentions.get(mention_id)
            if (taken is None and len(mentions) >= max_entities) or (taken or 0) >= max_entities:
                continue
            mentions[mention_id] = (taken or 0) + 1
            seen.add(ent.key)
            unique.append(ent)
        return unique

    # -- clause linking (agent.linking.clauses) -----------------------------------------
    def _described_clauses(
        self, question: str, tokens: list[_Token], exact: list[tuple[_Span, list[_Entry]]], settings: ClauseSettings
    ) -> list[tuple[int, int]]:
        """Token ranges of the clauses that describe a term rather than name one (frame words trimmed)."""
        if not self.use_embedding or not has_phrase_index(self.bundle) or not tokens:
            return []
        exact_tok = [False] * len(tokens)
        for span, _ in exact:
            for i in range(span.start, span.end):
                exact_tok[i] = True
        frame = self.lexicon.frame
        out: list[tuple[int, int]] = []
        for cs, ce in clause_spans(question):
            idx = [i for i, t in enumerate(tokens) if t.start >= cs and t.end <= ce]
            if not idx:
                continue
            s, e = idx[0], idx[-1] + 1
            while s < e and (tokens[s].norm in frame or tokens[s].norm in _SPLIT_WORDS):
                s += 1
            while e > s and tokens[e - 1].norm in frame:
                e -= 1
            content = [i for i in range(s, e) if tokens[i].norm not in frame]
            covered = sum(1 for i in content if exact_tok[i])
            if e > s and is_description(len(content), covered, settings):
                out.append((s, e))
        return out

    def _settle_clauses(
        self,
        question: str,
        tokens: list[_Token],
        described: list[tuple[int, int]],
        held: dict[int, list[tuple[_Span, list[_Entry]]]],
        settings: ClauseSettings,
        exclude: Sequence[str],
    ) -> list[LinkedEntity]:
        """The described clauses' candidate groups, except where a clause turns out to name a term.

        Why: a clause is judged a description by how few of its content words exact names cover, so a
        question's own wording around a name ("pathogenic variants of what gene lead to cleft palate",
        "cleft palate: which gene should we sequence first") can make a named term look described. When
        the clause's paraphrase candidates include terms the clause names exactly, the clause names them:
        those exact links stand, at full weight, and the group (a diluted copy of the same term and its
        relatives) is dropped; a clause with no candidate at all, or none as close as
        ``settings.name_confidence``, keeps all its exact names. A description that happens to contain
        another term's name keeps its group when its candidates point elsewhere, confidently.
        """
        named = {i for pairs in held.values() for span, _ in pairs for i in range(span.start, span.end)}
        groups = self._link_clauses(question, tokens, described, settings, exclude, named)
        by_group: dict[int, list[LinkedEntity]] = defaultdict(list)
        for ent in groups:
            by_group[int(ent.group or 0)].append(ent)
        out: list[LinkedEntity] = []
        for clause in range(len(described)):
            candidates = by_group.get(clause, [])
            names = {
                entry.key: question[tokens[span.start].start : tokens[span.end - 1].end]
                for span, entries in held.get(clause, [])
                for entry in entries
            }
            if candidates and names:
                # Only the names the clause's candidates confirm: a definition that lists other terms
                # ("a sequence of A, B and C") still counts once, as the term it defines. Unconfirmed
                # names give way only to a confident reading: weak candidates of a clause that is mostly
                # question wording ("which product ships worldwide with free returns plus a desk lamp") are
                # the wording's neighbours, not a description, and the names stand.
                confirmed = {ent.key: names[ent.key] for ent in candidates if ent.key in names}
                if confirmed or max(ent.score for ent in candidates) >= settings.name_confidence:
                    names = confirmed
            if names:
                out.extend(self._entity(key, mention, 1.0, "exact") for key, mention in names.items())
            else:
                out.extend(candidates)
        return out

    def _link_clauses(
        self,
        question: str,
        tokens: list[_Token],
        described: list[tuple[int, int]],
        settings: ClauseSettings,
        exclude: Sequence[str],
        named: set[int] | frozenset[int] = frozenset(),
    ) -> list[LinkedEntity]:
        """Candidates per described clause: the terms whose definition it quotes (exact, full weight), else
        weighted neighbours from the phrase index (one embedding batch for the clauses left).

        ``named``: tokens that exact names cover. A "quote" made only of named words ("sold with a steam
        cleaning machine", where "steam cleaning machine ..." also begins a narrower term's definition) is
        the name, not a definition: a name outranks a definition, so such a clause goes the embedding way,
        where ``_settle_clauses`` keeps the name."""
        texts = [question[tokens[s].start : tokens[e - 1].end] for s, e in described]
        table = definition_table_for(self.skb) if settings.definition_match else None
        out: list[LinkedEntity] = []
        pending: list[int] = []
        frame = self.lexicon.frame
        for group, (s, e) in enumerate(described):
            quote = table.match([t.norm for t in tokens[s:e]], frame, settings) if table else None
            if quote is not None and all(i in named for i in range(s + quote.start, s + quote.end) if tokens[i].norm not in frame):
                quote = None
            keys = [k for k in quote.keys if k in self.skb.nodes and self.skb.nodes[k].label not in exclude] if quote else []
            if not keys:
                pending.append(group)
            for key in keys:
                out.append(self._entity(key, texts[group], 1.0, "exact").model_copy(update={"group": group}))
        index = phrase_index_for(self.bundle) if pending else None  # ~100 MB on HPO: loaded only when needed
        if index is None:
            return out
        try:
            vecs = embed_clauses(self.bundle.embedder, [texts[g] for g in pending])
        except Exception:  # noqa: BLE001 - linking degrades to exact/fuzzy without an embedder
            return out
        found = self.rank_clauses(index, [texts[g] for g in pending], vecs, settings, exclude)
        for group, usable in zip(pending, found):
            for key, sim, weight in weighted_candidates(usable, settings):
                ent = self._entity(key, texts[group], round(sim, 4), "embedding")
                out.append(ent.model_copy(update={"group": group, "weight": round(weight, 4)}))
        return out

    def rank_clauses(
        self, index: PhraseIndex, texts: Sequence[str], vecs: np.ndarray, settings: ClauseSettings,
        exclude: Sequence[str] = (),
    ) -> list[list[tuple[str, float]]]:
        """Each described clause's candidate terms, best first, from its vector (``embed_clauses``): the nearest
        terms by phrase, re-scored jointly over their phrases and shared words when ``rescore_pool`` > 0
        (``agent.linking.rescoring``). Public so that a study can rank clauses exactly as linking does."""
        pool = max(settings.candidates * 2, settings.candidates + 4)
        if settings.rescore_pool <= 0:
            return [[(k, s) for k, s in hits if self._usable(k, exclude)] for hits in index.search(vecs, pool)]
        shortlists = index.search_phrases(vecs, max(pool, settings.rescore_pool), PHRASE_POOL_PER_TERM * settings.rescore_pool)
        return [
            rescore(text, [(k, s) for k, s in hits if self._usable(k, exclude)], self._node_words,
                    lexical_weight=settings.lexical_weight, temperature=settings.phrase_temperature)
            for text, hits in zip(texts, shortlists)
        ]

    def _usable(self, key: str, exclude: Sequence[str]) -> bool:
        return key in self.skb.nodes and self.skb.nodes[key].label not in exclude

    # -- stages ------------------------------------------------------------------------
    def _entity(self, key: str, mention: str, score: float, method: LinkMethod) -> LinkedEntity:
        node = self.skb.nodes[key]
        return LinkedEntity(key=key, label=node.label, name=node.name, mention=mention, score=score, method=method)

    def _choose(self, entries: list[_Entry], surface: str) -> list[_Entry]:
        usable = [e for e in entries if e.case_sensitive is None or e.case_sensitive == surface]
        primary = [e for e in usable if e.primary]
        if primary:
            return primary
        return usable[: self.max_synonym_keys]

    def _exact(self, tokens: list[_Token]) -> list[tuple[_Span, list[_Entry]]]:
        """Greedy longest match, left to right, never across a comma/semicolon boundary."""
        table, frame = self.lexicon.table, self.lexicon.frame
        found: list[tuple[_Span, list[_Entry]]] = []
        i, n = 0, len(tokens)
        # next_break[i]: the first token after i that starts a new comma/semicolon segment (or n)
        next_break = [n] * (n + 1)
        for j in range(n - 1, -1, -1):
            next_break[j] = j + 1 if j + 1 < n and tokens[j + 1].boundary_before else next_break[j + 1]
        norms = [t.norm for t in tokens]
        while i < n:
            matched = False
            for length in range(min(self.lexicon.max_len, next_break[i] - i), 0, -1):
                key = tuple(norms[i : i + length])
                entries = table.get(key)
                if not entries:
                    continue
                if length == 1 and key[0] in frame:
                    continue
                surface = " ".join(t.raw for t in tokens[i : i + length])
                chosen = self._choose(entries, surface)
                if not chosen:
                    continue
                found.append((_Span(i, i + length), chosen))
                i += length
                matched = True
                break
            if not matched:
                i += 1
        return found

    @staticmethod
    def _segments_ids(tokens: list[_Token]) -> list[int]:
        seg, ids = -1, []
        for t in tokens:
            if t.boundary_before or t.norm in _SPLIT_WORDS:
                seg += 1
            ids.append(seg)
        return ids

    def _leftovers(self, tokens: list[_Token], claimed: list[bool]) -> list[_Span]:
        """Maximal unclaimed runs, cut at boundaries, conjunctions and frame words at the edges."""
        spans: list[_Span] = []
        start: int | None = None
        for i, tok in enumerate(tokens):
            cut = claimed[i] or tok.norm in _SPLIT_WORDS or tok.boundary_before
            if start is not None and cut:
                spans.append(_Span(start, i))
                start = None
            if not claimed[i] and tok.norm not in _SPLIT_WORDS and start is None:
                start = i
        if start is not None:
            spans.append(_Span(start, len(tokens)))
        frame = self.lexicon.frame
        trimmed: list[_Span] = []
        for sp in spans:
            s, e = sp.start, sp.end
            while s < e and tokens[s].norm in frame:
                s += 1
            while e > s and tokens[e - 1].norm in frame:
                e -= 1
            if e > s:
                trimmed.append(_Span(s, e))
        return trimmed

    def _correct(self, token: str) -> str:
        """Map an unknown token to the closest lexicon token (typos), else keep it."""
        if token in self.lexicon.by_token or len(token) < 5:
            return token
        pool = self.lexicon.vocab_by_prefix.get(token[:2], [])
        close = difflib.get_close_matches(token, pool, n=1, cutoff=0.85)
        return close[0] if close else token

    def _fuzzy(self, toks: tuple[str, ...], exclude: Sequence[str]) -> list[tuple[str, float]]:
        toks = tuple(self._correct(t) for t in toks if t)
        content = [t for t in toks if t not in self.lexicon.frame]
        if not content:
            return []
        exact = self.lexicon.table.get(toks) or self.lexicon.table.get(tuple(content))
        if exact:
            keys = [e.key for e in self._choose(exact, "") if self.skb.nodes[e.key].label not in exclude]
            if keys:
                return [(k, 0.99) for k in keys[: self.max_synonym_keys]]
        # candidates share the rarest content token
        # (in the mention's order among equally rare tokens, and the best candidate by its tokens among equal
        # scores: a set's order follows the process's string-hash seed, and two runs would link differently)
        rare = sorted(dict.fromkeys(content), key=lambda t: self.lexicon.token_df.get(t, 10**9))
        cands: set[tuple[str, ...]] = set()
        for t in rare[:2]:
            lst = self.lexicon.by_token.get(t, [])
            if len(lst) <= 3000:
                cands.update(lst)
        if not cands:
            return []
        target = " ".join(content)
        target_set = set(content)
        best: list[tuple[float, tuple[str, ...]]] = []
        matcher = difflib.SequenceMatcher(autojunk=False)
        matcher.set_seq2(target)
        frame = self.lexicon.frame
        for cand in cands:
            cset = {t for t in cand if t not in frame} or set(cand)
            overlap = len(cset & target_set) / max(len(cset | target_set), 1)
            if overlap < 0.5:
                continue
            # word order and stopword differences: compare sorted content tokens too
            matcher.set_seq1(" ".join(cand))
            if matcher.real_quick_ratio() < self.fuzzy_threshold - 0.1:
                continue
            ratio = max(matcher.ratio(), _sorted_ratio(sorted(cset), content))
            score = 0.5 * ratio + 0.5 * overlap if overlap < 1.0 else max(ratio, 0.95)
            if score >= self.fuzzy_threshold:
                best.append((score, cand))
        best.sort(key=lambda x: (-x[0], x[1]))
        out: list[tuple[str, float]] = []
        for score, cand in best[:1]:
            for e in self._choose(self.lexicon.table[cand], ""):
                if self.skb.nodes[e.key].label not in exclude:
                    out.append((e.key, round(float(score), 4)))
        return out[: self.max_synonym_keys]

    def _phrases(self, key: str) -> list[str]:
        node = self.skb.nodes[key]
        ntype = self.skb.node_types.get(node.label)
        names = [node.name]
        if ntype is not None and ntype.synonym_field:
            syn = node.props.get(ntype.synonym_field) or []
            names.extend(str(x) for x in (syn if isinstance(syn, list) else [syn]))
        return list(dict.fromkeys(names))[:8]

    def _embed(self, mention: str, exclude: Sequence[str]) -> list[tuple[str, float]]:
        """Nearest node by its *names*: node-text neighbours re-scored by name/synonym similarity.

        Why re-score: node texts carry definitions and neighbour lists, so their cosine to a short
        mention is low and flat (0.4-0.5 for right and wrong alike); the best name or synonym of
        the right node is much closer to the mention than any name of a wrong one.
        """
        try:
            vec = np.asarray(self.bundle.embedder.embed_query(mention), dtype=np.float32)
            hits = self.bundle.hnsw.search(vec, self.embedding_candidates, per_label=True)  # the nearest names
        except Exception:  # noqa: BLE001 - linking degrades to exact/fuzzy without an embedder
            return []
        cands = [k for k, _ in hits if k in self.skb.nodes and self.skb.nodes[k].label not in exclude]
        if not cands:
            return []
        phrases: list[tuple[str, str]] = [(k, p) for k in cands for p in self._phrases(k)]
        known = self._phrase_vecs
        unique = list(dict.fromkeys(p for _, p in phrases))
        vecs = {p: v for p in unique if (v := known.get(p)) is not None}
        missing = [p for p in unique if p not in vecs]
        if missing:
            # Like queries, names bypass the on-disk embedding cache (``inner``): the linker keeps its
            # own in-memory cache, and growing the index's cache per question would slow every call.
            embedder = self.bundle.embedder
            embedder = getattr(embedder, "inner", embedder)
            new = dict(zip(missing, np.asarray(embedder.embed(missing), dtype=np.float32), strict=True))
            if len(known) + len(new) > MAX_PHRASE_VECTORS:
                known.clear()  # bounded: over a server's life the questions reach every name of the graph
            known.update(new)
            vecs.update(new)
        best: dict[str, float] = {}
        for key, phrase in phrases:
            sim = float(vecs[phrase] @ vec)
            if sim > best.get(key, -1.0):
                best[key] = sim
        key, sim = max(best.items(), key=lambda kv: kv[1])
        if sim >= self.embedding_threshold:
            return [(key, round(sim, 4))]
        return []


def _sorted_ratio(a: Sequence[str], b: Sequence[str]) -> float:
    return difflib.SequenceMatcher(None, " ".join(sorted(a)), " ".join(sorted(b)), autojunk=False).ratio()
