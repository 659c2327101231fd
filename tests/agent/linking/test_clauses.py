"""Clause linking and weighted-feature ranking on hand-made data (no HPO names in the fixtures).

- ``score_groups`` on the tiny Term/Item ontology of tests/agent/planning/test_offline_planner.py, expected scores
  computed by hand;
- clause splitting and described-clause linking cases from tests/data/clause_cases.json, linked on a
  hand-made product catalog (labels Category/Product, definitions in a property named ``gloss``)
  indexed with the real MiniLM embedder, so the phrase artifact, the profile's vocabulary settings and
  the linker are exercised together on a graph whose labels are not the HPO ones.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.linking.clauses import clause_spans, weighted_candidates
from agent.linking.definitions import build_definition_table
from agent.linking.entities import EntityLinker
from agent.linking.lexicon import FRAME_WORDS, normalise
from agent.linking.settings import ClauseSettings
from agent.planning.ranking import feature_groups, rank_targets
from agent.scoring.stored import model_for
from graphs.index.phrases import definition_sentences, phrase_entries, phrase_index_for
from graphs.skb.model import Edge, Node
from graphs.skb.profile import PlannerSpec, Profile, ScoringSpec
from tests.paths import DATA
from tests.small_graphs import PRODUCTS, catalog_skb, tiny_skb

CASES = json.loads((DATA / "clause_cases.json").read_text(encoding="utf-8"))
LN2, LN4, LN43 = math.log(2), math.log(4), math.log(4 / 3)


# -- ranking with weighted alternatives (hand-computed) -------------------------------------------
# IC: A ln(4/3), B ln 2, A1 ln 2, A2 ln 4, B1 ln 2; items I1 {A1}, I2 {A2}, I3 {B1}, I4 {A1, B1}.


@pytest.fixture(scope="module")
def model() -> Any:
    found = model_for(tiny_skb(), "Item", "Term")
    assert found is not None
    return found


def _by_item(model: Any, scores: Any) -> dict[str, float]:
    return {t: float(scores[i]) for i, t in enumerate(model.targets)}


def test_one_clause_with_two_weighted_candidates_counts_once_by_its_best_reading(model: Any) -> None:
    s = _by_item(model, model.score_groups([[("A2", 1.0), ("B1", 0.5)]], frequency_mix=0.0, size_penalty=0.0))
    assert s["I1"] == pytest.approx(LN43, abs=1e-5)  # A2 ~ A1 share A
    assert s["I2"] == pytest.approx(LN4, abs=1e-5)  # A2 itself
    assert s["I3"] == pytest.approx(0.5 * LN2, abs=1e-5)  # only the runner-up B1 matches, at half weight
    assert s["I4"] == pytest.approx(max(LN43, 0.5 * LN2), abs=1e-5)
    # the same two terms as two separate features would count both for I4
    sep = _by_item(model, model.score_groups([[("A2", 1.0)], [("B1", 1.0)]], frequency_mix=0.0, size_penalty=0.0))
    assert sep["I4"] == pytest.approx(LN43 + LN2, abs=1e-5)


def test_weighted_clause_plus_named_term_ranks_as_computed_by_hand(model: Any) -> None:
    groups = [[("A2", 1.0), ("B1", 0.5)], [("A1", 1.0)]]
    s = _by_item(model, model.score_groups(groups, frequency_mix=0.0, size_penalty=0.0))
    expected = {"I1": LN43 + LN2, "I2": LN4 + LN43, "I3": 0.5 * LN2, "I4": 0.5 * LN2 + LN2}
    for item, value in expected.items():
        assert s[item] == pytest.approx(value, abs=1e-5), item
    assert sorted(s, key=lambda k: -s[k]) == ["I2", "I4", "I1", "I3"]


def test_single_full_weight_candidates_equal_the_plain_score(model: Any) -> None:
    plain = model.score(["A1", "B1"])
    grouped = model.score_groups([[("A1", 1.0)], [("B1", 1.0)]])
    assert grouped.tolist() == pytest.approx(plain.tolist(), abs=1e-6)


def test_rank_targets_uses_clause_groups_and_link_weights() -> None:
    skb = tiny_skb()
    skb.profile = Profile(scoring=ScoringSpec(edge_weight_property="freq", frequency_mix=0.0, size_penalty=0.0))
    linked = [
        {"key": "A2", "label": "Term", "mention": "clause one", "group": 0, "weight": 1.0},
        {"key": "B1", "label": "Term", "mention": "clause one", "group": 0, "weight": 0.5},
    ]
    assert feature_groups(linked, ["A2", "B1"]) == [[("A2", 1.0), ("B1", 0.5)]]
    ranked = rank_targets(skb, "Item", linked, [], ["I1", "I2", "I3", "I4"])
    assert [k for k, _ in ranked][:1] == ["I2"]
    # I3 and I4 tie on the half-weight B1 reading (0.5 ln 2 = 0.347); I1 only shares A (ln 4/3 = 0.288)
    assert [k for k, _ in ranked][-1] == "I1"


def test_weighted_candidates_keep_the_margin_and_scale_by_confidence() -> None:
    settings = ClauseSettings(candidates=3, min_similarity=0.4, margin=0.1, confidence_power=1.0)
    kept = weighted_candidates([("a", 0.8), ("b", 0.75), ("c", 0.72), ("d", 0.69), ("e", 0.3)], settings)
    assert [k for k, _, _ in kept] == ["a", "b", "c"]  # d is outside the margin, e below the floor
    conf = min(1.0, 0.5 + 0.5 * (0.8 - 0.4) / 0.6)
    assert kept[0][2] == pytest.approx(conf)
    assert kept[1][2] == pytest.approx(conf * 0.75 / 0.8)
    flat = weighted_candidates([("a", 0.8), ("b", 0.75)], ClauseSettings(confidence_power=0.0))
    assert [w for _, _, w in flat] == [1.0, 1.0]
    assert weighted_candidates([("a", 0.2)], settings) == []


# -- clause splitting -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES["split"], ids=lambda c: c["text"][:30])
def test_clause_splitting_cases(case: dict[str, Any]) -> None:
    text = case["text"]
    assert [text[s:e].strip() for s, e in clause_spans(text)] == case["clauses"]


def test_definition_sentences_keep_the_first_sentences() -> None:
    text = "A round part. It turns (see e.g. the axle). Third one here. Fourth is dropped."
    assert definition_sentences(text, 3) == ["A round part.", "It turns (see e.g. the axle).", "Third one here."]


# -- clause linking on a hand-made catalog ---------------------------------------------------------

@pytest.mark.integration
def test_phrase_artifact_is_listed_in_the_manifest_and_covers_names_synonyms_definitions(catalog: Any) -> None:
    assert {"phrases/phrases.bin", "phrases/entries.json"} <= set(catalog.manifest.files)
    index = phrase_index_for(catalog)
    assert index is not None
    entries = list(phrase_entries(catalog.skb))
    assert len(index) == len(entries)
    assert {kind for _, kind, _ in entries} == {"name", "synonym", "definition"}
    assert ("C_KETTLE", "definition", "It switches off when the water boils.") in entries
    assert all(catalog.skb.nodes[k].label == "Category" for k in index.keys)  # products are not vocabulary


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES["link"], ids=lambda c: c["question"][:40])
def test_clause_linking_cases(catalog: Any, case: dict[str, Any]) -> None:
    linker = EntityLinker(catalog)
    found = linker.link(case["question"], 20, clauses=AgentConfig().clause_settings())
    groups: dict[int, list[str]] = {}
    for ent in found:
        if ent.group is not None:
            groups.setdefault(ent.group, []).append(ent.key)
            assert 0.0 < ent.weight <= 1.0
            assert ent.mention in case["question"]
    assert len(groups) == len(case["described"])
    for group, expected in zip(sorted(groups), case["described"]):
        assert expected in groups[group], (expected, groups[group])
        assert groups[group][0] == expected  # the best candidate is listed first
    named = {e.key for e in found if e.group is None and e.method == "exact"}
    assert set(case["named"]) <= named
    assert not set(case.get("not_named", [])) & {e.key for e in found}


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES["quote"], ids=lambda c: c["question"][:40])
def test_a_clause_quoting_a_definition_links_exactly_and_a_paraphrase_by_embedding(catalog: Any, case: dict[str, Any]) -> None:
    found = EntityLinker(catalog).link(case["question"], 20, clauses=AgentConfig().clause_settings())
    groups: dict[int, list[Any]] = {}
    for ent in found:
        if ent.group is not None:
            groups.setdefault(ent.group, []).append(ent)
    assert len(groups) == len(case["clauses"]), [(e.key, e.method, e.group) for e in found]
    for group, (key, method) in zip(sorted(groups), case["clauses"]):
        best = groups[group][0]
        assert (best.key, best.method) == (key, method)
        if method == "exact":  # the quoted term alone, at full weight
            assert [(e.key, e.weight, e.score) for e in groups[group]] == [(key, 1.0, 1.0)]


@pytest.mark.integration
@pytest.mark.parametrize(("best", "kept"), [(0.5, {"C_LAMP"}), (0.8, set())])
def test_a_clause_keeps_its_unconfirmed_name_unless_the_candidates_are_confident(
    catalog: Any, monkeypatch: pytest.MonkeyPatch, best: float, kept: set[str]
) -> None:
    """Question wording around a name ("ships worldwide ... plus a desk lamp") makes the clause look described;
    its paraphrase candidates, here pinned to an unrelated term, replace the name only when they are close."""
    linker = EntityLinker(catalog)
    wrong = linker._entity("C_FAN", "clause", best, "embedding").model_copy(update={"group": 0, "weight": 0.5})
    monkeypatch.setattr(linker, "_link_clauses", lambda *args, **kwargs: [wrong])
    question = "Which product ships worldwide with free returns within thirty days plus a desk lamp; and a toaster?"
    found = {(e.key, e.method) for e in linker.link(question, 20, clauses=AgentConfig().clause_settings())}
    assert {k for k, m in found if m == "exact"} == kept | {"C_TOASTER"}
    assert (("C_FAN", "embedding") in found) == (not kept)


@pytest.mark.integration
def test_definition_matching_off_embeds_every_described_clause(catalog: Any) -> None:
    question = CASES["quote"][0]["question"]
    found = EntityLinker(catalog).link(question, 20, clauses=AgentConfig(clause_definition_match=False).clause_settings())
    described = [e for e in found if e.group is not None]
    assert described and {e.method for e in described} == {"embedding"}
    assert described[0].key == "C_KETTLE" and described[0].weight < 1.0


@pytest.mark.parametrize("case", CASES["table"]["cases"], ids=lambda c: c["why"][:40])
def test_definition_table_matches_quoted_and_cut_short_sentences(case: dict[str, Any]) -> None:
    frame = frozenset(FRAME_WORDS)
    entries = [(key, "definition", text) for key, text in CASES["table"]["entries"]]
    entries.append(("K_NAME", "name", "round part that turns on an axle"))  # names are the lexicon's, not the table's
    table = build_definition_table(entries, frame)
    settings = ClauseSettings(candidates=3)
    tokens = normalise(case["clause"])
    got = table.match(tokens, frame, settings)
    assert sorted(got.keys if got else []) == sorted(case["keys"])
    if got is not None and "span" in case:
        assert " ".join(tokens[got.start : got.end]) == case["span"]


@pytest.mark.integration
def test_clause_linking_off_or_without_the_artifact_keeps_the_old_links(
    catalog: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle

    question = CASES["link"][0]["question"]
    assert all(e.group is None for e in EntityLinker(catalog).link(question, 20))  # clauses=None: switched off
    # the same catalog whose profile names no vocabulary: no artifact, and clause settings change nothing
    skb = catalog_skb()
    skb.profile = Profile()
    index_dir = tmp_path_factory.mktemp("catalog_plain") / "index"
    summary = build_index(skb, index_dir, IndexConfig(dataset="catalog", store="none"))
    assert "phrases" not in summary.timings_s
    with IndexBundle.open(index_dir, store="none") as plain_bundle:
        assert phrase_index_for(plain_bundle) is None
        assert not any(name.startswith("phrases/") for name in plain_bundle.manifest.files)
        plain = EntityLinker(plain_bundle)
        assert plain.link(question, 20) == plain.link(question, 20, clauses=AgentConfig().clause_settings())


@pytest.mark.integration
def test_described_clauses_rank_the_right_product(catalog: Any) -> None:
    linker = EntityLinker(catalog)
    question = (
        "Which product has a small appliance that browns slices of bread with radiant heat; "
        "an appliance that boils water with an electric heating element?"
    )
    linked = [e.model_dump() for e in linker.link(question, 20, clauses=AgentConfig().clause_settings())]
    assert {e["group"] for e in linked} == {0, 1}
    ranked = rank_targets(catalog.skb, "Product", linked, [], list(PRODUCTS))
    assert [k for k, _ in ranked[:2]] == ["P_BREAKFAST", "P_KITCHEN"]  # both clauses, then the kettle alone


# -- scoring weights set per call (AgentConfig) over the profile's --------------------------------


def test_agent_config_scoring_overrides_reach_the_ranking() -> None:
    skb = tiny_skb()  # profile: frequency_mix 0.1, size_penalty 0.5 (the ScoringSpec defaults)
    linked = [{"key": "A1", "label": "Term", "mention": "a1"}, {"key": "B1", "label": "Term", "mention": "b1"}]
    cfg = AgentConfig(frequency_mix=0.0, size_penalty=0.0)
    assert cfg.scoring_overrides() == {"frequency_mix": 0.0, "size_penalty": 0.0}
    assert AgentConfig().scoring_overrides() == {}  # nothing set: the profile decides
    ranked = dict(rank_targets(skb, "Item", linked, [], ["I1", "I2", "I3", "I4"], scoring=cfg.scoring_overrides()))
    # plain Resnik sums, shifted by the minimum (I2: A1~A2 share A, B1 unmatched), no size penalty:
    raw = {"I1": LN2, "I2": LN43, "I3": LN2, "I4": 2 * LN2}
    floor = min(raw.values())
    for item, value in raw.items():
        assert ranked[item] == pytest.approx(value - floor, abs=1e-4), item
    # with the profile's size penalty (0.5 x log(1 + |annotations|)) I4's second annotation costs it
    default = dict(rank_targets(skb, "Item", linked, [], ["I1", "I2", "I3", "I4"]))
    assert default["I4"] - default["I1"] < ranked["I4"] - ranked["I1"]


def test_clause_settings_defaults_live_in_agent_config() -> None:
    assert AgentConfig().clause_settings() == ClauseSettings()
    assert AgentConfig(clause_linking=False).clause_settings() is None


@pytest.mark.integration
def test_fuzzy_links_carry_their_confidence_as_ranking_weight(catalog: Any) -> None:
    linker = EntityLinker(catalog)
    question = "Which product has a toasterr?"  # a typo: linked fuzzily, not exactly
    plain = [e for e in linker.link(question, 20) if e.key == "C_TOASTER"]
    assert plain and plain[0].method == "fuzzy" and 0.0 < plain[0].score < 1.0 and plain[0].weight == 1.0
    weighted = [e for e in linker.link(question, 20, confidence_power=2.0) if e.key == "C_TOASTER"]
    assert weighted[0].weight == pytest.approx(plain[0].score**2, abs=1e-4)
    exact = linker.link("Which product has a toaster?", 20, confidence_power=2.0)
    assert [e.weight for e in exact if e.key == "C_TOASTER"] == [1.0]  # a named term keeps full weight


@pytest.mark.integration
def test_phrase_artifact_listed_as_large_data_files_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On HPO the phrase graph is ~100 MB: the build lists it under data_files (size + sampled digest)."""
    from graphs import build
    from graphs.bundle import IndexBundle

    monkeypatch.setattr(build, "LARGE_FILE_BYTES", 1)  # every file counts as large here
    build.build_index(catalog_skb(), tmp_path / "index", build.IndexConfig(dataset="catalog", store="none"))
    with IndexBundle.open(tmp_path / "index", store="none") as bundle:
        assert "phrases/phrases.bin" in bundle.manifest.data_files
        index = phrase_index_for(bundle)
        assert index is not None and "C_KETTLE" in index.keys


