"""`skb eval` through Typer's CliRunner, on a fake method registry and a fake bundle."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evals import cli
from evals.cli import eval_app, parse_settings
from evals.methods import make_method, method_names, register_method, unregister_method
from evals.protocol import Retriever
from evals.static import StaticRetriever
from graphs.errors import ConfigError

runner = CliRunner()
N = 12


class FakeSKB:
    def __init__(self, keys: set[str]) -> None:
        self.nodes = dict.fromkeys(keys, None)


class FakeBundle:
    def __init__(self) -> None:
        self.skb = FakeSKB({f"A{i}" for i in range(N)})
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _good(name: str, bundle: Any, **overrides: Any) -> Retriever:
    depth = int(overrides.get("depth", 1))
    return StaticRetriever(name, {f"q{i}": ["X"] * (depth - 1) + [f"A{i}"] for i in range(N)},
                           config={"depth": depth})


def _bad(name: str, bundle: Any, **overrides: Any) -> Retriever:
    return StaticRetriever(name, {f"q{i}": (["X", f"A{i}"] if i % 2 else ["X"]) for i in range(N)})


@pytest.fixture
def fake_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeBundle]]:
    opened: list[FakeBundle] = []

    def open_bundle(index_dir: Path, store: str | None = None) -> FakeBundle:
        opened.append(FakeBundle())
        return opened[-1]

    monkeypatch.setattr(cli, "open_bundle", open_bundle)
    register_method("fake-good", _good, options=("depth",))
    register_method("fake-bad", _bad)
    yield opened
    unregister_method("fake-good")
    unregister_method("fake-bad")


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    lines = ["id,query,answer_ids,target_type,style"]
    for i in range(N):
        answers = json.dumps([f"A{i}"] if i != 3 else ["UNKNOWN:1"]).replace('"', '""')
        lines.append(f'{i},q{i},"{answers}",{"disease" if i % 2 else "gene"},names')
    path = tmp_path / "bench.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _args(bench: Path, out: Path, *extra: str) -> list[str]:
    return ["--bench", str(bench), "--index-dir", str(out.parent / "idx"), "--out", str(out), "--no-progress",
            "--resamples", "200", *extra]


def test_run_subcommand_writes_report(fake_registry: list[FakeBundle], bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = runner.invoke(eval_app, ["run", *_args(bench, out, "-m", "fake-good", "-m", "fake-bad")])
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics["methods"]) == ["fake-good", "fake-bad"]
    assert metrics["methods"]["fake-good"]["overall"]["hit@1"]["mean"] == pytest.approx(11 / 12)
    assert metrics["methods"]["fake-bad"]["overall"]["mrr"]["mean"] == pytest.approx(5 * 0.5 / 12)
    assert metrics["unknown_answers"]["unknown_count"] == 1
    assert metrics["unknown_answers"]["all_unknown_questions"] == ["3"]
    assert "1 of 12 answer keys are not in the index" in result.output
    assert (out / "report.md").is_file() and (out / "recall_at_k.png").is_file()
    assert fake_registry[0].closed


def test_short_form_without_subcommand_runs_too(fake_registry: list[FakeBundle], bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "short"
    result = runner.invoke(eval_app, _args(bench, out, "--method", "fake-good", "--limit", "5", "--workers", "2",
                                           "--set", "depth=2"))
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    good = metrics["methods"]["fake-good"]
    assert good["n"] == 5
    assert good["config"]["depth"] == 2
    assert good["overall"]["hit@1"]["mean"] == 0.0 and good["overall"]["mrr"]["mean"] == pytest.approx(4 * 0.5 / 5)

    # Rerun with a larger limit: the first 5 are skipped, the report covers all 12.
    again = runner.invoke(eval_app, _args(bench, out, "--method", "fake-good", "--set", "depth=2"))
    assert again.exit_code == 0, again.output
    assert "ran 7, skipped 5" in again.output
    assert json.loads((out / "metrics.json").read_text())["methods"]["fake-good"]["n"] == 12


def test_compare_and_report_subcommands(fake_registry: list[FakeBundle], bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert runner.invoke(eval_app, _args(bench, out, "-m", "fake-good", "-m", "fake-bad")).exit_code == 0
    target = tmp_path / "cmp.json"
    result = runner.invoke(eval_app, ["compare", str(out / "fake-bad"), str(out / "fake-good"), "--out", str(target)])
    assert result.exit_code == 0, result.output
    assert "`fake-good` minus `fake-bad`" in result.output
    (comparison,) = json.loads(target.read_text())
    hit1 = next(m for m in comparison["metrics"] if m["metric"] == "hit@1")
    assert hit1["mean_diff"] == pytest.approx(11 / 12)
    assert comparison["n_paired"] == N

    (out / "metrics.json").unlink()
    result = runner.invoke(eval_app, ["report", str(out), "--resamples", "200"])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "metrics.json").read_text())["methods"]["fake-good"]["n"] == N


def test_user_errors_exit_2_with_a_message(fake_registry: list[FakeBundle], bench: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = runner.invoke(eval_app, _args(bench, out, "-m", "no-such-method"))
    assert result.exit_code == 2
    assert "unknown method 'no-such-method'" in result.output and "fake-good" in result.output
    result = runner.invoke(eval_app, _args(bench, out, "-m", "fake-bad", "--set", "depth=3"))
    assert result.exit_code == 2 and "no selected method accepts setting(s) depth" in result.output
    result = runner.invoke(eval_app, _args(tmp_path / "missing.csv", out, "-m", "fake-bad"))
    assert result.exit_code == 2 and "benchmark file not found" in result.output
    result = runner.invoke(eval_app, ["run", "--bench", str(bench), "-m", "fake-bad"])
    assert result.exit_code == 2 and "missing --index-dir, --out" in result.output
    result = runner.invoke(eval_app, ["compare", str(tmp_path / "nothing"), str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "run directory not found" in result.output
    assert not fake_registry, "no bundle is opened when the arguments are wrong"


def test_no_options_prints_help() -> None:
    result = runner.invoke(eval_app, [])
    assert result.exit_code == 0
    assert "run" in result.output and "compare" in result.output and "--bench" in result.output


def test_parse_settings() -> None:
    assert parse_settings(["k=5", "planner=offline", "use_similarity_edges=false", "w=0.3"]) == {
        "k": 5, "planner": "offline", "use_similarity_edges": False, "w": 0.3}
    with pytest.raises(ConfigError, match="name=value"):
        parse_settings(["k"])


def test_method_names_and_setting_validation() -> None:
    names = method_names()
    for name in ("bm25", "vss", "hybrid", "hybrid+sage", "agent", "agent+sage", "agent+sage:always",
                 "agent+sage:skip-when-explicit-edges", "agent+sage:never"):
        assert name in names
    with pytest.raises(ConfigError, match="does not accept setting"):
        make_method("bm25", object(), k_prime=3)
    with pytest.raises(ConfigError, match="policies: always"):
        make_method("agent+sage:sometimes", object())
    method = make_method("hybrid+sage", object(), seed_k=5, k_prime=7)
    assert method.config["seed_k"] == 5 and method.config["k_prime"] == 7


def test_agent_methods_fix_the_sage_policy() -> None:
    from agent.config import AgentConfig

    assert make_method("agent", object()).config["agent_config"]["policy"] == "never"
    assert make_method("agent+sage:always", object()).config["agent_config"]["policy"] == "always"
    default = make_method("agent+sage", object(), k=7).config["agent_config"]
    assert default["policy"] == AgentConfig().policy and default["k"] == 7
    with pytest.raises(ConfigError, match="fixes policy"):
        make_method("agent", object(), policy="always")


def test_settings_are_routed_per_method(fake_registry: list[FakeBundle]) -> None:
    from evals.cli import route_settings

    routed = route_settings(["bm25", "hybrid", "fake-good"], {"k": 50, "hybrid.weight": 0.7, "depth": 3})
    assert routed == {"bm25": {"k": 50}, "hybrid": {"k": 50, "weight": 0.7}, "fake-good": {"depth": 3}}
    assert route_settings(["bm25", "hybrid"], {"hybrid.k": 30}) == {"bm25": {}, "hybrid": {"k": 30}}
    with pytest.raises(ConfigError, match="not a selected method"):
        route_settings(["bm25"], {"vss.k": 3})
    with pytest.raises(ConfigError, match=r"accepts setting\(s\) bm25.weight"):
        route_settings(["bm25"], {"bm25.weight": 0.2})
