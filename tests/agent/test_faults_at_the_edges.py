"""Faults and hostile data at the edges: the terminal, trace databases, index files, a frozen
graph store, a full disk, a busy port -- each is shown inert, refused with a named fix, or kept bounded.

Every test runs on a small graph generated here (labels ``Widget``/``Maker``/``Part``, relations
``made_by``/``has_part``: no dataset words), indexed for real (FalkorDB, HNSW, BM25, MiniLM).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from tests.paths import REPO
from tests.reliability_support import copy_index, falkordb_children, within

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
forward = "the maker of {x}"
inverse = "the widgets made by {x}"

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

    root = tmp_path_factory.mktemp("edges")
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


# -- graph data and arguments never control the terminal or Rich ----------------------

@pytest.mark.parametrize("command", ["ask", "search"])
def test_escape_sequences_in_node_names_and_questions_are_shown_visibly(
    graph_index: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKB_TRACING", "0")
    result = runner.invoke(app, [command, f"{ESCAPES} made by", "--index-dir", str(graph_index)])
    assert result.exit_code == 0, result.output + result.stderr
    _assert_inert(result.stdout)
    assert result.stdout.count("\\x1b[2J") >= 2  # the question in the title and the node name in a row


@pytest.mark.parametrize("command", ["ask", "search"])
def test_rich_tables_on_a_terminal_are_inert(
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


def test_print_table_never_interprets_markup_or_emits_hyperlinks() -> None:
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
def test_stray_closing_tags_in_arguments_and_data_never_crash(
    graph_index: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphs import progress

    monkeypatch.setenv("SKB_TRACING", "0")
    monkeypatch.setattr(progress, "stdout_is_terminal", lambda: True)  # tables drawn by Rich, as on a terminal
    argv = [a.replace("{index}", str(graph_index)) for a in argv]
    result = runner.invoke(app, argv)
    assert result.exit_code in (0, 2), result.output + result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "MarkupError" not in result.output + result.stderr
    if result.exit_code == 2:
        assert "[/]" in result.stderr  # the bad value is quoted as written


def test_bracketed_fix_text_is_not_swallowed(tmp_path: Path) -> None:
    # a schema.json that is not an object: the fix quotes the expected form, brackets and all
    data = tmp_path / "data"
    data.mkdir()
    (data / "nodes.jsonl").write_text('{"key": "a", "label": "Widget", "props": {"name": "a"}}\n', encoding="utf-8")
    (data / "schema.json").write_text("[1, 2]", encoding="utf-8")
    result = runner.invoke(app, ["index", "--dataset", "jsonl", "--data", str(data),
                                 "--index-dir", str(tmp_path / "idx"), "-q"])
    assert result.exit_code == 2, result.output + result.stderr
    flat = " ".join(result.stderr.split())
    assert '"node_types": [...]' in flat


# -- the Python API names a bad argument ---------------------------------------------

@pytest.mark.parametrize("question", [42, b"what is made by Maker 0", None])
def test_ask_with_a_non_text_question_names_the_argument(graph_index: Path, question: object) -> None:
    import asyncio

    from agent.api import aask, ask
    from graphs.bundle import IndexBundle
    from graphs.errors import ConfigError

    with IndexBundle.open(graph_index) as bundle:
        with pytest.raises(ConfigError, match="argument 'question' must be a str") as info:
            ask(question, bundle=bundle)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="argument 'question' must be a str"):
            asyncio.run(aask(question, bundle=bundle))  # type: ignore[arg-type]
    if isinstance(question, bytes):
        assert "decode" in str(info.value)


# -- no third-party warnings or debug lines ------------------------------------------

def test_pyproject_license_raises_no_setuptools_deprecation() -> None:
    import warnings

    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apply_configuration(Distribution(), REPO / "pyproject.toml")
    assert not [w for w in caught if "license" in str(w.message).lower()], [str(w.message)[:200] for w in caught]


def test_bm25s_debug_lines_never_reach_a_configured_handler(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from graphs.index.bm25 import BM25Index

    caplog.set_level(logging.DEBUG)  # as if an application configured logging at DEBUG
    BM25Index.build(["a", "b"], ["Widget", "Maker"], ["a red sprocket", "a maker of bolts"])
    assert not [r for r in caplog.records if r.name.startswith("bm25s")], [r.getMessage() for r in caplog.records]


# -- damaged, foreign or unwritable trace databases and pages --------------------------

def _run_row(**fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"dotted_order": "1", "name": "x", "run_type": "chain", "status": "success",
                           "start_time": "2026-01-01T00:00:00+00:00", "prompt_tokens": 0, "completion_tokens": 0,
                           "total_tokens": 0, "llm_call": 0}
    row.update(fields)
    return row


def _traced_db(path: Path) -> Path:
    from agent.tracing.tracer import TraceStore

    store = TraceStore(path)
    store.upsert_many([_run_row(id=f"r{i}", trace_id=f"t{i}", name="x" * 3000) for i in range(400)])
    store.close()
    return path


def _malformed(path: Path) -> Path:
    _traced_db(path)
    data = bytearray(path.read_bytes())
    data[4096:len(data) - 4096] = b"\xa5" * (len(data) - 8192)  # pages after the header overwritten
    path.write_bytes(bytes(data))
    for extra in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        extra.unlink(missing_ok=True)
    return path


@pytest.mark.parametrize("kind", ["foreign", "malformed"])
@pytest.mark.parametrize("sub", [["list"], ["show", "r1"], ["html", "r1", "-o", "{tmp}/page.html"]])
def test_trace_commands_on_a_foreign_or_damaged_database_exit_2_with_the_fix(
    tmp_path: Path, kind: str, sub: list[str]
) -> None:
    db = tmp_path / "traces.sqlite"
    if kind == "foreign":
        db.write_bytes(b"this is a text file, not SQLite\n" * 200)
    else:
        _malformed(db)
    argv = ["trace", *[a.replace("{tmp}", str(tmp_path)) for a in sub], "--db", str(db)]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, (result.output, result.exception)
    flat = " ".join(result.stderr.split())
    assert str(db) in flat and "move it aside" in flat and "Traceback" not in flat


def test_trace_html_into_a_directory_or_under_a_file_exits_2(tmp_path: Path) -> None:
    db = _traced_db(tmp_path / "traces.sqlite")
    (tmp_path / "afile").write_text("x")
    for out, needle in ((tmp_path, "is a directory"), (tmp_path / "afile" / "page.html", "cannot write")):
        result = runner.invoke(app, ["trace", "html", "r1", "--db", str(db), "-o", str(out)])
        assert result.exit_code == 2, (out, result.output, result.exception)
        assert needle in " ".join(result.stderr.split())


def test_ask_with_a_malformed_trace_db_answers_and_says_the_trace_was_not_recorded(
    private_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.tracing import tracer

    monkeypatch.setattr(tracer, "_TRACERS", {})
    _malformed(private_index / "traces.sqlite")
    result = runner.invoke(app, ["ask", "what is Sprocket 3 made by", "--index-dir", str(private_index)])
    assert result.exit_code == 0, result.output
    flat = " ".join(result.stderr.split())
    assert "trace not recorded:" in flat and "traces.sqlite" in flat and "move it aside" in flat
    assert "Sprocket 3" in result.stdout


# -- the tracer's queue and the trace database stay bounded --------------------

def test_tracer_queue_is_bounded_and_counts_drops_when_the_writer_falls_behind(
    graph_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent questions against a writer that cannot keep up (its database held busy): the queue
    never holds more than its bound, drops are counted and reported, and the answers are unaffected."""
    from concurrent.futures import ThreadPoolExecutor

    from agent.api import ask
    from agent.tracing import tracer as tracer_mod
    from graphs.bundle import IndexBundle

    monkeypatch.setattr(tracer_mod, "QUEUE_MAX_ROWS", 40)
    monkeypatch.setattr(tracer_mod, "QUEUE_WAIT_S", 0.05)
    tracer = tracer_mod.LocalTracer(tmp_path / "traces.sqlite")
    assert tracer._queue is not None
    questions = [f"what is Sprocket {i % 12} made by" for i in range(24)]
    with IndexBundle.open(graph_index) as bundle:
        alone = [ask(q, bundle=bundle).context for q in questions[:12]]
        with tracer.store._lock, ThreadPoolExecutor(8) as pool:  # the writer blocks on its first batch
            results = list(pool.map(lambda q: ask(q, bundle=bundle, run_config={"callbacks": [tracer]}), questions))
            assert tracer._queue.peak_rows <= 40
    tracer.flush()
    assert [r.context for r in results[:12]] == alone
    assert tracer.dropped > 0
    assert any("run rows dropped" in e for e in tracer.errors)
    stored = tracer.store._rows("SELECT COUNT(*) FROM runs")[0][0]
    assert 0 < stored < sum(1 for _ in range(24)) * 20
    tracer.close()


