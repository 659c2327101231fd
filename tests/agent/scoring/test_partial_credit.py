"""Partial credit through the hierarchy (``scoring.partial_credit_power``) on hand-made graphs.

- ``match_value`` and ``score`` on the tiny Term/Item ontology of tests/agent/planning/test_offline_planner.py, values
  computed by hand;
- a library graph (labels Subject/Book, relation BROADER_THAN drawn parent -> child, definitions in
  ``scope``; no label, property or relation name of any benchmark) where a question describes four
  subjects in its own words, each clause linked by the real linker and MiniLM embedder. One book carries
  three of the described subjects themselves; a large generalist book carries a *sibling* of every one.
  Resnik (power 1) credits each sibling match with the shared parent's information content in full,
  and the generalist collects that from every clause; a power of 3 keeps the exact matches whole and
  shrinks the sibling matches, so the book that has the subjects ranks first.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.linking.entities import EntityLinker
from agent.planning.ranking import rank_targets
from agent.scoring.ontology import match_value
from agent.scoring.stored import model_for, stored_model
from graphs.skb.model import SKB, Edge, Node, NodeType
from graphs.skb.profile import LinkingSpec, Profile, ScoringSpec
from tests.small_graphs import tiny_skb

LN2, LN4, LN43 = math.log(2), math.log(4), math.log(4 / 3)


# -- the credit function, by hand ----------------------------------------------------------------


def test_power_one_is_resnik_and_an_exact_match_keeps_its_full_credit() -> None:
    assert match_value(1.2, 3.0, 1.0) == 1.2  # the shared term's IC: Resnik
    assert match_value(3.0, 3.0, 3.0) == 3.0  # the term itself (or a narrower annotation): IC(q) at any power
    assert match_value(0.0, 3.0, 3.0) == 0.0  # only the root shared: nothing
    assert match_value(2.4, 3.0, 3.0) == pytest.approx(3.0 * 0.8**3)
    # a near match keeps more of its credit than a far one, and a higher power widens the gap
    near, far = match_value(2.4, 3.0, 3.0) / 3.0, match_value(0.6, 3.0, 3.0) / 3.0
    assert near > 0.5 > far and near / far > 2.4 / 0.6


def test_score_on_the_tiny_ontology_matches_the_hand_computed_values() -> None:
    model = model_for(tiny_skb(), "Item", "Term")
    assert model is not None and model.partial_credit_power == 1.0  # the ScoringSpec default: Resnik
    plain = {"frequency_mix": 0.0, "size_penalty": 0.0}

    def scores(power: float) -> dict[str, float]:
        values = model.score(["A2"], partial_credit_power=power, **plain)
        return {t: float(values[i]) for i, t in enumerate(model.targets)}

    # A2 (IC ln 4) is annotated on I2 only; I1 and I4 share its parent A (IC ln 4/3); I3 shares the root only.
    resnik = scores(1.0)
    assert resnik == pytest.approx({"I1": LN43, "I2": LN4, "I3": 0.0, "I4": LN43}, abs=1e-5)
    sharp = scores(3.0)
    assert sharp == pytest.approx({"I1": LN4 * (LN43 / LN4) ** 3, "I2": LN4, "I3": 0.0, "I4": LN4 * (LN43 / LN4) ** 3}, abs=1e-5)
    # score_groups (clause candidates) takes the same power
    grouped = model.score_groups([[("A2", 1.0), ("B1", 0.5)]], partial_credit_power=3.0, **plain)
    assert float(grouped[model.target_index["I1"]]) == pytest.approx(LN4 * (LN43 / LN4) ** 3, abs=1e-5)
    assert float(grouped[model.target_index["I3"]]) == pytest.approx(0.5 * LN2, abs=1e-5)


def test_the_power_comes_from_the_profile_and_agent_config_overrides_it() -> None:
    skb = tiny_skb()
    skb.profile = Profile(scoring=ScoringSpec(edge_weight_property="freq", frequency_mix=0.0, size_penalty=0.0,
                                              partial_credit_power=3.0))
    model = model_for(skb, "Item", "Term")
    assert model is not None and model.partial_credit_power == 3.0
    linked = [{"key": "A2", "label": "Term", "mention": "a2"}]
    items = ["I1", "I2", "I3", "I4"]
    profile = dict(rank_targets(skb, "Item", linked, [], items))
    resnik = dict(rank_targets(skb, "Item", linked, [], items, scoring=AgentConfig(partial_credit_power=1.0).scoring_overrides()))
    assert profile["I1"] == pytest.approx(LN4 * (LN43 / LN4) ** 3, abs=1e-4)  # shifted by I3's 0
    assert resnik["I1"] == pytest.approx(LN43, abs=1e-4)
    assert AgentConfig(partial_credit_power=2.0).scoring_overrides() == {"partial_credit_power": 2.0}


def test_a_power_below_one_is_refused_with_the_field_named() -> None:
    from graphs.errors import SKBError
    from graphs.skb.profile import parse_profile

    with pytest.raises(SKBError, match=r"scoring\.partial_credit_power"):
        parse_profile({"scoring": {"partial_credit_power": 0.5}}, "test profile")
    with pytest.raises(ValueError, match="partial_credit_power"):
        AgentConfig(partial_credit_power=0.5)


# -- a library graph and hand-written paraphrases through the real linker -------------------------

#: key: (name, synonyms, scope note); the four described subjects are Q1-Q4, their siblings S1-S4.
SUBJECTS: dict[str, tuple[str, list[str], str]] = {
    "X_ROOT": ("subject", [], "Any topic a book can be about."),
    "X_SKY": ("astronomy", [], "The study of objects beyond the atmosphere of the earth."),
    "X_COMET": ("comets", [], "Icy bodies that grow a glowing tail of gas and dust when they pass close to the sun."),
    "X_HOLE": ("black holes", [], "Regions of space whose gravity is so strong that not even light escapes."),
    "X_BAKE": ("baking", [], "Cooking food with dry heat in an oven."),
    "X_BREAD": ("sourdough bread", [], "Bread leavened by a starter of wild yeast and lactic bacteria kept alive with flour and water."),
    "X_CAKE": ("wedding cakes", [], "Tall decorated cakes served at a marriage celebration."),
    "X_GARDEN": ("gardening", [], "Growing plants in a plot of land."),
    "X_PRUNE": ("pruning fruit trees", [], "Cutting back the branches of apple and pear trees in winter so they bear more fruit."),
    "X_LAWN": ("lawn care", [], "Mowing and feeding a grass lawn."),
    "X_SEA": ("sailing", [], "Travelling on water in a boat driven by wind."),
    "X_KNOT": ("knot tying", [], "Making loops and hitches in rope that hold under load and untie easily."),
    "X_RACE": ("yacht racing", [], "Competing in sailing boats around a course marked by buoys."),
    "X_MISC": ("reference works", [], "Dictionaries, atlases and encyclopedias."),
}
BROADER = {"X_SKY": "X_ROOT", "X_BAKE": "X_ROOT", "X_GARDEN": "X_ROOT", "X_SEA": "X_ROOT", "X_MISC": "X_ROOT",
           "X_COMET": "X_SKY", "X_HOLE": "X_SKY", "X_BREAD": "X_BAKE", "X_CAKE": "X_BAKE",
           "X_PRUNE": "X_GARDEN", "X_LAWN": "X_GARDEN", "X_KNOT": "X_SEA", "X_RACE": "X_SEA"}
#: The book that has three of the described subjects, and the generalist that has a sibling of each of the four.
BOOKS = {"B_HOMESTEAD": ["X_COMET", "X_BREAD", "X_PRUNE"], "B_ALMANAC": ["X_HOLE", "X_CAKE", "X_LAWN", "X_RACE"]}
#: Other books, each on a reference work only: they make the four branches rare (informative).
FILLERS = 26

#: Four described subjects in the reader's own words (no subject's name, nor its scope note quoted).
QUESTION = (
    "Which book covers frozen lumps of rock and ice that sprout a bright streaming tail near the sun; "
    "loaves that rise from a wild yeast starter fed with flour and water; "
    "trimming the limbs of apple and pear trees in the cold months for a bigger harvest; "
    "and tying rope into loops and hitches that stay firm under strain?"
)
DESCRIBED = ["X_COMET", "X_BREAD", "X_PRUNE", "X_KNOT"]


def library_skb(power: float) -> SKB:
    skb = SKB("library")
    skb.profile = Profile(
        linking=LinkingSpec(vocabulary_labels=["Subject"], definition_fields=["scope"]),
        scoring=ScoringSpec(partial_credit_power=power),
    )
    skb.node_types["Subject"] = NodeType(label="Subject", synonym_field="see_also", text_fields=["name", "scope"])
    skb.node_types["Book"] = NodeType(label="Book", text_fields=["name"])
    for key, (name, _, scope) in SUBJECTS.items():
        skb.add_node(Node(key, "Subject", {"name": name, "scope": scope}))
    for parent_child in BROADER.items():
        child, parent = parent_child
        skb.add_edge(Edge(parent, "BROADER_THAN", child))  # drawn parent -> child: the orientation is inferred
    books = {**BOOKS, **{f"B_REF{i}": ["X_MISC"] for i in range(FILLERS)}}
    for book, subjects in books.items():
        skb.add_node(Node(book, "Book", {"name": book.lower().replace("_", " ")}))
        for subject in subjects:
            skb.add_edge(Edge(book, "ABOUT", subject))
    return skb


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle

    index_dir = tmp_path_factory.mktemp("library") / "index"
    build_index(library_skb(3.0), index_dir, IndexConfig(dataset="library", store="none"))
    bundle = IndexBundle.open(index_dir, store="none")
    yield bundle
    bundle.close()


@pytest.mark.integration
def test_paraphrased_subjects_rank_the_book_that_has_them_over_the_generalist(library: Any) -> None:
    linked = [e.model_dump() for e in EntityLinker(library).link(QUESTION, 20, clauses=AgentConfig().clause_settings())]
    best = {}
    for ent in linked:
        assert ent["group"] is not None, ent  # every clause is a description, none names a subject
        best.setdefault(ent["group"], ent["key"])
    assert [best[g] for g in sorted(best)] == DESCRIBED  # each paraphrase's first candidate is its subject
    books = [n.key for n in library.skb.nodes.values() if n.label == "Book"]
    stored = stored_model(library.skb, "Book", "Subject")  # the index stored the model with the profile's power
    assert stored is not None and stored.partial_credit_power == 3.0
    sharp = rank_targets(library.skb, "Book", linked, [], books)  # the profile's power 3
    resnik = rank_targets(library.skb, "Book", linked, [], books, scoring={"partial_credit_power": 1.0})
    assert [k for k, _ in sharp[:2]] == ["B_HOMESTEAD", "B_ALMANAC"]
    assert [k for k, _ in resnik[:2]] == ["B_ALMANAC", "B_HOMESTEAD"]  # siblings of all four outweigh three exact
