"""Encoder tuning on a small tool-shop graph: pairs come only from the graph, tuning finds a paraphrase
the shipped encoder misses, the index stores and reuses the tuned model, and a seed fixes the result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphs.embedding.tuned import ENCODER_SIDECAR, ONNX_FILE, PAIRS_FILE, WEIGHTS_FILE
from graphs.errors import ConfigError
from graphs.skb.model import SKB, Node, NodeType
from graphs.tuning.pairs import mine_pairs
from graphs.tuning.train import TuneConfig, batches
from tests.encoder_tuning_support import TOOLS, tool_shop_skb

pytestmark = pytest.mark.integration  # every test here loads the model (torch or ONNX)

#: Small enough for a CPU test, enough to move the jargon names onto their meanings.
SMALL = TuneConfig(steps=30, batch_size=8, learning_rate=1e-4, max_seq_length=32, seed=7)
#: Paraphrases of the graph's explanations in words the graph does not use (never training data).
PARAPHRASES = {
    "a pry tool made of plastic": "T_SPUDGER",
    "spike for splicing ropes": "T_FID",
    "tool that pulls nails out": "T_CATSPAW",
    "plane with two handles": "T_SPOKESHAVE",
}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    from graphs.tuning.stage import tune_encoder

    out = tmp_path_factory.mktemp("tuned") / "model"
    record = tune_encoder(tool_shop_skb(), out, SMALL)
    return out, record


def _source_exists(skb: SKB, source: list[str]) -> bool:
    """A recorded source is a field of a node of this graph, or a relation/label entry of its profile."""
    from graphs.skb.profile import profile_for

    where, fld = source
    if where in skb.nodes:
        return fld in skb.nodes[where].props
    profile = profile_for(skb)
    kind, _, name = where.partition(":")
    if kind == "relation":
        spec = profile.relations[name]
        return fld == "name" or bool(getattr(spec, fld))
    if kind == "label":
        return fld == "name" or bool(getattr(profile.labels[name], fld))
    return False


def test_every_training_pair_comes_from_a_field_of_the_graph(tuned: tuple[Path, dict[str, Any]]) -> None:
    skb = tool_shop_skb()
    model_dir, record = tuned
    lines = (model_dir / PAIRS_FILE).read_text(encoding="utf-8").splitlines()
    assert len(lines) == sum(record["pairs"].values()) > 0
    texts = {str(v) for node in skb.nodes.values() for val in node.props.values()
             for v in (val if isinstance(val, list) else [val])}
    for line in lines:
        pair = json.loads(line)
        assert all(_source_exists(skb, src) for src in pair["sources"]), pair
        if pair["kind"] in ("synonym", "definition"):
            # the texts themselves are the graph's: a name, a synonym, a sentence of a definition
            assert pair["name"] in texts
            assert any(pair["query"] in t for t in texts), pair
        if "negative" in pair:
            key, fld = pair["negative_source"]
            assert skb.nodes[key].props[fld] == pair["negative"]
    kinds = {json.loads(line)["kind"] for line in lines}
    assert kinds == {"synonym", "definition", "relation", "label"}


def test_pairs_use_the_declared_fields_whatever_their_names() -> None:
    pairs = mine_pairs(tool_shop_skb(), seed=1)
    spudger = [p for p in pairs if p.group == "T_SPUDGER"]
    assert {(p.kind, p.query) for p in spudger} == {
        ("synonym", "plastic pry tool"),
        ("definition", "A non-conductive wedge used to separate snapped-together casings."),
    }
    assert all(p.name == "spudger" and p.sources[0][1] in ("also_called", "explanation") for p in spudger)
    # siblings under the same parent are the hard negatives
    assert all(p.negative_source is not None and p.negative_source[0] in TOOLS for p in spudger)
    assert all(p.negative != "spudger" for p in spudger)
    relation = [p for p in pairs if p.kind == "relation" and p.group == "relation:STOCKS"]
    assert {p.query for p in relation} == {"carries", "a store sells this implement", "sells implement"}
    assert all(p.name == "stocks" for p in relation)


def test_a_graph_without_synonyms_definitions_or_profile_texts_is_refused() -> None:
    skb = SKB("bare")
    skb.node_types["Thing"] = NodeType(label="Thing")
    skb.add_node(Node("a", "Thing", {"name": "alpha"}))
    with pytest.raises(ConfigError, match="no training pairs"):
        mine_pairs(skb)


def test_batches_never_hold_two_pairs_of_one_node() -> None:
    pairs = mine_pairs(tool_shop_skb())
    stream = batches(pairs, 8, seed=3)
    for _ in range(20):
        batch = next(stream)
        assert len({p.group for p in batch}) == len(batch) >= 2
        assert len({p.name.lower() for p in batch}) == len(batch)


def _ranks(embedder: Any) -> dict[str, int]:
    keys = list(TOOLS)
    names = embedder.embed([TOOLS[k][0] for k in keys])
    out = {}
    for query, key in PARAPHRASES.items():
        order = np.argsort(-(names @ embedder.embed_query(query)))
        out[query] = int(np.where(order == keys.index(key))[0][0])
    return out


def test_tuning_finds_paraphrases_the_shipped_encoder_misses(tuned: tuple[Path, dict[str, Any]]) -> None:
    from graphs.embedding.embedder import MiniLMEmbedder
    from graphs.embedding.tuned import TunedEmbedder

    model_dir, record = tuned
    before = _ranks(MiniLMEmbedder(max_seq_length=32, quantize=True))
    after = _ranks(TunedEmbedder(model_dir))
    missed = [q for q, rank in before.items() if rank > 0]
    assert missed, before  # the shipped encoder cannot read the trade names
    assert sum(after[q] == 0 for q in missed) >= 2, (before, after)
    assert sum(after.values()) < sum(before.values())
    assert record["final_loss"] < record["first_loss"]


def test_same_seed_same_model() -> None:
    import torch

    from graphs.embedding.embedder import _minilm_path
    from graphs.tuning.train import train_encoder

    config = TuneConfig(steps=3, batch_size=4, max_seq_length=16, seed=11)
    pairs = mine_pairs(tool_shop_skb(), seed=11)
    first = train_encoder(_minilm_path(), pairs, config)
    second = train_encoder(_minilm_path(), pairs, config)
    other = train_encoder(_minilm_path(), pairs, TuneConfig(steps=3, batch_size=4, max_seq_length=16, seed=12))
    assert first.state_dict.keys() == second.state_dict.keys()
    assert all(torch.equal(first.state_dict[k], second.state_dict[k]) for k in first.state_dict)
    assert not all(torch.equal(first.state_dict[k], other.state_dict[k]) for k in first.state_dict)


def test_an_index_stores_its_tuned_encoder_and_queries_with_it(tuned: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle
    from graphs.embedding.tuned import TunedEmbedder
    from graphs.manifest import Manifest

    model_dir, record = tuned
    index_dir = tmp_path / "index"
    build_index(tool_shop_skb(), index_dir, IndexConfig(dataset="tool-shop", store="none",
                                                        embedder=f"tuned:{model_dir}:32"))
    manifest = Manifest.read(index_dir)
    assert manifest.extra["embedder_spec"] == "tuned:encoder:32"
    assert manifest.embedder.model_name.endswith("+tuned-" + record["onnx_sha256"][:12])
    listed = set(manifest.files) | set(manifest.data_files)
    assert {f"encoder/{n}" for n in (WEIGHTS_FILE, ONNX_FILE, PAIRS_FILE, ENCODER_SIDECAR)} <= listed
    moved = tmp_path / "moved"
    index_dir.rename(moved)  # the index holds its encoder: it still embeds after a move
    bundle = IndexBundle.open(moved, store="none")
    try:
        assert isinstance(getattr(bundle.embedder, "inner", bundle.embedder), TunedEmbedder)
        hits = bundle.hnsw.search(bundle.embedder.embed_query("a pry tool made of plastic"), k=1)
        assert hits and hits[0][0] == "T_SPUDGER"
    finally:
        bundle.close()


def test_index_tune_encoder_trains_in_the_build(tmp_path: Path) -> None:
    from graphs.build import IndexConfig, build_index
    from graphs.manifest import Manifest

    config = IndexConfig(dataset="tool-shop", store="none", embedder="minilm:32:int8",
                         tune_encoder=TuneConfig(steps=2, batch_size=4, seed=1))
    summary = build_index(tool_shop_skb(), tmp_path / "index", config)
    assert "tune_encoder" in summary.timings_s
    manifest = Manifest.read(tmp_path / "index")
    assert manifest.extra["embedder_spec"] == "tuned:encoder:32"
    sidecar = json.loads((tmp_path / "index" / "encoder" / ENCODER_SIDECAR).read_text(encoding="utf-8"))
    assert sidecar["settings"]["max_seq_length"] == 32 and sidecar["settings"]["steps"] == 2


def test_tuning_a_model_other_than_the_bundled_one_is_refused(tmp_path: Path) -> None:
    from graphs.build import IndexConfig, build_index

    config = IndexConfig(dataset="tool-shop", store="none", embedder="hash:64", tune_encoder=TuneConfig(steps=1))
    with pytest.raises(ConfigError, match="bundled MiniLM"):
        build_index(tool_shop_skb(), tmp_path / "index", config)


def test_the_model_records_the_settings_its_device_resolved(tmp_path: Path) -> None:
    from graphs.tuning.stage import tune_encoder
    from graphs.tuning.train import LR_PER_PAIR

    skb = tool_shop_skb()
    n_pairs = len(mine_pairs(skb))
    record = tune_encoder(skb, tmp_path / "model", TuneConfig(cpu_steps=2, max_seq_length=16, seed=3))
    settings = record["settings"]
    assert record["device"] == "cpu"  # the CI machine has no GPU; the GPU branch is covered by the recipe table
    assert settings["steps"] == 2
    assert settings["batch_size"] == min(64, n_pairs)
    assert settings["learning_rate"] == pytest.approx(LR_PER_PAIR * settings["batch_size"])
    assert record["peak_gpu_mb"] is None
    assert json.loads((tmp_path / "model" / ENCODER_SIDECAR).read_text())["settings"] == settings
