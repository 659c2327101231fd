"""What a cold `skb` process imports before it does any work (issue 12: start in a blink).

Import cost is paid on every command; heavy modules must load only for the command that needs them.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, timeout=300, check=True)
    return set(out.stdout.split())


def test_cli_import_does_not_load_the_mcp_sdk() -> None:
    mods = _modules_after("from agent.cli.main import app")
    assert "agent.cli.main" in mods
    assert "mcp" not in mods and "agent.serving.mcp" not in mods
    # tracing (langsmith run trees) loads for `ask` and `trace` only, not for `search` or `index`
    assert "agent.cli.trace" not in mods and "langsmith.run_trees" not in mods


def test_mcp_command_still_registered_and_forwards_options() -> None:
    from typer.testing import CliRunner

    from agent.cli.main import app

    result = CliRunner().invoke(app, ["mcp", "--help"])
    assert result.exit_code == 0, result.output
    assert "--index-dir" in result.output and "--transport" in result.output
    bad = CliRunner().invoke(app, ["mcp", "--transport", "carrier-pigeon", "--index-dir", "/nonexistent"])
    assert bad.exit_code != 0


def test_trace_command_forwards_to_the_trace_app(tmp_path: object) -> None:
    from typer.testing import CliRunner

    from agent.cli.main import app

    result = CliRunner().invoke(app, ["trace", "--help"])
    assert result.exit_code == 0, result.output
    assert "list" in result.output and "show" in result.output
    # options reach the trace app: its own clean error for an index without traces
    listed = CliRunner().invoke(app, ["trace", "list", "--index-dir", str(tmp_path), "--json"])
    assert listed.exit_code == 2 and "no trace database" in listed.output, listed.output
