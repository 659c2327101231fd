"""The triples loader (head|rel|tail, TSV, .gz) and domain-profile validation."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from graphs.errors import LoaderError
from graphs.loaders import load_dataset
from graphs.loaders.jsonl import load_jsonl, write_jsonl
from graphs.loaders.triples import load_triples, read_triples
from graphs.skb.model import SKB, Edge, Node, NodeType
from graphs.skb.profile import MAX_EXEMPLARS, Profile, load_profile, packaged_profile, parse_profile, profile_for
from tests.paths import FIXTURES

FIXTURE = FIXTURES / "metaqa_mini" / "kb.txt"

TOY_PROFILE = """
name = "kitchen"
label_precedence = ["Recipe", "Chef"]
literal_labels = ["Ingredient"]

[relations.uses_ingredient]
signature = "Recipe -> Ingredient"
forward = "the ingredients of {x}"
inverse = "the recipes using {x}"

[relations.created_by]
signature = "Recipe -> Chef"
"""


def test_metaqa_fixture_types_nodes_by_signature_and_keys_are_names() -> None:
    skb = load_dataset("metaqa", FIXTURE)
    assert skb.name == "metaqa"
    assert skb.nodes["Ada Quill"].label == "Person"
    assert skb.nodes["1994"].label == "Year"
    assert skb.nodes["lighthouse"].label == "Tag"
    assert skb.nodes["Drama"].label == "Genre"
    assert len(skb.edges) == 27
    assert all(node.key == node.name for node in skb.nodes.values())


def test_a_name_in_two_roles_is_one_node_labelled_by_precedence_with_all_edges() -> None:
    skb = load_dataset("metaqa", FIXTURE)
    # an actor who also directs: one Person node, both relations attached
    dev = skb.nodes["Dev Okafor"]
    assert dev.label == "Person" and "roles" not in dev.props
    assert {e.rel for e in skb.in_edges("Dev Okafor")} == {"starred_actors", "directed_by"}
    # a tag spelled like a title: one node, Movie wins over the literal label Tag, roles recorded
    harbor = skb.nodes["Harbor Lights"]
    assert harbor.label == "Movie" and harbor.props["roles"] == ["Movie", "Tag"]
    assert [e.src for e in skb.in_edges("Harbor Lights") if e.rel == "has_tags"] == ["Night Ferry"]


def test_tsv_gzip_comments_and_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "kb.tsv.gz"
    body = "# a comment\nPad Thai\tuses_ingredient\tRice noodles\n\nPad Thai\tcreated_by\tAna|Bo\n"
    body += "Pad Thai\tuses_ingredient\tRice noodles\n"
    path.write_bytes(gzip.compress(body.encode()))
    assert read_triples(path) == [("Pad Thai", "uses_ingredient", "Rice noodles"), ("Pad Thai", "created_by", "Ana|Bo")]
    skb = load_triples(path, parse_profile({"relations": {
        "uses_ingredient": {"signature": "Recipe -> Ingredient"}, "created_by": {"signature": "Recipe -> Chef"}}}))
    assert skb.nodes["Ana|Bo"].label == "Chef"


def test_without_a_profile_types_are_induced_from_the_relations(tmp_path: Path) -> None:
    path = tmp_path / "kb.txt"
    path.write_text("a|knows|b\n")
    skb = load_triples(path)
    # the head type has no name in the data ("Entity"); the tail is named by the relation word
    assert skb.nodes["a"].label == "Entity" and skb.nodes["b"].label == "Knows"
    assert "relations.knows" in skb.profile.induced


def test_bad_triple_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "kb.txt"
    path.write_text("a|knows|b\njust two|fields\n")
    with pytest.raises(LoaderError, match="line 2"):
        read_triples(path)


def test_relation_missing_from_the_profile_is_induced(tmp_path: Path) -> None:
    path = tmp_path / "kb.txt"
    path.write_text("Pad Thai|cooked_in|Wok\nPad Thai|uses_ingredient|Rice noodles\n")
    profile = tmp_path / "kitchen.toml"
    profile.write_text(TOY_PROFILE)
    skb = load_triples(path, profile)
    assert "relations.cooked_in" in skb.profile.induced and "relations.uses_ingredient" not in skb.profile.induced
    assert skb.profile.relations["cooked_in"].aliases == ["cooked"]
    assert skb.nodes["Rice noodles"].label == "Ingredient"  # the written signature still types its nodes


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"relations": {"created_by": {"signature": "Recipe => Chef"}}}, "relations.created_by.signature"),
        ({"relations": {"created_by": {"signature": "Recipe -> Chef", "forward": "the chef"}}},
         "relations.created_by.forward"),
        ({"planner": {"max_hops": 7}}, "planner.max_hops"),
        ({"scoring": {"frequency_mix": 2}}, "scoring.frequency_mix"),
        ({"linking": {"frame_wrods": ["x"]}}, "linking.frame_wrods"),
        ({"exemplars": [{"question": "who made [X]", "path": ["created_by"]}]}, "exemplars.0.path"),
    ],
)
def test_bad_profile_error_names_the_field(tmp_path: Path, patch: dict[str, object], field: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(patch))
    with pytest.raises(LoaderError) as err:
        load_profile(path)
    assert f"field {field}" in str(err.value)
    assert "fix:" in str(err.value)


def test_too_many_exemplars_and_unknown_exemplar_relation_are_refused() -> None:
    rels = {"created_by": {"signature": "Recipe -> Chef"}}
    many = [{"question": f"who made [X] {i}", "path": [">created_by"]} for i in range(MAX_EXEMPLARS + 1)]
    with pytest.raises(LoaderError, match="field exemplars"):
        parse_profile({"relations": rels, "exemplars": many})
    with pytest.raises(LoaderError, match="cooked_in"):
        parse_profile({"relations": rels, "exemplars": [{"question": "what wok [X]", "path": [">cooked_in"]}]})


def test_bad_toml_syntax_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("name = \n")
    with pytest.raises(LoaderError, match="not valid toml"):
        load_profile(path)


def test_shipped_profiles_are_valid_and_within_limits() -> None:
    metaqa = packaged_profile("metaqa")
    hpo = packaged_profile("hpo")
    assert metaqa is not None and hpo is not None
    assert 0 < len(metaqa.exemplars) <= MAX_EXEMPLARS and metaqa.planner.relation_paths
    assert hpo.scoring.edge_weight_property == "freq" and not hpo.planner.relation_paths
    assert "proband" in hpo.linking.frame_words


def test_profile_travels_with_the_skb_through_jsonl(tmp_path: Path) -> None:
    profile = tmp_path / "kitchen.toml"
    profile.write_text(TOY_PROFILE)
    kb = tmp_path / "kb.txt"
    kb.write_text("Pad Thai|uses_ingredient|Rice noodles\nPad Thai|created_by|Ana\n")
    skb = load_triples(kb, profile)
    write_jsonl(skb, tmp_path / "skb")
    again = load_jsonl(tmp_path / "skb")
    assert profile_for(again).relations["uses_ingredient"].inverse == "the recipes using {x}"
    assert profile_for(again).name == "kitchen"


def test_profile_found_by_skb_name_for_indexes_built_before_profiles() -> None:
    assert profile_for(SKB("hpo")).scoring.edge_weight_property == "freq"
    assert profile_for(SKB("something-else")) == Profile()


def test_node_name_follows_the_types_name_field() -> None:
    skb = SKB("t", [NodeType(label="Gene", name_field="symbol")])
    skb.add_node(Node("NCBI:2263", "Gene", {"symbol": "FGFR2"}))
    skb.add_node(Node("X:1", "Other", {"name": "plain"}))
    assert skb.nodes["NCBI:2263"].name == "FGFR2"
    assert skb.nodes["X:1"].name == "plain"


def test_schema_render_gives_planners_the_profile_words_within_budget() -> None:
    from graphs.skb.model import PROFILE_PROMPT_CHARS

    schema = load_dataset("metaqa", FIXTURE).schema()
    text = schema.render()
    assert "-[:directed_by]->(:Person) [4] -- the person who directed a movie" in text
    assert "who was the director of [X] -> >directed_by" in text
    # every path length is represented even when the budget cuts the list
    assert ">starred_actors <starred_actors >directed_by" in text
    profile_part = text[text.index("Relationships:"):]
    assert len(profile_part) <= PROFILE_PROMPT_CHARS + 1200  # + the relation pattern lines themselves
    # an SKB without a profile renders as before: no descriptions, no examples
    plain = SKB("plain")
    plain.add_node(Node("a", "Thing", {"name": "a"}))
    plain.add_node(Node("b", "Thing", {"name": "b"}))
    plain.add_edge(Edge("a", "knows", "b"))
    assert plain.schema().render().endswith("- (:Thing)-[:knows]->(:Thing) [1]")


def test_load_dataset_wires_triples_with_a_profile_file_and_refuses_it_elsewhere(tmp_path: Path) -> None:
    profile = tmp_path / "kitchen.toml"
    profile.write_text(TOY_PROFILE)
    kb = tmp_path / "kb.txt"
    kb.write_text("Pad Thai|uses_ingredient|Rice noodles\n")
    skb = load_dataset("triples", kb, profile)
    assert skb.name == "kitchen" and skb.nodes["Rice noodles"].label == "Ingredient"
    with pytest.raises(LoaderError, match="--profile applies to the triples and jsonl datasets"):
        load_dataset("docs", tmp_path, profile)
    with pytest.raises(LoaderError, match="needs a path"):
        load_dataset("triples", None)
