"""Tuning settings compared on a GPU machine that has torch but not this project's other dependencies.

Why standalone: a lent GPU machine reaches no registry, so only the tuning loop (``graphs.tuning.train``,
which needs torch and transformers alone) travels with a folder prepared here: ``base/`` (the shipped
encoder's config, tokenizer and weights as ``model.fp16.safetensors``, to fit the transfer limit),
``pairs.jsonl.gz`` (what ``mine_pairs`` gives for the graph: query, name, kind, group, negative) and
``probe.json`` (``names``, ``keys`` and aligned ``items`` [clause, key], as ``encoder_probe`` builds them).
Each setting trains from the shipped weights; the probe runs at checkpoints; the best run's weights come
back in fp16 shards under 16 MB (``best-<i>.safetensors``; a tensor too large is split in 4 rows-wise,
keys ``name::<j>``). Evaluation only: the probe's clauses never reach training.

    python evals/studies/encoder_sweep_gpu.py --data DIR --out OUT [--budget-s 400]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: the GPU machine installs nothing

from graphs.tuning.pairs import Pair
from graphs.tuning.train import TuneConfig, train_encoder

#: (name, TuneConfig fields, pair kind or None for all, checkpoint every n steps), per pass count of the pairs.
Setting = tuple[str, dict[str, Any], str | None, int]


def settings(n_pairs: int, by_kind: dict[str, int]) -> list[Setting]:
    """The settings compared in the encoder-tuning guide, cheapest and most informative first."""
    epoch64, epoch256, epoch512 = n_pairs // 64, n_pairs // 256, n_pairs // 512
    return [
        ("e1-bs64-hn", {"steps": epoch64, "batch_size": 64, "learning_rate": 3e-5}, None, 100),
        ("e3-bs64-hn", {"steps": 3 * epoch64, "batch_size": 64, "learning_rate": 3e-5}, None, 224),
        ("e1-bs64-nohn", {"steps": epoch64, "batch_size": 64, "learning_rate": 3e-5, "hard_negatives": False}, None, 0),
        ("e3-bs256-lr1e-4-hn", {"steps": 3 * epoch256, "batch_size": 256, "learning_rate": 1e-4}, None, 84),
        ("e1-synonym-only", {"steps": by_kind.get("synonym", 0) // 64, "batch_size": 64, "learning_rate": 3e-5},
         "synonym", 0),
        ("e1-definition-only", {"steps": by_kind.get("definition", 0) // 64, "batch_size": 64, "learning_rate": 3e-5},
         "definition", 0),
        ("e6-bs256-lr1e-4-hn", {"steps": 6 * epoch256, "batch_size": 256, "learning_rate": 1e-4}, None, 168),
        ("e3-bs512-lr2e-4-hn", {"steps": 3 * epoch512, "batch_size": 512, "learning_rate": 2e-4}, None, 42),
        ("e7-bs512-lr2e-4-hn", {"steps": 7 * epoch512, "batch_size": 512, "learning_rate": 2e-4}, None, 0),
        ("e7-bs512-lr2e-4-nohn", {"steps": 7 * epoch512, "batch_size": 512, "learning_rate": 2e-4, "hard_negatives": False},
         None, 0),
    ]


def main(argv: list[str] | None = None) -> None:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoModel, AutoTokenizer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=400.0, help="skip a setting that would end past this")
    parser.add_argument("--only", default="", help="comma-separated setting names (default: all)")
    args = parser.parse_args(argv)
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    base32 = Path("/tmp/encoder-sweep-base")
    base32.mkdir(exist_ok=True)
    for f in (args.data / "base").iterdir():
        if f.name != "model.fp16.safetensors":
            shutil.copy(f, base32 / f.name)
    fp16 = load_file(str(args.data / "base" / "model.fp16.safetensors"))
    save_file({k: v.float().contiguous() for k, v in fp16.items()}, str(base32 / "model.safetensors"))
    pairs: list[Pair] = []
    with gzip.open(args.data / "pairs.jsonl.gz", "rt", encoding="utf-8") as handle:
        for line in handle:
            r = json.loads(line)
            pairs.append(Pair(r["query"], r["name"], r["kind"], r["group"], (), r["negative"]))
    probe = json.loads((args.data / "probe.json").read_text(encoding="utf-8"))
    names, keys, items = probe["names"], probe["keys"], probe["items"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(str(base32), local_files_only=True)
    model = AutoModel.from_pretrained(str(base32), local_files_only=True).to(device).eval()
    base_state = {k: v.clone() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def embed(texts: list[str]) -> Any:
        out = []
        for i in range(0, len(texts), 1024):
            tok = tokenizer(texts[i : i + 1024], padding=True, truncation=True, max_length=64, return_tensors="pt")
            tok = tok.to(device)
            hidden = model(**tok).last_hidden_state
            mask = tok["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            out.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1))
        return torch.cat(out)

    def run_probe(state: dict[str, Any]) -> dict[str, float]:
        start = time.time()
        model.load_state_dict(state)
        top = (embed([c for c, _ in items]) @ embed(names).T).topk(5, dim=1).indices.cpu().tolist()
        hit1 = sum(keys[row[0]] == key for row, (_, key) in zip(top, items, strict=True))
        hit5 = sum(key in [keys[i] for i in row] for row, (_, key) in zip(top, items, strict=True))
        n = len(items)
        return {"acc@1": round(hit1 / n, 3), "acc@5": round(hit5 / n, 3), "probe_s": round(time.time() - start, 1)}

    log: dict[str, Any] = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
                           "pairs": len(pairs), "base": run_probe(base_state), "runs": {}}
    by_kind: dict[str, int] = {}
    for p in pairs:
        by_kind[p.kind] = by_kind.get(p.kind, 0) + 1
    wanted = {s for s in args.only.split(",") if s}
    seconds_per_pair: float | None = None
    best: tuple[float, str, dict[str, Any]] | None = None
    for name, fields, kind, every in settings(len(pairs), by_kind):
        if wanted and name not in wanted:
            continue
        estimate = (seconds_per_pair or 0.0) * fields["steps"] * fields["batch_size"]
        left = args.budget_s - (time.time() - t0)
        if estimate > left - 20:
            log["runs"][name] = {"skipped": f"estimated {estimate:.0f} s, {left:.0f} s left"}
            continue
        subset = [p for p in pairs if kind is None or p.kind == kind]
        curve: list[dict[str, Any]] = []
        probe_seconds = [0.0]
        started = time.time()

        def checkpoint(step: int, state: dict[str, Any], curve: list[dict[str, Any]] = curve,
                       started: float = started, probe_seconds: list[float] = probe_seconds) -> None:
            found = run_probe(state)
            probe_seconds[0] += found["probe_s"]
            curve.append({"step": step, "train_s": round(time.time() - started - probe_seconds[0], 1), **found})

        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        result = train_encoder(base32, subset, TuneConfig(seed=0, max_seq_length=64, **fields),
                               on_checkpoint=checkpoint, checkpoint_every=every)
        final = run_probe(result.state_dict)
        curve.append({"step": result.steps, "train_s": round(result.seconds, 1), **final})
        seconds_per_pair = result.seconds / (result.steps * fields["batch_size"])
        log["runs"][name] = {
            "settings": fields, "kind": kind, "pairs": len(subset), "train_s": round(result.seconds, 1), "final": final,
            "curve": curve, "loss_first10": round(sum(result.losses[:10]) / max(1, len(result.losses[:10])), 4),
            "loss_last10": round(sum(result.losses[-10:]) / max(1, len(result.losses[-10:])), 4),
            "peak_gpu_mb": None if result.peak_gpu_mb is None else round(result.peak_gpu_mb),
            "peak_rss_mb": round(result.peak_rss_mb),
        }
        (args.out / "results.json").write_text(json.dumps(log, indent=1), encoding="utf-8")
        score = final["acc@1"] + final["acc@5"]
        if kind is None and (best is None or score > best[0]):
            best = (score, name, {k: v.to(torch.float16) for k, v in result.state_dict.items()})
    log["best"] = best[1] if best else None
    log["total_s"] = round(time.time() - t0, 1)
    (args.out / "results.json").write_text(json.dumps(log, indent=1), encoding="utf-8")
    if best is not None:
        _write_shards(best[2], args.out)


def _write_shards(state: dict[str, Any], out: Path, limit: int = 14 * 2**20) -> None:
    """fp16 tensors in files under ``limit`` bytes; a tensor over 12 MB is split in 4 along its rows."""
    import torch
    from safetensors.torch import save_file

    parts: dict[str, Any] = {}
    for key, value in state.items():
        if value.numel() * 2 > 12 * 2**20:
            for j, piece in enumerate(torch.chunk(value, 4, dim=0)):
                parts[f"{key}::{j}"] = piece.contiguous()
        else:
            parts[key] = value.contiguous()
    shards: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    size = 0
    for key, value in parts.items():
        n = value.numel() * 2
        if current and size + n > limit:
            shards.append(current)
            current, size = {}, 0
        current[key] = value
        size += n
    shards.append(current)
    for i, shard in enumerate(shards):
        save_file(shard, str(out / f"best-{i}.safetensors"))


if __name__ == "__main__":
    main()
