"""Profile induction (graphs.skb.induce): toy graphs of books whose relations are named in three styles,
with the types and phrases expected written by hand; path choice with no profile; a no-profile
`skb index` + `skb ask`; a hand-written field winning over an induced one. No movie data anywhere."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from agent.planning.paths import PathPlanner
from graphs.loaders.triples import load_triples
from graphs.skb.induce import induce_types, label_words, merge, verbalise
from graphs.skb.language import relation_words, root
from graphs.skb.profile import Profile, parse_profile, profile_for

BOOKS = ["Quiet Harbor", "Salt and Iron", "The Glass Orchard", "Winter Ledger", "North of Ash", "Paper Moons",
         "Lantern Street", "The Copper Field", "Hollow Bells", "Sea of Reeds", "Grey Meridian", "Tin Crown"]
AUTHORS = ["Ines Varga", "Tomas Reed", "Lena Ortiz", "Omar Fell", "Ruth Calder", "Piet Amsel"]
ILLUSTRATORS = ["Tomas Reed", "Lena Ortiz", "Omar Fell", "Ruth Calder", "Piet Amsel", "Mara Quist"]
SUBJECTS = ["sailing", "mining", "orchards", "accounting", "forests", "astronomy"]
YEARS = ["1961", "1974", "1988", "1990", "2003", "2011", "1952", "1969", "1977", "1995", "2006", "2019"]


def _triples(written: str, illustrated: str, year: str, subject: str) -> list[tuple[str, str, str]]:
    out = []
    for i, book in enumerate(BOOKS):
        out.append((book, written, AUTHORS[i % 6]))
        out.append((book, illustrated, ILLUSTRATORS[(i + 1) % 6]))
        out.append((book, year, YEARS[i]))
        out.append((book, subject, SUBJECTS[i % 6]))
    return out


STYLES = {
    "snake_case": _triples("written_by", "illustrated_by", "publication_year", "has_subject"),
    "dotted": _triples("book.book.written_by", "book.book.illustrated_by", "book.book.publication_year",
                       "book.book.subject"),
    "camel_and_spaces": _triples("hasAuthor", "illustrator", "publication year", "main subject"),
}


def _write(tmp_path: Path, triples: list[tuple[str, str, str]]) -> Path:
    path = tmp_path / "kb.txt"
    path.write_text("".join(f"{h}|{r}|{t}\n" for h, r, t in triples), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        ("snake_case", {"written_by": ("Entity", "IllustratedBy"), "illustrated_by": ("Entity", "IllustratedBy"),
                        "publication_year": ("Entity", "Year"), "has_subject": ("Entity", "Subject")}),
        ("dotted", {"book.book.written_by": ("Book", "IllustratedBy"),
                    "book.book.illustrated_by": ("Book", "IllustratedBy"),
                    "book.book.publication_year": ("Book", "Year"), "book.book.subject": ("Book", "Subject")}),
        ("camel_and_spaces", {"hasAuthor": ("Entity", "Author"), "illustrator": ("Entity", "Author"),
                              "publication year": ("Entity", "Year"), "main subject": ("Entity", "Subject")}),
    ],
)
def test_types_are_induced_from_shared_role_names(style: str, expected: dict[str, tuple[str, str]]) -> None:
    # authors and illustrators are the same people (one type, named by its largest role, ties by name);
    # every book heads every relation (one type)
    sigs, precedence, literal = induce_types(STYLES[style])
    assert sigs == expected
    assert literal == ["Year"]  # numbers only
    assert precedence[0] == expected[next(iter(expected))][0]  # the type that heads relations comes first


@pytest.mark.parametrize(
    ("rel", "words", "aliases", "forward", "inverse"),
    [
        ("written_by", ["written", "by"], ["written"], "what {x} is written by", "what is written by {x}"),
        ("book.book.written_by", ["written", "by"], ["written"], "what {x} is written by", "what is written by {x}"),
        ("hasAuthor", ["has", "author"], ["author"], "the author of {x}", "what has author {x}"),
        ("publication year", ["publication", "year"], ["publication", "year"], "the publication year of {x}",
         "what has publication year {x}"),
        ("IN_LANGUAGE", ["in", "language"], ["language"], "the language of {x}", "what is in language {x}"),
    ],
)
def test_relation_names_in_any_style_become_words_and_phrases(
    rel: str, words: list[str], aliases: list[str], forward: str, inverse: str
) -> None:
    assert relation_words(rel) == words
    spec = verbalise(rel)
    assert (spec.aliases, spec.forward, spec.inverse) == (aliases, forward, inverse)


@pytest.mark.parametrize(
    ("label", "words"),
    [("Genre", ["genre", "genres"]), ("ReleaseYear", ["release", "releases", "year", "years"]),
     ("Votes", ["vote", "votes"]), ("WrittenBy", ["written"])],
)
def test_label_words_are_a_nouns_singular_and_plural(label: str, words: list[str]) -> None:
    assert label_words(label) == words  # a name that is a plural already keeps its singular, not "voteses"


def test_word_roots_join_inflections_and_agent_nouns() -> None:
    assert {root(w) for w in ("wrote", "written", "writes", "writer", "writing")} == {"write"}
    assert {root(w) for w in ("illustrated", "illustrator", "illustrates")} == {"illustrate"}
    assert root("subjects") == "subject" and root("authors") != root("subjects")
    # a word that is a verb in its own right is not read as an agent noun of a shorter verb
    assert root("number") == "number" and root("corner") == "corner" and root("player") == "play"


def test_a_written_field_wins_over_the_induced_one(tmp_path: Path) -> None:
    given = parse_profile({
        "relations": {"written_by": {"signature": "Book -> Person", "aliases": ["penned"]}},
        "planner": {"max_hops": 2},
    })
    skb = load_triples(_write(tmp_path, STYLES["snake_case"]), given)
    prof = profile_for(skb)
    written = prof.relations["written_by"]
    assert written.signature == "Book -> Person" and written.aliases == ["penned"]  # given, kept
    assert written.forward == "what {x} is written by"  # not given: induced
    # the user's type names replace the induced ones everywhere
    assert prof.relations["illustrated_by"].signature == "Book -> Person"
    assert skb.nodes["Quiet Harbor"].label == "Book" and skb.nodes["Ines Varga"].label == "Person"
    assert prof.planner.max_hops == 2 and prof.planner.relation_paths is True
    assert "relations.written_by.aliases" not in prof.induced and "relations.written_by.forward" in prof.induced
    assert "planner.max_hops" not in prof.induced and "planner.relation_paths" in prof.induced


def test_no_profile_means_every_field_is_induced_and_recorded(tmp_path: Path) -> None:
    prof = merge(None, STYLES["dotted"])
    assert set(prof.relations) == {r for _, r, _ in STYLES["dotted"]}
    assert "relations.book.book.written_by" in prof.induced and "labels.Book.words" in prof.induced
    assert prof.labels["Book"].words == ["book", "books"]
    assert Profile.model_validate(prof.model_dump()).relations == prof.relations  # stored and read back alike


@pytest.fixture(scope="module")
def embedder() -> object:
    from graphs.embedding.embedder import get_embedder

    return get_embedder("minilm")


@pytest.mark.integration
@pytest.mark.parametrize("style", sorted(STYLES))
def test_paths_are_chosen_without_a_profile(style: str, embedder: object, tmp_path: Path) -> None:
    skb = load_triples(_write(tmp_path, STYLES[style]), None)
    planner = PathPlanner(skb, embedder)
    rel = {r.split(".")[-1]: r for r in {r for _, r, _ in STYLES[style]}}
    writer = rel.get("written_by") or rel["hasAuthor"]
    noun = "writer" if "written_by" in rel else "author"  # the relation's own word, in another form

    def best(question: str) -> list[str]:
        return [h.spec() for h in planner.predict(question, "Quiet Harbor", "Quiet Harbor", top=1)[0].path]

    assert best("who wrote [Quiet Harbor]") == [f">{writer}"]
    assert best(f"which books share a {noun} with [Quiet Harbor]") == [f">{writer}", f"<{writer}"]
    year = rel.get("publication_year") or rel.get("publication year")
    assert best("in which year was [Quiet Harbor] published") == [f">{year}"]


@pytest.mark.integration
def test_skb_index_and_ask_with_no_profile(tmp_path: Path) -> None:
    kb = _write(tmp_path, STYLES["camel_and_spaces"])
    index_dir = tmp_path / "index"
    runner = CliRunner()
    built = runner.invoke(app, ["index", "--dataset", "triples", "--data", str(kb), "--index-dir", str(index_dir),
                                "--quiet"])
    assert built.exit_code == 0, built.output
    asked = runner.invoke(app, ["ask", "who is the author of [Salt and Iron]", "--index-dir", str(index_dir),
                                "--json", "--no-trace", "--k", "3", "--k-prime", "0"])
    assert asked.exit_code == 0, asked.output
    result = json.loads(asked.stdout)
    assert result["context"][0]["key"] == "Tomas Reed"
    # why: the scored candidate paths come with the answer, the walked one first, with its score's parts
    explained = result["path_scores"]
    assert explained["topic"] == "Salt and Iron" and explained["candidates"][0]["path"] == [">hasAuthor"]
    assert {"words", "render"} <= set(explained["candidates"][0]["parts"])
    shown = runner.invoke(app, ["profile", "show", "--index-dir", str(index_dir)])
    assert shown.exit_code == 0 and '[relations.hasAuthor]' in shown.stdout and "# induced" in shown.stdout
    out = tmp_path / "induced.toml"
    written = runner.invoke(app, ["profile", "induce", "--dataset", "triples", "--data", str(kb), "-o", str(out)])
    assert written.exit_code == 0, written.output
    from graphs.skb.profile import load_profile

    again = load_profile(out)  # the written profile is a valid profile a user can edit and pass back
    assert again.relations["hasAuthor"].signature == "Entity -> Author"
    # an LLM plan may walk as deep as the induced profile plans, unless the caller says otherwise
    from agent import AgentConfig
    from agent.graph import AgentGraph
    from graphs.bundle import IndexBundle

    bundle = IndexBundle.open(index_dir)
    assert AgentGraph(bundle, AgentConfig()).config.max_hops == 3
    assert AgentGraph(bundle, AgentConfig(max_hops=1)).config.max_hops == 1


@pytest.mark.integration
def test_llm_plan_offers_the_ranked_walks_when_there_are_too_many(
    embedder: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from agent.planning import llm
    from agent.planning.llm import PlanOnceSpec, path_choices, plan_parameters, validate_plan
    from agent.planning.walks import ranked_walks

    monkeypatch.setattr(llm, "MAX_PATH_CHOICES", 8)  # this toy has 14 walks; a large graph has dozens

    places = ["Lisbon", "Oslo", "Quito", "Hanoi"]
    extra = [(book, "set_in", places[i % 4]) for i, book in enumerate(BOOKS)]
    extra += [(book, "translated_into", ["Basque", "Welsh", "Tamil"][i % 3]) for i, book in enumerate(BOOKS)]
    triples = STYLES["snake_case"] + extra
    skb = load_triples(_write(tmp_path, triples), parse_profile({"planner": {"max_hops": 3}}))
    schema = skb.schema()
    linked = [{"key": "Quiet Harbor", "label": skb.nodes["Quiet Harbor"].label, "mention": "Quiet Harbor",
               "method": "exact", "score": 1.0}]
    assert path_choices(schema, linked, 3) == {}  # more walks than MAX_PATH_CHOICES: none spelled out
    bundle = SimpleNamespace(skb=skb, embedder=embedder)
    preferred = ranked_walks(bundle, "who wrote [Quiet Harbor]", linked, top=5)
    assert len(preferred) == 5
    assert preferred[0] == ("Entity", [{"rel": "written_by", "direction": "out", "to_label": "IllustratedBy"}])
    offered = plan_parameters(PlanOnceSpec, schema, 3, linked, 3000, preferred)
    enums = offered["properties"]["relation_paths"]["items"]["enum"]
    assert len(enums) == 5 and enums[0] == "(Entity)-[written_by]->(IllustratedBy)"  # best first
    assert set(offered["properties"]["target_type"]["enum"]) <= set(schema.label_names())
    # the model's choice is read back as hops, and a walk not offered is refused with the offered ones named
    plan = PlanOnceSpec(target_type="IllustratedBy", relation_paths=["(Entity)-[written_by]->(IllustratedBy)"],
                        sources=["Quiet Harbor"])
    assert validate_plan(plan, schema, 3, linked, None, preferred) == []
    assert plan.relation_paths[0][0].rel == "written_by"  # type: ignore[union-attr]


@pytest.mark.integration
def test_a_ranked_walk_choice_sets_the_target_where_it_ends(
    embedder: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from agent.planning import llm
    from agent.planning.llm import PlanOnceSpec, validate_plan
    from agent.planning.walks import ranked_walks

    monkeypatch.setattr(llm, "MAX_PATH_CHOICES", 4)
    skb = load_triples(_write(tmp_path, STYLES["snake_case"]), parse_profile({"planner": {"max_hops": 3}}))
    linked = [{"key": "Quiet Harbor", "label": "Entity", "mention": "Quiet Harbor", "method": "exact", "score": 1.0}]
    preferred = ranked_walks(SimpleNamespace(skb=skb, embedder=embedder), "who wrote [Quiet Harbor]", linked, top=5)
    # a small model picks the right walk but names another answer type
    plan = PlanOnceSpec(target_type="Subject", relation_paths=["(Entity)-[written_by]->(IllustratedBy)"],
                        sources=["Quiet Harbor"])
    fixes: list[str] = []
    assert validate_plan(plan, skb.schema(), 3, linked, fixes, preferred) == []
    assert plan.target_type == "IllustratedBy" and "where the chosen walks end" in fixes[0]


@pytest.mark.integration
def test_a_ranked_walk_that_stops_short_is_extended_to_the_target(
    embedder: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from agent.planning import llm
    from agent.planning.llm import PlanOnceSpec, validate_plan
    from agent.planning.walks import ranked_walks

    monkeypatch.setattr(llm, "MAX_PATH_CHOICES", 4)
    skb = load_triples(_write(tmp_path, STYLES["snake_case"]), parse_profile({"planner": {"max_hops": 3}}))
    linked = [{"key": "Quiet Harbor", "label": "Entity", "mention": "Quiet Harbor", "method": "exact", "score": 1.0}]
    question = "which books share a writer with [Quiet Harbor]"
    preferred = ranked_walks(SimpleNamespace(skb=skb, embedder=embedder), question, linked, top=5)
    # the model names the right answer type but picks only the first hop of the walk
    plan = PlanOnceSpec(target_type="Entity", relation_paths=["(Entity)-[written_by]->(IllustratedBy)"],
                        sources=["Quiet Harbor"])
    fixes: list[str] = []
    assert validate_plan(plan, skb.schema(), 3, linked, fixes, preferred) == []
    assert plan.target_type == "Entity" and "extended" in fixes[0]
    assert [(h.rel, h.direction) for h in plan.relation_paths[0]] == [  # type: ignore[union-attr]
        ("written_by", "out"), ("written_by", "in")]


def _catalogue(tmp_path: Path) -> Path:
    """Thirty items in three classes (relation ``sorted_into``), ten makers (``maker``) and two release
    years whose values are shared more widely than the classes: a class is not a number."""
    triples = []
    for i in range(30):
        item = f"Item {i:02d}"
        triples.append((item, "sorted_into", ["Lamps", "Chairs", "Rugs"][i % 3]))
        triples.append((item, "maker", f"Maker {i % 10}"))
        triples.append((item, "released", ["2019", "2021"][i % 2]))
    return _write(tmp_path, triples)


@pytest.mark.integration
def test_a_category_word_asks_for_the_relation_that_classifies_the_node(embedder: object, tmp_path: Path) -> None:
    from graphs.skb.compact import open_compact, write_compact

    skb = load_triples(_catalogue(tmp_path), None)
    write_compact(skb, tmp_path / "skb" / "compact")
    for graph in (skb, open_compact(tmp_path / "skb")):  # in memory and from the stored arrays alike
        planner = PathPlanner(graph, embedder)
        assert {rel for rel, _ in planner.classifiers().values()} == {"sorted_into"}

        def best(question: str, topic: str, planner: PathPlanner = planner) -> list[str]:
            return [h.spec() for h in planner.predict(question, topic, topic, top=1)[0].path]

        assert best("what kind of thing is [Item 07]", "Item 07") == [">sorted_into"]
        assert best("which types are the things from [Maker 3]", "Maker 3") == ["<maker", ">sorted_into"]
        # no category word: the classifier is not read into the question
        assert best("who is the maker of [Item 07]", "Item 07") == [">maker"]


@pytest.mark.integration
def test_when_asks_for_the_label_of_years_or_dates_whatever_its_name(embedder: object, tmp_path: Path) -> None:
    skb = load_triples(_catalogue(tmp_path), None)
    planner = PathPlanner(skb, embedder)
    (dates,) = planner.temporal_labels()
    assert {n.name for n in skb.nodes.values() if n.label == dates} == {"2019", "2021"}
    # no word of the question names the relation ("come out" is not "released"): "when" asks for a date
    assert planner.asked_labels("when did X come out") == {dates: 1.0}
    best = planner.predict("when did [Item 07] come out", "Item 07", "Item 07", top=1)[0]
    assert [h.spec() for h in best.path] == [">released"] and best.parts["answer"] == 1.0


def _language_items(*, released: bool) -> list[tuple[str, str, str]]:
    """30 items with an "original language of item" (three languages), a maker and, optionally, a release year."""
    triples = []
    for i in range(30):
        item = f"Item {i:02d}"
        triples += [(item, "original language of item", ["Danish", "Welsh", "Basque"][i % 3]),
                    (item, "maker", f"Maker {i % 10}")]
        if released:
            triples.append((item, "released", ["2019", "2021"][i % 2]))
    return triples


@pytest.mark.integration
def test_a_word_for_the_described_node_in_a_relation_name_is_not_that_relation(
    embedder: object, tmp_path: Path
) -> None:
    # "original language of item" carries the word for what it describes: "which items" and "the item [X]"
    # ask for or name items, not their languages; "what language" still names the relation
    planner = PathPlanner(load_triples(_write(tmp_path, _language_items(released=False)), None), embedder)

    def best(question: str, topic: str) -> list[str]:
        return [h.spec() for h in planner.predict(question, topic, topic, top=1)[0].path]

    assert best("[Maker 3] made which items", "Maker 3") == ["<maker"]
    assert best("the item [Item 07] was made by whom", "Item 07") == [">maker"]
    assert best("what language is the item [Item 07] in", "Item 07") == [">original language of item"]


def _kitchen(tmp_path: Path, lower_names: bool = False) -> Path:
    """Twenty-four dishes (titles) with a cook (a person's name), a cuisine (a class), a grade from a scale of
    three lower-case words, and free lower-case words (``noted_as``: nothing in the name says "describes")."""
    notes = ["spicy", "quick dinner", "vegan", "street food", "slow cooked", "smoky", "crunchy", "family meal",
             "one pot", "fermented", "sweet and sour", "picnic"]
    triples = []
    for i in range(24):
        dish = f"Dish of the House {i:02d}"
        if lower_names:
            dish = dish.lower()
        triples += [
            (dish, "cooked_by", ["Ana Sousa", "Kofi Mensah", "Yuki Tanaka", "Lars Holm"][i % 4]),
            (dish, "cuisine", ["Thai", "Greek", "Peruvian"][i % 3]),
            (dish, "graded", ["fine", "poor", "superb"][i % 3]),
            (dish, "noted_as", notes[i % 12]),
            (dish, "noted_as", notes[(i + 5) % 12]),
        ]
    return _write(tmp_path, triples)


@pytest.mark.integration
def test_a_question_naming_nothing_asks_for_the_free_words_that_describe_the_node(
    embedder: object, tmp_path: Path
) -> None:
    from graphs.skb.compact import open_compact, write_compact

    skb = load_triples(_kitchen(tmp_path), None)
    write_compact(skb, tmp_path / "skb" / "compact")
    dish = "Dish of the House 07"
    for graph in (skb, open_compact(tmp_path / "skb")):  # in memory and from the stored arrays alike
        planner = PathPlanner(graph, embedder)
        # lower-case values on title-cased nodes; the widest vocabulary, not the three-word scale
        assert {rel for rel, _ in planner.descriptors().values()} == {"noted_as"}

        def best(question: str, planner: PathPlanner = planner) -> list[str]:
            return [h.spec() for h in planner.predict(question, dish, dish, top=1)[0].path]

        assert best(f"describe [{dish}]") == [">noted_as"]
        assert best(f"which words sum up [{dish}]") == [">noted_as"]
        assert best(f"what is [{dish}] about") == [">noted_as"]
        # a named relation or an asked person is not read as a request for descriptions
        assert best(f"what cuisine is [{dish}]") == [">cuisine"]
        assert best(f"who made [{dish}]") != [">noted_as"]


@pytest.mark.integration
def test_a_graph_written_all_in_lower_case_has_no_descriptor(embedder: object, tmp_path: Path) -> None:
    planner = PathPlanner(load_triples(_kitchen(tmp_path, lower_names=True), None), embedder)
    assert planner.descriptors() == {}


@pytest.mark.integration
def test_the_word_after_of_in_a_relation_name_alone_does_not_name_the_relation(
    embedder: object, tmp_path: Path
) -> None:
    # "original language of item": "item" qualifies the head noun "language"; "the items made by X" asks about
    # items, and only "language" (with or without "item") names the relation
    planner = PathPlanner(load_triples(_write(tmp_path, _language_items(released=True)), None), embedder)
    assert "original language of item" not in planner.relation_mentions("the items made by X came out in which year")[0]
    assert planner.relation_mentions("the language of the item X")[0]["original language of item"] == 1
    best = planner.predict("the items made by [Maker 3] are in which languages", "Maker 3", "Maker 3", top=1)[0]
    assert [h.spec() for h in best.path] == ["<maker", ">original language of item"]


def _library(tmp_path: Path) -> Path:
    """Twenty-four books with six people or firms around them and a date of first printing (``debut``)."""
    triples = []
    for i in range(24):
        book = f"Book Number {i:02d}"
        triples += [
            (book, "author", ["Ines Varga", "Tomas Reed", "Lena Ortiz"][i % 3]),
            (book, "illustrator", ["Omar Fell", "Ruth Calder"][i % 2]),
            (book, "editor", ["Piet Amsel", "Mara Quist"][i % 2]),
            (book, "publisher", ["Harbor Press", "Iron Books"][i % 2]),
            (book, "debut", ["1961", "1974", "1988"][i % 3]),
        ]
    return _write(tmp_path, triples)


@pytest.mark.integration
def test_a_plain_noun_after_a_question_word_names_the_asked_nodes_not_a_relation(
    embedder: object, tmp_path: Path
) -> None:
    planner = PathPlanner(load_triples(_library(tmp_path), None), embedder)

    def best(question: str, topic: str) -> list[str]:
        return [h.spec() for h in planner.predict(question, topic, topic, top=1)[0].path]

    # "poems" is nearest "author" by meaning, but "which poems" asks for books, it names no relation
    assert planner.meaning_mentions("which poems were edited by", Counter()) == Counter()
    assert best("which poems were edited by [Piet Amsel]", "Piet Amsel") == ["<editor"]


@pytest.mark.integration
def test_a_time_question_asks_for_the_one_relation_into_years_or_dates(embedder: object, tmp_path: Path) -> None:
    planner = PathPlanner(load_triples(_library(tmp_path), None), embedder)
    # no word names "debut"; "in which years" and "when" ask for the one relation whose values are years
    assert planner.time_mention("the books edited by X appeared in which years", Counter()) == "debut"
    assert planner.time_mention("when did X appear", Counter()) == "debut"
    assert planner.time_mention("who edited X", Counter()) is None
    best = planner.predict("the books edited by [Piet Amsel] appeared in which years", "Piet Amsel", "Piet Amsel", top=1)
    assert [h.spec() for h in best[0].path] == ["<editor", ">debut"]
