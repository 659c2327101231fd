"""Typing a triples graph with thousands of relation names: the same types as with a few, in linear time.

Two loops were quadratic in the number of types: the search for a free numbered name when many roles
share a base name, and the label-precedence lookup per name. These tests pin what they compute.
"""

from __future__ import annotations

from pathlib import Path

from graphs.loaders.triples import load_triples
from graphs.skb.induce import induce_types
from graphs.skb.profile import Profile


def test_roles_sharing_one_base_name_are_numbered_in_order() -> None:
    relations = 1500
    triples = [(f"h{r}-{j}", f"link_{r:04d}", f"t{r}-{j}") for r in range(relations) for j in range(2)]
    sigs, precedence, _ = induce_types(triples)
    heads = [sigs[f"link_{r:04d}"][0] for r in range(relations)]
    # every head role is its own type that no relation name can name: Entity, Entity2, ... with no gap
    assert len(heads) == len(set(heads))
    assert set(heads) == {"Entity"} | {f"Entity{k}" for k in range(2, relations + 1)}
    assert len(set(heads) | {t for _, t in sigs.values()}) == 2 * relations
    assert precedence[0] == "Entity"


def test_precedences_match_precedence_for_every_label() -> None:
    profile = Profile(label_precedence=["B", "A", "B", "C"], literal_labels=["Year", "Date", "Year"])
    labels = ["A", "B", "C", "D", "Year", "Date", "Z"]
    ranks = profile.precedences(labels)
    assert ranks == {lab: profile.precedence(lab) for lab in labels}
    assert ranks == {"A": 1, "B": 0, "C": 3, "D": 4, "Year": 5, "Date": 6, "Z": 4}


def test_a_name_in_many_roles_takes_the_label_that_comes_first(tmp_path: Path) -> None:
    lines = [f"hub|rel_{r:04d}|leaf {r}" for r in range(400)] + [f"root {r}|rel_{r:04d}|hub" for r in range(400)]
    (tmp_path / "kb.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    skb = load_triples(tmp_path / "kb.txt")
    assert skb.profile is not None
    hub = skb.nodes["hub"]
    ranks = skb.profile.precedences(hub.props["roles"])
    assert hub.label == hub.props["roles"][0]
    assert [ranks[lab] for lab in hub.props["roles"]] == sorted(ranks.values())
    assert len(hub.props["roles"]) > 1