def test_without_pressure_nothing_is_dropped(graph_index: Path, tmp_path: Path) -> None:
    from agent.api import ask
    from agent.tracing.tracer import LocalTracer
    from graphs.bundle import IndexBundle

    tracer = LocalTracer(tmp_path / "traces.sqlite")
    with IndexBundle.open(graph_index) as bundle:
        for i in range(3):
            ask(f"what is Sprocket {i} made by", bundle=bundle, run_config={"callbacks": [tracer]})
    tracer.flush()
    assert tracer.dropped == 0 and not tracer.errors
    assert len(tracer.store.list_traces(10)) == 3
    tracer.close()


def test_retention_by_age_and_size(graph_index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Old traces go at open; the size limit holds while a writer keeps adding traces."""
    import datetime as dt

    from agent.api import ask
    from agent.tracing import tracer as tracer_mod
    from graphs.bundle import IndexBundle

    db = tmp_path / "traces.sqlite"
    store = tracer_mod.TraceStore(db)
    old = (dt.datetime.now(dt.UTC) - dt.timedelta(days=40)).isoformat()
    store.upsert_many([_run_row(id="old-root", trace_id="old", start_time=old),
                       _run_row(id="old-child", trace_id="old", parent_run_id="old-root", dotted_order="1.1",
                                run_type="tool", start_time=old)])
    store.close()
    monkeypatch.setenv(tracer_mod.MAX_DAYS_ENV, "30")
    monkeypatch.setenv(tracer_mod.MAX_MB_ENV, "0.25")
    monkeypatch.setattr(tracer_mod, "PRUNE_EVERY", 20)
    tracer = tracer_mod.LocalTracer(db, background=False)
    assert tracer.store._rows("SELECT COUNT(*) FROM runs WHERE trace_id = 'old'")[0][0] == 0
    sizes = []
    with IndexBundle.open(graph_index) as bundle:
        for i in range(30):
            ask(f"what is Sprocket {i % 12} made by", bundle=bundle, run_config={"callbacks": [tracer]})
            sizes.append(tracer.store.size_bytes())
    assert max(sizes) > 0.25 * 1024 * 1024 * 0.5  # the limit was reached, so pruning ran
    assert tracer.store.size_bytes() <= 0.25 * 1024 * 1024 * 1.3
    assert 0 < len(tracer.store.list_traces(100)) < 30
    files = [db, db.with_name(db.name + "-wal")]
    tracer._prune()  # the periodic retention check (every PRUNE_EVERY rows), which need not delete anything
    on_disk = sum(p.stat().st_size for p in files if p.exists())
    assert on_disk <= 0.25 * 1024 * 1024 * 2, on_disk  # incremental vacuum and the WAL's truncation give pages back


def test_bad_retention_setting_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.tracing import tracer as tracer_mod
    from graphs.errors import ConfigError

    monkeypatch.setenv(tracer_mod.MAX_MB_ENV, "lots")
    with pytest.raises(ConfigError, match="SKB_TRACE_MAX_MB='lots'"):
        tracer_mod.LocalTracer(tmp_path / "t.sqlite")


# -- a frozen graph store is named as the cause, and ask reports it -------------------

@pytest.fixture()
def frozen(private_index: Path) -> Iterator[Any]:
    """An open bundle whose FalkorDB child is stopped (SIGSTOP) after start-up; resumed at the end."""
    from graphs.bundle import IndexBundle

    bundle = IndexBundle.open(private_index)
    bundle.store.query("MATCH (n) RETURN count(n)", {})  # started and connected
    pid = bundle.store.server.pid
    assert pid is not None and pid in falkordb_children()
    os.kill(pid, signal.SIGSTOP)
    try:
        yield bundle
    finally:
        os.kill(pid, signal.SIGCONT)
        bundle.close()


def test_tools_on_a_frozen_store_blame_the_store_not_the_query(
    frozen: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    import tools.search_nodes as search_nodes_module
    from tools import make_tools

    monkeypatch.setattr(search_nodes_module, "READ_SKB", False)  # the store's path (not the SKB's) is tested
    tools = {t.name: t for t in make_tools(frozen)}  # the query's pool was opened before the store froze
    cypher, search = tools["cypher"], tools["search_nodes"]
    t0 = time.monotonic()
    out = within(60, lambda: json.loads(cypher.invoke({"query": "MATCH (n:Widget) RETURN n.key LIMIT 3"})),
                 "cypher on a frozen store")
    first_s = time.monotonic() - t0
    assert out["error"]["type"] == "store_unavailable", out
    assert "FalkorDB" in out["error"]["message"] and "LIMIT" not in out["error"]["hint"]
    t0 = time.monotonic()
    out = within(60, lambda: json.loads(search.invoke({"keys": ["Sprocket 1"], "question": "maker"})),
                 "search_nodes on a frozen store")
    assert out["error"]["type"] == "store_unavailable", out
    assert "check keys" not in out["error"]["hint"]
    assert time.monotonic() - t0 < max(3.0, first_s / 2)  # the next call does not wait the full timeout again


def test_ask_on_a_frozen_store_reports_it_in_degraded(frozen: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import tools.cypher as cypher_module
    from agent import AgentConfig
    from agent.api import ask

    # the store's path is tested: the planner's relation-path walks are otherwise read from the SKB
    monkeypatch.setattr(cypher_module, "READ_SKB", False)
    config = AgentConfig(cypher_timeout_ms=1000)  # a timeout no call used before: its pool is opened frozen
    result = within(120, lambda: ask("who is the maker of Sprocket 3", bundle=frozen, config=config),
                    "ask on a frozen store")
    assert result.degraded, "a failed store must never give degraded: []"
    text = " ".join(result.degraded)
    assert "graph store" in text and "FalkorDB" in text


# -- damage inside large files (past the sampled check) is named, with verify and rebuild ---

@pytest.fixture()
def sampled_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An index of the generated graph whose files all count as large (sampled at open) and whose
    sample is 64 bytes at each end: the same situation as a 200 KB overwrite inside a 200 MB dump."""
    from graphs import build, manifest
    from graphs.loaders.triples import load_triples

    monkeypatch.setattr(build, "LARGE_FILE_BYTES", 256)
    monkeypatch.setattr(manifest, "SAMPLE_BYTES", 64)
    kb, profile = write_graph(tmp_path / "data")
    index_dir = tmp_path / "index"
    build.build_index(load_triples(kb, profile), index_dir, build.IndexConfig(dataset="triples"))
    return index_dir


def _overwrite_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    assert len(data) > 256, len(data)
    data[64:-64] = b"\xa5" * (len(data) - 128)  # everything between the sampled ends
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("rel", ["falkordb/dump.rdb", "skb/compact/node_props.bin"])
def test_damage_inside_a_large_file_is_named_with_verify_and_the_rebuild_command(
    sampled_index: Path, rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tools.cypher as cypher_module
    from graphs.manifest import Manifest

    monkeypatch.setenv("SKB_TRACING", "0")
    # the question is answered by relation-path walks, which are read from the SKB and leave the store
    # unopened: for the store's file, its path is tested
    monkeypatch.setattr(cypher_module, "READ_SKB", not rel.startswith("falkordb/"))
    assert rel in Manifest.read(sampled_index).data_files
    _overwrite_middle(sampled_index / rel)
    Manifest.read(sampled_index).verify(sampled_index)  # the sampled check at open cannot see it ...
    result = runner.invoke(app, ["ask", "who is the maker of Sprocket 3", "--index-dir", str(sampled_index)])
    out = " ".join((result.stdout + result.stderr).split())
    assert "Traceback" not in out and "JSONDecodeError" not in out
    assert f"skb verify --index-dir {sampled_index}" in out, out[-2000:]
    assert f"skb index --force --index-dir {sampled_index}" in out
    assert rel.split("/")[-1] in out
    assert len(result.stderr) < 4000, result.stderr  # no pages of raw server log
    verify = runner.invoke(app, ["verify", "--index-dir", str(sampled_index)])  # ... the full one does
    assert verify.exit_code == 2 and rel in " ".join(verify.stderr.split())


# -- a failed SAVE says why, without pointing into a deleted directory -----------------

def test_failed_save_quotes_the_reason_and_free_space(tmp_path: Path) -> None:
    """A real server whose SAVE fails (dump.rdb is a directory, so the final rename fails, as a full
    disk fails the write): the error quotes the server's reason, not an empty one."""
    from graphs.errors import StoreError
    from graphs.loaders.triples import load_triples
    from graphs.store.falkordb_store import FalkorDBStore

    kb, profile = write_graph(tmp_path / "data")
    store = FalkorDBStore(tmp_path / "fdb")
    try:
        (tmp_path / "fdb" / "dump.rdb").mkdir()
        with pytest.raises(StoreError) as info:
            store.load(load_triples(kb, profile))
    finally:
        (tmp_path / "fdb" / "dump.rdb").rmdir()  # else SHUTDOWN SAVE fails too and stop() waits it out
        store.close()
    msg = str(info.value)
    assert "could not save the graph to" in msg and "MB free" in msg
    assert "Is a directory" in msg or "rename" in msg.lower() or "moving" in msg.lower(), msg
    assert "SAVE after load failed: ;" not in msg and "see " not in msg


def test_no_space_in_the_log_is_called_a_full_disk(tmp_path: Path) -> None:
    import redis

    from graphs.store.falkordb_server import FalkorDBServer

    server = FalkorDBServer(tmp_path)
    server.log_path.write_text("123:M 25 Nov 2026 23:30:30.383 # Write error saving DB on disk: No space left on device\n")
    msg = server.save_failure(redis.ResponseError(""))
    assert "No space left on device" in msg and "the disk is full" in msg


# -- no "serving" banner before a failure; no advice naming options that do not exist ----

def _import_mcp_outside_the_runner() -> None:
    """The MCP SDK binds ``sys.stderr`` as a default argument when first imported; imported under
    CliRunner it would keep the runner's capture and break later stdio clients in this session."""
    import mcp.client.stdio  # noqa: F401

    import agent.serving.mcp  # noqa: F401


def test_mcp_http_on_a_busy_port_fails_before_any_banner(graph_index: Path) -> None:
    import socket

    _import_mcp_outside_the_runner()

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        result = runner.invoke(app, ["mcp", "--transport", "http", "--port", str(port), "--index-dir",
                                     str(graph_index), "--no-ask"])
    finally:
        busy.close()
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--port" in result.stderr
    assert "MCP streamable HTTP on" not in result.stderr


def test_mcp_http_on_a_missing_index_fails_before_any_banner(tmp_path: Path) -> None:
    _import_mcp_outside_the_runner()
    result = runner.invoke(app, ["mcp", "--transport", "http", "--index-dir", str(tmp_path / "nope")])
    assert result.exit_code == 2, (result.output, result.exception)
    assert "no index at" in result.stderr and "MCP streamable HTTP on" not in result.stderr


def test_trace_db_errors_name_real_settings_only(tmp_path: Path) -> None:
    from agent.tracing.tracer import TraceStore
    from graphs.errors import ConfigError

    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError) as info:
        TraceStore(tmp_path / "afile" / "traces.sqlite")
    msg = str(info.value)
    assert "--trace-db" not in msg and "SKB_TRACE_DB" in msg and "--no-trace" in msg
    ask_help = runner.invoke(app, ["ask", "--help"]).output
    assert "--no-trace" in ask_help and "--trace-db" not in ask_help