# -- soft maximum over intermediates (a gene's diseases), hand-computed ---------------------------


def test_soft_max_over_intermediates_counts_several_good_ones() -> None:
    skb = tiny_skb()
    for group, items in {"G1": ["I1", "I4"], "G2": ["I4"], "G3": ["I2"]}.items():
        skb.add_node(Node(group, "Group", {"name": f"group {group}"}))
        for item in items:
            skb.add_edge(Edge(item, "MEMBER_OF", group))
    linked = [{"key": "A1", "label": "Term", "mention": "a1"}]
    path = [
        {"rel": "ANNOTATED", "direction": "in", "to_label": "Item"},
        {"rel": "MEMBER_OF", "direction": "out", "to_label": "Group"},
    ]
    plain = {"frequency_mix": 0.0, "size_penalty": 0.0}
    # item scores for A1 (shifted by the minimum, I3's 0): I1 ln 2, I2 ln 4/3, I4 ln 2
    hard = dict(rank_targets(skb, "Group", linked, [path], ["G1", "G2", "G3"], scoring={**plain}))
    assert hard["G1"] == pytest.approx(LN2, abs=1e-4) and hard["G2"] == pytest.approx(LN2, abs=1e-4)
    assert hard["G3"] == pytest.approx(LN43, abs=1e-4)
    soft = dict(
        rank_targets(skb, "Group", linked, [path], ["G1", "G2", "G3"], scoring={**plain, "intermediate_temperature": 1.0})
    )
    assert soft["G1"] == pytest.approx(LN2 + math.log(2.0), abs=1e-4)  # two items at ln 2: + T log 2
    assert soft["G2"] == pytest.approx(LN2, abs=1e-4)
    assert soft["G3"] == pytest.approx(LN43, abs=1e-4)
    assert AgentConfig(intermediate_temperature=1.0).scoring_overrides() == {"intermediate_temperature": 1.0}


