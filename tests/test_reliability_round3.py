"""Reliability round 3 (issue 29): one test (or more) per item, named ``test_itemNN_...``.

Every test runs on a small graph generated here (labels ``Widget``/``Maker``/``Part``, relations
``made_by``/``has_part``: no dataset words), indexed for real (FalkorDB, HNSW, BM25, MiniLM).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from tests.reliability_support import copy_index

pytestmark = pytest.mark.integration

runner = CliRunner()

#: A node name that tries to clear the screen, recolour and retitle the terminal.
ESCAPES = "Gizmo \x1b[2J\x1b[31mRED\x1b]0;title\x07"
#: A node name that Rich would render as bold red text and an OSC-8 hyperlink, and a stray closing tag.
MARKUP = "Gadget [bold red]x[/bold red] [link=https://evil.example]click[/link] [/]"

PROFILE = """
name = "workshop"
label_precedence = ["Widget", "Maker"]

[relations.made_by]
signature = "Widget -> Maker"

[relations.has_part]
signature = "Widget -> Part"
"""


def write_graph(root: Path, extra: str = "", *, bom: bool = False) -> tuple[Path, Path]:
    """A triples file and its profile: a few widgets, their makers and parts, two hostile names."""
    lines = []
    for i in range(12):
        lines.append(f"Sprocket {i}|made_by|Maker {i % 3}")
        lines.append(f"Sprocket {i}|has_part|Bolt {i % 4}")
    lines.append(f"{ESCAPES}|made_by|Maker 0")
    lines.append(f"{MARKUP}|made_by|Maker 1")
    text = "\n".join(lines) + "\n" + extra
    root.mkdir(parents=True, exist_ok=True)
    kb = root / "kb.txt"
    kb.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    profile = root / "profile.toml"
    profile.write_text(PROFILE, encoding="utf-8")
    return kb, profile


@pytest.fixture(scope="module")
def graph_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from graphs.build import IndexConfig, build_index
    from graphs.loaders.triples import load_triples

    root = tmp_path_factory.mktemp("round3")
    kb, profile = write_graph(root / "data")
    index_dir = root / "index"
    build_index(load_triples(kb, profile), index_dir, IndexConfig(dataset="triples"))
    return index_dir


@pytest.fixture()
def private_index(graph_index: Path, tmp_path: Path) -> Path:
    """A copy whose server and trace DB we may damage."""
    return copy_index(graph_index, tmp_path / "index")


def _assert_inert(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text, repr(text)
    assert "\\x1b[2J" in text  # shown visibly, not dropped


# -- items 1-3: graph data and arguments never control the terminal or Rich ----------------------

@pytest.mark.parametrize("command", ["ask", "search"])
def test_item01_escape_sequences_in_node_names_and_questions_are_shown_visibly(
    graph_index: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKB_TRACING", "0")
    result = runner.invoke(app, [command, f"{ESCAPES} made by", "--index-dir", str(graph_index)])
    assert result.exit_code == 0, result.output + result.stderr
    _assert_inert(result.stdout)
    assert result.stdout.count("\\x1b[2J") >= 2  # the question in the title and the node name in a row


@pytest.mark.parametrize("command", ["ask", "search"])
def test_item01_item02_rich_tables_on_a_terminal_are_inert(
    graph_index: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rich (terminal) table path: no escape sequence from data, markup shown as written."""
    import agent.cli.index as cli_index
    import agent.cli.main as cli_main
    from graphs import progress

    monkeypatch.setenv("SKB_TRACING", "0")
    monkeypatch.setattr(progress, "stdout_is_terminal", lambda: True)
    for module in (cli_main, cli_index):  # wide enough that no cell wraps
        monkeypatch.setattr(module.console, "_width", 400)
    result = runner.invoke(app, [command, "Gadget Gizmo x click", "--index-dir", str(graph_index), "--k", "30"],
                           terminal_width=400)
    assert result.exit_code == 0, result.output + result.stderr
    _assert_inert(result.stdout)
    assert "[bold red]x[/bold red]" in result.stdout
    assert "[link=https://evil.example]click[/link]" in result.stdout


def test_item02_print_table_never_interprets_markup_or_emits_hyperlinks() -> None:
    import io

    from rich.console import Console

    from graphs.progress import print_table

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=300, color_system="truecolor")
    print_table(console, f"title {MARKUP}", ["name"], [[MARKUP], [ESCAPES]], plain=False)
    out = buf.getvalue()
    assert "\x1b]8;" not in out  # no OSC-8 hyperlink
    assert "[bold red]x[/bold red]" in out and "[/]" in out
    assert "\x1b[2J" not in out and "\\x1b[2J" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "[/] closing", "--index-dir", "{index}"],
        ["search", "x", "--index-dir", "{index}", "--type", "Nope[/]"],
        ["ask", "what is [/] made by", "--index-dir", "{index}"],
        ["ask", "x", "--index-dir", "{index}/missing[/]"],
    ],
)
def test_item03_stray_closing_tags_in_arguments_and_data_never_crash(
    graph_index: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKB_TRACING", "0")
    argv = [a.replace("{index}", str(graph_index)) for a in argv]
    result = runner.invoke(app, argv)
    assert result.exit_code in (0, 2), result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "MarkupError" not in result.output + result.stderr
    if result.exit_code == 2:
        assert "[/]" in result.stderr  # the bad value is quoted as written


def test_item03_bracketed_fix_text_is_not_swallowed(tmp_path: Path) -> None:
    kb, profile = write_graph(tmp_path, "Sprocket 1|painted_by|Maker 2\n")
    result = runner.invoke(app, ["index", "--dataset", "triples", "--data", str(kb), "--profile", str(profile),
                                 "--index-dir", str(tmp_path / "idx"), "-q"])
    assert result.exit_code == 2
    flat = " ".join(result.stderr.split())
    assert "add [relations.<name>] with signature" in flat
