"""The candidate pool: evidence from tool results adds up per node; the seeds are its best nodes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agent.state import Candidate, SeedItem
from tools.results import ToolResult as ToolResultT

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle


def add_evidence(
    pool: dict[str, Candidate],
    key: str,
    label: str,
    score: float,
    prov: dict[str, Any],
    support: int = 1,
    owned: set[str] | None = None,
) -> None:
    """Evidence adds up: a node reached from several seeds or calls outranks one reached once.

    ``owned``: keys whose entries this round already copied; any other existing entry belongs to
    the previous state and is copied before it changes (copy on write: a round touches a few hundred
    of the pool's entries, copying all of them every round cost more than the merge)."""
    entry = pool.get(key)
    if entry is None:
        pool[key] = Candidate(score=score * support, support=support, label=label, provenance=[prov])
        if owned is not None:
            owned.add(key)
        return
    if owned is not None and key not in owned:
        entry = pool[key] = Candidate(
            score=entry["score"], support=entry["support"], label=entry["label"], provenance=list(entry["provenance"])
        )
        owned.add(key)
    entry["score"] += score * support
    entry["support"] += support
    if prov not in entry["provenance"]:
        entry["provenance"].append(prov)


def merge_observation(
    pool: dict[str, Candidate], result: ToolResultT | None, bundle: IndexBundle, owned: set[str] | None = None
) -> int:
    """Fold one typed tool result into the pool; returns how many nodes it added evidence for.

    Each result kind says itself what evidence it carries (``evidence``), so a new tool needs no
    branch here. ``owned``: see ``_add_evidence`` (None: every entry of ``pool`` may be changed)."""
    if result is None or result.is_error:
        return 0
    prov = result.provenance.model_dump()
    items = result.evidence(bundle.skb.nodes)
    for item in items:
        add_evidence(pool, item.key, item.label, item.score, prov, support=item.support, owned=owned)
    return len(items)


def select_seeds(
    pool: Mapping[str, Candidate], finish: Mapping[str, Any] | None, target_type: str | None, k: int
) -> list[SeedItem]:
    """Finish keys first (the planner's ranking), then the pool's best nodes of the answer type.

    Scores are made non-increasing over rank so any consumer that sorts by score keeps our order.
    """
    ranked: list[tuple[str, float]] = []
    if finish:
        ranked.extend(zip(finish.get("keys") or [], finish.get("scores") or [], strict=False))
    chosen = {key for key, _ in ranked}
    rest = [(key, c) for key, c in pool.items() if key not in chosen]
    typed = [(key, c) for key, c in rest if target_type is None or c["label"] == target_type]
    top = max((c["score"] for _, c in typed), default=1.0) or 1.0
    for key, cand in sorted(typed, key=lambda kc: (-kc[1]["score"], kc[0])):
        ranked.append((key, cand["score"] / top))
    seeds: list[SeedItem] = []
    last = float("inf")
    for key, score in ranked[:k]:
        last = min(float(score), last)
        seeds.append(SeedItem(key=key, score=last, origin="seed"))
    return seeds

