"""Entity linking on the hpo_mini index: exact names/synonyms, fuzzy, embedding fallback, frame words."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.linking.entities import EntityLinker
from agent.linking.lexicon import build_lexicon, normalise, stem
from tests.paths import DATA

CASES = json.loads((DATA / "linking_cases.json").read_text())


@pytest.fixture(scope="module")
def linker(hpo_bundle: Any) -> EntityLinker:
    return EntityLinker(hpo_bundle)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_linking_cases(linker: EntityLinker, case: dict[str, Any]) -> None:
    linked = linker.link(case["question"])
    got = {e.key: e.method for e in linked}
    for key, method in case["expect"].items():
        assert key in got, f"{key} not linked; got {[(e.mention, e.key, e.method) for e in linked]}"
        assert got[key] == method, f"{key} linked by {got[key]}, expected {method}"
    for key in case.get("forbid", []):
        assert key not in got, f"{key} should not be linked"
    if "max_entities" in case:
        assert len(linked) <= case["max_entities"], [(e.mention, e.name) for e in linked]
    if "exact_count" in case:
        assert sum(e.method == "exact" for e in linked) == case["exact_count"]


def test_mentions_point_into_the_question(linker: EntityLinker) -> None:
    question = CASES[1]["question"]
    for ent in linker.link(question):
        assert ent.mention.lower() in question.lower()
        assert 0.0 < ent.score <= 1.0


def test_max_entities_caps_the_list(linker: EntityLinker) -> None:
    assert len(linker.link(CASES[0]["question"], max_entities=2)) == 2


def test_exclude_labels_restricts_fallbacks(linker: EntityLinker) -> None:
    question = "Which gene is linked to a widened aorta near the heart?"
    linked = linker.link(question, exclude_labels=["Phenotype"])
    assert all(e.label != "Phenotype" or e.method == "exact" for e in linked)


def test_without_embeddings_unmatched_spans_stay_unlinked(hpo_bundle: Any) -> None:
    plain = EntityLinker(hpo_bundle, use_embedding=False)
    assert plain.link("What condition could explain a widened aorta near the heart?") == []


def test_normalisation_is_shared_by_lexicon_and_question() -> None:
    assert normalise("Café-au-lait Spots") == ["cafe", "au", "lait", "spot"]
    assert stem("ribs") == "rib" and stem("abnormalities") == "abnormality" and stem("ectasis") == "ectasis"


def test_frame_words_include_schema_labels(hpo_mini_skb: Any) -> None:
    lex = build_lexicon(hpo_mini_skb)
    assert {"phenotype", "disease", "gene"} <= lex.frame
    assert ("proptosi",) in lex.table or ("proptosis",) in lex.table


def test_the_name_vectors_kept_between_questions_are_bounded(hpo_bundle: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server answers for months: the vectors of the names the embedding linker compared stay below the bound,
    and a cache started again links the same nodes as a warm one."""
    from agent.linking import entities

    monkeypatch.setattr(entities, "MAX_PHRASE_VECTORS", 12)
    linker = EntityLinker(hpo_bundle)
    mentions = ["widened aorta", "small head", "fits", "weak muscles", "short stature", "curved spine"]
    first = [linker._embed(m, []) for m in mentions]
    sizes = []
    for mention in mentions:
        linker._embed(mention, [])
        sizes.append(len(linker._phrase_vecs))

    def names_compared(mention: str) -> int:
        hits = hpo_bundle.hnsw.search(hpo_bundle.embedder.embed_query(mention), linker.embedding_candidates, per_label=True)
        return len({p for k, _ in hits for p in linker._phrases(k)})

    per_call = max(names_compared(m) for m in mentions)
    assert max(sizes) <= max(12, per_call) and min(sizes) > 0
    # the same nodes (int8 vectors move a little with the texts embedded beside them: scores, not links)
    assert [[k for k, _ in linker._embed(m, [])] for m in mentions] == [[k for k, _ in f] for f in first]