# -- questions that name no answer type ------------------------------------------------------------

@pytest.mark.integration
def test_a_question_naming_no_answer_type_plans_for_the_profiles_default_label(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a type word the plan has no target (semantic search over every label) unless the profile
    names a default answer label that this SKB has: then the schema's paths lead to it."""
    from agent.graph import AgentGraph
    from agent.nodes.plan import heuristic_plan

    question = "Something with a kettle and a toaster -- any idea?"
    linked = [e.model_dump() for e in EntityLinker(catalog).link(question, 20)]
    assert {e["key"] for e in linked} == {"C_KETTLE", "C_TOASTER"}
    graph = AgentGraph(catalog, AgentConfig())
    assert heuristic_plan(graph.runtime, question, linked, AgentConfig()) == (None, [])

    base = catalog.skb.profile
    monkeypatch.setattr(catalog.skb, "profile", base.model_copy(update={"planner": PlannerSpec(default_answer_label="Product")}))
    target, paths = heuristic_plan(graph.runtime, question, linked, AgentConfig())
    assert target == "Product"
    assert [{"rel": "IN_CATEGORY", "direction": "in", "to_label": "Product"}] in paths
    # A type word still wins over the default, and a default label the SKB lacks is ignored.
    assert heuristic_plan(graph.runtime, "Which category has a kettle?", linked, AgentConfig())[0] == "Category"
    monkeypatch.setattr(catalog.skb, "profile", base.model_copy(update={"planner": PlannerSpec(default_answer_label="Recipe")}))
    assert heuristic_plan(graph.runtime, question, linked, AgentConfig()) == (None, [])
