"""An index directory without manifest.json: the advice ``skb ask`` gives is advice that works.

It used to suggest ``skb index ... --index-dir DIR`` for a non-empty DIR, which the build then refused
to touch. The test follows the suggestion literally (the command in backticks, with --data pointing at
a small generated triples file) and asks again.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.main import app

pytestmark = pytest.mark.integration
runner = CliRunner()


def _triples(tmp_path: Path) -> Path:
    path = tmp_path / "kb.txt"
    path.write_text("Lighthouse|stands_on|Rocky cape\nKeeper|tends|Lighthouse\nRocky cape|part_of|Coast\n", encoding="utf-8")
    return path


def _suggested(stderr: str, data: Path, new_dir: Path) -> list[str]:
    commands = re.findall(r"`(skb index [^`]*)`", stderr)
    assert commands, stderr
    words = shlex.split(commands[0].replace("<", "").replace(">", ""))[1:]
    words[words.index("--dataset") + 1] = "triples"
    words[words.index("--data") + 1] = str(data)
    return [w.replace("NEW_DIR", str(new_dir)) for w in words] + ["--stage", "core"]


def _ask(index_dir: Path) -> tuple[int, str]:
    result = runner.invoke(app, ["ask", "Who tends the lighthouse?", "--index-dir", str(index_dir), "--no-trace"])
    return result.exit_code, result.stderr + result.stdout


@pytest.mark.parametrize("what", ["a broken build", "a user's file"])
def test_the_advice_for_a_missing_manifest_works(tmp_path: Path, what: str) -> None:
    data = _triples(tmp_path)
    index_dir = tmp_path / "index"
    built = runner.invoke(app, ["index", "--dataset", "triples", "--data", str(data), "--index-dir", str(index_dir), "--stage", "core"])
    assert built.exit_code == 0, built.stderr
    (index_dir / "manifest.json").unlink()
    if what == "a user's file":
        (index_dir / "notes.txt").write_text("mine", encoding="utf-8")
    code, out = _ask(index_dir)
    assert code != 0 and "manifest.json missing" in out
    removal = re.search(r"`rm -r ([^`]+)`", out)
    if removal:  # the advice: remove the broken build, then build there
        assert what == "a broken build"
        shutil.rmtree(removal.group(1))
    target = index_dir if removal else tmp_path / "fresh"
    command = _suggested(out, data, target)
    rebuilt = runner.invoke(app, command)
    assert rebuilt.exit_code == 0, f"the suggested `skb {' '.join(command)}` failed: {rebuilt.stderr}"
    where = Path(command[command.index("--index-dir") + 1])
    code, out = _ask(where)
    assert code == 0, out
    if what == "a user's file":
        assert (index_dir / "notes.txt").read_text(encoding="utf-8") == "mine"  # nothing of the user's touched
