"""Re-scoring a described clause's shortlist (``agent.linking.rescoring``) on a hand-made workshop graph.

The graph has labels Tool/Kit, synonyms in ``alias`` and definitions in ``about`` (no label, property or
relation name of any benchmark), indexed with the real MiniLM embedder. Each paraphrase below is written by
hand in other words than the right term's definition, next to a decoy whose *name* is nearer to the
wording than any single phrase of the right term: the nearest phrase alone picks the decoy, the joint score
(every phrase of a candidate plus the clause words its names, aliases and definition share) the right term.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.config import AgentConfig
from agent.linking.entities import EntityLinker
from agent.linking.rescoring import NodeWords, coverage, rescore, soft_max, words
from graphs.index.phrases import node_phrases, phrase_entries, phrase_index_for
from graphs.skb.model import SKB, Edge, Node, NodeType
from graphs.skb.profile import LinkingSpec, Profile

TOOLS: dict[str, tuple[str, list[str], str]] = {
    "T_ROOT": ("hand tool", [], "A tool worked by hand rather than by a motor."),
    "T_CUT": ("cutting tool", [], "A tool with an edge that divides or removes material."),
    "T_SAW": ("hand saw", ["panel saw"], "A cutting tool with a toothed steel blade pushed and pulled through timber."),
    "T_HACKSAW": ("hacksaw", ["metal saw"], "A fine-toothed saw held taut in a frame, for cutting metal pipes and bolts."),
    "T_CHISEL": ("chisel", ["wood chisel"], "A tool with a sharpened flat blade that is struck with a mallet to carve timber."),
    "T_PLANE": (
        "hand plane",
        ["smoothing plane", "bench plane"],
        "A tool that shaves thin curls from the surface of a board to flatten and smooth it.",
    ),
    "T_FILE": ("file", ["rasp"], "A hardened steel bar with rows of sharp ridges that abrade metal or wood."),
    "T_SANDER": ("sanding block", ["sandpaper block"], "A block wrapped in abrasive paper, rubbed over wood to make it smooth."),
    "T_CLAMP": ("clamp", ["vise grip"], "A device that holds two pieces together tightly while glue sets."),
    "T_LEVEL": ("spirit level", ["bubble level"], "An instrument with a bubble in a liquid-filled vial that shows whether a surface is horizontal."),
    "T_AWL": ("awl", ["bradawl"], "A pointed spike for piercing small holes in leather or wood."),
    # decoys: names close to the paraphrases below, definitions about something else
    "T_SHAVINGS": ("wood shavings bag", [], "A sack that collects the dust a machine throws off."),
    "T_CUTTER": ("metal cutter", [], "A shear for trimming sheet roofing."),
    "T_FLATTENER": ("board flattener", [], "A heavy press that holds warped panels under weight."),
}
KINDS = {"T_CUT": "T_ROOT", "T_SANDER": "T_ROOT", "T_CLAMP": "T_ROOT", "T_LEVEL": "T_ROOT", "T_AWL": "T_ROOT",
         "T_SHAVINGS": "T_ROOT", "T_CUTTER": "T_ROOT", "T_FLATTENER": "T_ROOT", "T_SAW": "T_CUT",
         "T_HACKSAW": "T_CUT", "T_CHISEL": "T_CUT", "T_PLANE": "T_CUT", "T_FILE": "T_CUT"}
KITS = {"K_JOINERY": ["T_PLANE", "T_CHISEL", "T_CLAMP"], "K_PRESS": ["T_FLATTENER", "T_CLAMP"],
        "K_METAL": ["T_HACKSAW", "T_FILE"], "K_ROOF": ["T_CUTTER", "T_LEVEL"]}

#: (hand-written paraphrase, right term, the decoy the nearest single phrase picks)
PARAPHRASES = [
    ("Which kit has a tool for flattening boards by shaving the surface; and a clamp?", "T_PLANE", "T_FLATTENER"),
    ("Which kit has a metal cutter with a fine-toothed blade held in a frame; and a file?", "T_HACKSAW", "T_CUTTER"),
]


def workshop_skb() -> SKB:
    skb = SKB("workshop")
    skb.profile = Profile(linking=LinkingSpec(vocabulary_labels=["Tool"], definition_fields=["about"]))
    skb.node_types["Tool"] = NodeType(label="Tool", synonym_field="alias", text_fields=["name", "alias", "about"])
    skb.node_types["Kit"] = NodeType(label="Kit", text_fields=["name"])
    for key, (name, alias, about) in TOOLS.items():
        props: dict[str, Any] = {"name": name, "about": about}
        if alias:
            props["alias"] = alias
        skb.add_node(Node(key, "Tool", props))
    for key in KITS:
        skb.add_node(Node(key, "Kit", {"name": key.lower().replace("_", " ")}))
    for child, parent in KINDS.items():
        skb.add_edge(Edge(child, "KIND_OF", parent))
    for kit, tools in KITS.items():
        for tool in tools:
            skb.add_edge(Edge(kit, "CONTAINS", tool))
    return skb


@pytest.fixture(scope="module")
def workshop(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle

    index_dir = tmp_path_factory.mktemp("workshop") / "index"
    build_index(workshop_skb(), index_dir, IndexConfig(dataset="workshop", store="none"))
    bundle = IndexBundle.open(index_dir, store="none")
    yield bundle
    bundle.close()


def _first_candidates(bundle: Any, question: str, config: AgentConfig) -> list[str]:
    found = EntityLinker(bundle).link(question, 20, clauses=config.clause_settings())
    firsts: dict[int, str] = {}
    for ent in found:
        if ent.group is not None:
            firsts.setdefault(ent.group, ent.key)
    return [firsts[g] for g in sorted(firsts)]


@pytest.mark.integration
@pytest.mark.parametrize(("question", "right", "decoy"), PARAPHRASES, ids=lambda v: str(v)[:30])
def test_joint_rescoring_links_a_paraphrase_the_nearest_phrase_gets_wrong(
    workshop: Any, question: str, right: str, decoy: str
) -> None:
    assert _first_candidates(workshop, question, AgentConfig()) == [right]
    # the default margin may keep the decoy as a weaker reading of the clause, never as a stronger one
    weights = {e.key: e.weight for e in EntityLinker(workshop).link(question, 20, clauses=AgentConfig().clause_settings())
               if e.group is not None}
    assert weights[right] > weights.get(decoy, 0.0)
    tight = AgentConfig(clause_margin=0.05)
    linked = {e.key for e in EntityLinker(workshop).link(question, 20, clauses=tight.clause_settings())}
    assert decoy not in linked
    # the same clause with re-scoring off: the decoy's name is the nearest single phrase, so the decoy is
    # the clause's first candidate, or (where the clause names it) its exact name stands and the right term is lost
    off = AgentConfig(clause_rescore_pool=0)
    assert _first_candidates(workshop, question, off) in ([decoy], [])
    linked_off = {e.key for e in EntityLinker(workshop).link(question, 20, clauses=off.clause_settings())}
    assert decoy in linked_off


@pytest.mark.integration
def test_rescored_clause_ranks_the_right_kit(workshop: Any) -> None:
    from agent.planning.ranking import rank_targets

    question = PARAPHRASES[0][0]
    ranked = {}
    for pool in (30, 0):
        linked = EntityLinker(workshop).link(question, 20, clauses=AgentConfig(clause_rescore_pool=pool).clause_settings())
        ranked[pool] = [k for k, _ in rank_targets(workshop.skb, "Kit", [e.model_dump() for e in linked], [], list(KITS))]
    assert ranked[30][0] == "K_JOINERY"  # plane + clamp
    assert ranked[0][0] == "K_PRESS"  # flattener + clamp


@pytest.mark.integration
def test_search_phrases_returns_every_near_phrase_of_each_term(workshop: Any) -> None:
    index = phrase_index_for(workshop)
    assert index is not None
    vec = np.asarray(workshop.embedder.embed(["smoothing plane"]), dtype=np.float32)
    hits = index.search_phrases(vec, 3, len(index))[0]
    assert len(hits) == 3 and hits[0][0] == "T_PLANE"
    # with the whole index as the pool every phrase of each term comes back, best first
    assert len(hits[0][1]) == len(node_phrases(workshop.skb, "T_PLANE")) == 4
    assert hits[0][1] == sorted(hits[0][1], reverse=True) and hits[0][1][0] == pytest.approx(1.0, abs=1e-3)
    assert [b[0] for _, b in hits] == sorted((b[0] for _, b in hits), reverse=True)
    # a small pool keeps the k terms but only their phrases within it
    assert sum(len(s) for _, s in index.search_phrases(vec, 3, 5)[0]) <= 5


def test_node_phrases_match_the_phrase_entries() -> None:
    skb = workshop_skb()
    entries = list(phrase_entries(skb))
    for key in TOOLS:
        assert node_phrases(skb, key) == [(kind, text) for k, kind, text in entries if k == key]
    assert node_phrases(skb, "K_METAL") == [] and node_phrases(skb, "missing") == []


# -- the pieces, computed by hand --------------------------------------------------------------------


def test_soft_max_is_the_best_similarity_raised_by_agreeing_phrases() -> None:
    assert soft_max([0.7], 0.05) == pytest.approx(0.7)
    assert soft_max([0.7, 0.7], 0.05) == pytest.approx(0.7 + 0.05 * math.log(2))
    assert soft_max([0.7, 0.2], 0.05) == pytest.approx(0.7 + 0.05 * math.log(1 + math.exp(-10)))
    assert soft_max([0.7, 0.69], 0.0) == pytest.approx(0.7)
    assert soft_max([], 0.05) == 0.0


def test_words_meet_by_root_and_coverage_counts_clause_words() -> None:
    assert words("The boards were shaved") == frozenset({"board", "shave"})
    assert coverage(words("shaving boards flat"), words("it shaves a board")) == pytest.approx(2 / 3)
    assert coverage(frozenset(), words("anything")) == 0.0


def test_rescore_orders_by_joint_score_on_the_cosine_scale() -> None:
    skb = workshop_skb()
    clause = "flattening boards by shaving the surface"
    hits = [("T_FLATTENER", [0.72]), ("T_PLANE", [0.65, 0.30])]
    got = dict(rescore(clause, hits, NodeWords(skb), lexical_weight=0.4, temperature=0.05))
    clause_words = words(clause)
    plane = coverage(clause_words, words(" ".join(t for _, t in node_phrases(skb, "T_PLANE"))))
    press = coverage(clause_words, words("board flattener A heavy press that holds warped panels under weight."))
    assert (plane, press) == (1.0, 0.5)  # flatten, board, shave, surface / flatten, board
    assert got["T_PLANE"] == pytest.approx((soft_max([0.65, 0.30], 0.05) + 0.4 * 1.0) / 1.4)
    assert got["T_FLATTENER"] == pytest.approx((0.72 + 0.4 * 0.5) / 1.4)
    assert list(got) == ["T_PLANE", "T_FLATTENER"]
    # lexical weight 0: the soft maximum alone decides
    plain = rescore(clause, hits, NodeWords(skb), lexical_weight=0.0, temperature=0.05)
    assert [k for k, _ in plain] == ["T_FLATTENER", "T_PLANE"]
    assert rescore(clause, [], NodeWords(skb), lexical_weight=0.4, temperature=0.05) == []


def test_node_words_cache_is_bounded() -> None:
    cache = NodeWords(workshop_skb(), limit=3)
    for key in list(TOOLS)[:6]:
        assert cache(key)
    assert len(cache._cache) == 3
    assert cache("K_METAL") == frozenset()  # not a vocabulary node: no phrases


def test_rescoring_settings_reach_the_clause_settings(tmp_path: Path) -> None:
    cfg = AgentConfig(clause_rescore_pool=12, clause_lexical_weight=0.1, clause_phrase_temperature=0.0)
    settings = cfg.clause_settings()
    assert settings is not None
    assert (settings.rescore_pool, settings.lexical_weight, settings.phrase_temperature) == (12, 0.1, 0.0)
