"""How well an encoder maps paraphrased clauses to the vocabulary names they paraphrase (acc@1, acc@5).

Why: the pipeline's Hit@1 mixes linking, scoring and ranking; this isolates the encoder. Each
paraphrased benchmark question has a twin of the same case in the ``names`` style that lists the
same terms, in the same order, by name; aligning the two gives (clause, term) pairs. Each clause is
embedded and compared with the names of every node of the profile's vocabulary labels (exact scan).
Cases whose clause and name counts differ are skipped (a name with a comma would misalign them).
Evaluation only: nothing here feeds training (the tuner reads only the graph).

``--index-dir`` (repeatable) also measures each clause *through the linker*: the index's own encoder and
phrase vectors (names, synonyms, definition sentences), the shortlist re-scored as clause linking does
(``agent.linking.rescoring``). The name scan isolates the encoder; this shows what the linker gets from
it, which is what the answers see (an encoder can rank names better and the linker's candidates no better).

    python -m evals.studies.encoder_probe --dataset hpo --paraphrased P.csv --names N.csv \\
        --embedder minilm:64:int8 --embedder tuned:/path/to/model:64 [--index-dir DIR ...] --out probe.json
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from agent.linking.settings import ClauseSettings

_LAST_AND = re.compile(r"\s+and\s+(?=[^,]*$)")


def _prefix_len(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    cut = a.rfind(" ", 0, n + 1)
    return cut + 1 if cut >= 0 else 0


def align(paraphrased: Path, names: Path) -> list[tuple[str, str, str]]:
    """(case id, clause, term name) for every case whose two versions split into the same number of parts."""
    twins = {}
    with names.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row.get("style", "names") == "names":
                twins[(row["case_id"], row["target_type"])] = row["query"]
    out: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    with paraphrased.open(encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            case = row["case_id"]
            twin = twins.get((case, row["target_type"]))
            if twin is None or case in seen:
                continue
            seen.add(case)
            start = _prefix_len(row["query"], twin)
            para = row["query"][start:].rstrip(" ?")
            listed = twin[start:].rstrip(" ?")
            clauses = [c.strip() for c in re.split(r";\s+(?:and\s+)?", para) if c.strip()]
            terms = [t.strip() for t in re.split(r",\s+", _LAST_AND.sub(", ", listed)) if t.strip()]
            if len(clauses) == len(terms):
                out.extend((case, c, t) for c, t in zip(clauses, terms, strict=True))
    return out


def probe(embedder: Any, vocab_names: list[str], vocab_keys: list[str], items: list[tuple[str, str]]) -> dict[str, Any]:
    """acc@1/acc@5 of clause -> key over an exact scan of the vocabulary names."""
    from graphs.embedding.embedder import embed_all

    t0 = time.perf_counter()
    matrix = embed_all(embedder, vocab_names)
    t_names = time.perf_counter() - t0
    queries = np.stack([embedder.embed_query(clause) for clause, _ in items])
    scores = queries @ matrix.T
    top = np.argsort(-scores, axis=1)[:, :5]
    hit1 = hit5 = 0
    for row, (_, key) in zip(top, items, strict=True):
        keys = [vocab_keys[i] for i in row]
        hit1 += keys[0] == key
        hit5 += key in keys
    n = len(items)
    return {"model": embedder.model_name, "n": n, "acc@1": round(hit1 / n, 3), "acc@5": round(hit5 / n, 3),
            "embed_names_s": round(t_names, 1)}


def linker_probe(bundle: Any, items: list[tuple[str, str]], settings: ClauseSettings | None = None) -> dict[str, Any]:
    """acc@1/acc@5 of clause -> key through clause linking's ranking (``EntityLinker.rank_clauses``: the bundle's
    phrase vectors and encoder, the nearest terms re-scored jointly over their phrases and shared words);
    ``shortlisted`` is the share whose term is ranked at all."""
    from agent.config import AgentConfig
    from agent.linking.clauses import embed_clauses
    from agent.linking.entities import EntityLinker
    from graphs.index.phrases import phrase_index_for

    cs = settings or AgentConfig().clause_settings() or ClauseSettings()
    index = phrase_index_for(bundle)
    if index is None:
        raise ValueError(f"{bundle.index_dir} has no phrase vectors: its profile names no vocabulary labels")
    clauses = [clause for clause, _ in items]
    ranked = EntityLinker(bundle).rank_clauses(index, clauses, embed_clauses(bundle.embedder, clauses), cs)
    hit1 = hit5 = listed = 0
    for (_, key), hits in zip(items, ranked, strict=True):
        keys = [k for k, _ in hits]
        hit1 += bool(keys) and keys[0] == key
        hit5 += key in keys[:5]
        listed += key in keys
    n = len(items)
    return {"index": str(bundle.index_dir), "model": bundle.embedder.model_name, "n": n,
            "acc@1": round(hit1 / n, 3), "acc@5": round(hit5 / n, 3), "shortlisted": round(listed / n, 3)}


def main(argv: list[str] | None = None) -> None:
    from graphs.embedding.embedder import get_embedder
    from graphs.loaders import load_dataset
    from graphs.skb.profile import profile_for

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="hpo")
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--paraphrased", type=Path, required=True)
    parser.add_argument("--names", type=Path, required=True)
    parser.add_argument("--embedder", action="append", default=[])
    parser.add_argument("--index-dir", type=Path, action="append", default=[],
                        help="also probe through this index's clause linking (its encoder and phrase vectors)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not args.embedder and not args.index_dir:
        parser.error("give at least one --embedder SPEC or --index-dir DIR to probe")
    skb = load_dataset(args.dataset, args.data, None)  # type: ignore[arg-type]
    labels = set(profile_for(skb).linking.vocabulary_labels)
    vocab = [n for n in skb.nodes.values() if n.label in labels]
    by_text: dict[str, str] = {}
    for node in vocab:
        ntype = skb.node_types.get(node.label)
        syn = node.props.get(ntype.synonym_field) if ntype is not None and ntype.synonym_field else None
        for text in [node.name, *(syn if isinstance(syn, list) else [])]:
            by_text.setdefault(str(text).lower(), node.key)
    aligned = align(args.paraphrased, args.names)
    items = [(clause, by_text[term.lower()]) for _, clause, term in aligned if term.lower() in by_text]
    print(f"{len(aligned)} aligned clauses, {len(items)} with a known term; {len(vocab)} vocabulary names", flush=True)
    results = []
    for spec in args.embedder:
        res = probe(get_embedder(spec), [n.name for n in vocab], [n.key for n in vocab], items)
        res["spec"] = spec
        print(json.dumps(res), flush=True)
        results.append(res)
    if args.index_dir:
        from graphs.bundle import IndexBundle

        for index_dir in args.index_dir:
            with IndexBundle.open(index_dir, store="none") as bundle:
                try:
                    res = linker_probe(bundle, items)
                except ValueError as exc:  # an index without phrase vectors: say so, no traceback
                    parser.error(str(exc))
            print(json.dumps(res), flush=True)
            results.append(res)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
