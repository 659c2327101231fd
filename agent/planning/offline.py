"""The offline planner: a deterministic chat model that plans tool calls by rule, no network.

Why a chat model: the agent graph drives any planner through the same interface (bind_tools,
tool calls, tool messages), so the offline planner exercises exactly the code path an LLM
does and its traces read the same. It is also the strong baseline: on a term-annotated graph
(phenotypes -> diseases, genes) it ranks candidates by information content, which is how
clinical phenotype matchers work.

Rounds (each an AIMessage with parallel tool calls; the planner is stateless and re-derives
its position from the messages it is given):

0. ``search_nodes`` from every linked source entity along the first hop of the best relation
   path (``per_call_k`` each); for source labels with a hierarchy self-relation, ``search_nodes``
   over it (both directions: the broader and narrower terms) and, in the same round, from those
   terms along the same hop, so targets annotated with a parent or child of a mentioned term become
   candidates (the planner reads the hierarchy neighbours off the SKB's adjacency to choose the keys,
   as it reads statistics to score; the round's calls are independent and run at once). A
   ``semantic_search`` for the target label when the plan's ``semantic_net`` is ``always`` or
   nothing could be expanded.
1. For two-hop paths, the second hop from the best intermediate nodes; with ``semantic_net``
   ``as-needed``, a ``semantic_search`` when round 0 reached fewer than ``k`` target candidates.
   No calls: round 1 is the finish.
2. ``finish`` with the candidates ranked.

Candidates and provenance come only from tool results; the *scores* use statistics of the
in-memory SKB (information content, ancestor closures: ``agent.scoring.ontology``).
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from langchain_core.caches import BaseCache
from langchain_core.callbacks import CallbackManager, CallbackManagerForLLMRun
from langchain_core.globals import get_llm_cache
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, Field

from agent.planning.paths import planner_for
from agent.planning.ranking import _source_groups, rank_targets
from agent.planning.walks import path_walk_message
from agent.scoring.ontology import schema_for
from agent.scoring.stored import find_hierarchy
from graphs.errors import PlannerError
from graphs.skb.model import SKB
from tools.results import Neighbor, Neighborhood, SemanticHit, SemanticHits, ToolResult, parse_result
from tools.search_nodes import MAX_AMONG
from tools.search_nodes import MAX_LIMIT as SEARCH_MAX_LIMIT

_PLAN = re.compile(r"<plan>(.*?)</plan>", re.DOTALL)

#: Most tool calls in one round (a question rarely names more than 20 entities).
MAX_CALLS_PER_ROUND = 48
#: Intermediate nodes expanded on the second hop of a two-hop path.
SECOND_HOP_SEEDS = 10
#: Most keys one search_nodes call expands (the tool's argument limit).
MAX_KEYS_PER_CALL = 200
#: Keys finish returns (more than k: the agent keeps k, SAGE and metrics may look further).
FINISH_KEYS = 100
#: Answers a named entity may reach along its hop and still be read whole; one with more is checked by membership
#: among the answers of the question's other named entities (and those answers are listed only up to this many).
ANCHOR_MAX = MAX_AMONG
#: Degree past which a named entity counts as having unboundedly many answers (its count along a hop is not computed).
HUB_DEGREE = 16 * ANCHOR_MAX
#: Most edges the named entities may have in all for the planner to intersect their answers off the SKB.
SHARED_MAX_EDGES = 2_000_000


# -- reading the conversation ---------------------------------------------------------------


def parse_plan(messages: Sequence[BaseMessage]) -> dict[str, Any]:
    """The JSON of the last ``<plan>...</plan>`` block in a human message."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            match = _PLAN.search(str(message.content))
            if match:
                try:
                    plan = json.loads(match.group(1))
                except json.JSONDecodeError as exc:
                    raise PlannerError(
                        f"the <plan> block is not valid JSON ({exc}); the plan node must emit JSON"
                    ) from exc
                if not isinstance(plan, dict):
                    raise PlannerError("the <plan> block must hold a JSON object")
                return plan
    raise PlannerError("no <plan>{...}</plan> block in the human messages; the offline planner needs the plan node")


@dataclass
class Observations:
    """What the tools returned so far: typed results, flattened per kind."""

    rounds: int = 0
    neighborhoods: list[Neighborhood] = field(default_factory=list)
    hits: list[SemanticHit] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)
    """The id of each of ``calls`` ('' where a call had none)."""
    results_by_call: dict[str, ToolResult | None] = field(default_factory=dict)

    def neighbors(self, rel: str | None = None) -> list[Neighbor]:
        """Every neighbour reported so far, optionally only those reached along ``rel``."""
        return [n for hood in self.neighborhoods for n in hood.neighbors if rel is None or rel in n.rels]


def read_observations(messages: Sequence[BaseMessage]) -> Observations:
    """Tool calls made after the plan and their results (tool messages matched by call id)."""
    start = 0
    for i, message in enumerate(messages):
        if isinstance(message, HumanMessage) and _PLAN.search(str(message.content)):
            start = i + 1
    obs = Observations()
    call_args: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in messages[start:]:
        if isinstance(message, AIMessage) and message.tool_calls:
            obs.rounds += 1
            for call in message.tool_calls:
                entry = (call["name"], dict(call.get("args") or {}))
                obs.calls.append(entry)
                obs.call_ids.append(str(call.get("id") or ""))
                if call.get("id"):
                    call_args[str(call["id"])] = entry
        elif isinstance(message, ToolMessage):
            name = message.name or call_args.get(message.tool_call_id, ("", {}))[0]
            result = parse_result(name, getattr(message, "artifact", None) or message.content)
            obs.results_by_call[message.tool_call_id] = result
            if isinstance(result, Neighborhood):
                obs.neighborhoods.append(result)
            elif isinstance(result, SemanticHits):
                obs.hits.extend(result.hits)
    return obs


# -- the planner --------------------------------------------------------------------------------


def _semantic_net(plan: Mapping[str, Any]) -> str:
    """The plan's ``semantic_net`` (AgentConfig.semantic_net; a plan without one: as-needed)."""
    mode = str(plan.get("semantic_net") or "as-needed")
    if mode not in ("always", "as-needed", "never"):
        raise PlannerError(f"semantic_net must be always, as-needed or never, got {mode!r}")
    return mode


def _step(raw: Mapping[str, Any]) -> dict[str, str]:
    return {"rel": str(raw.get("rel")), "direction": str(raw.get("direction")), "to_label": str(raw.get("to_label"))}


class OfflinePlanner(BaseChatModel):
    """Rule-based planner over the plan and tool results; see the module docstring."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    bundle: Any = Field(exclude=True)
    finish_keys: int = FINISH_KEYS
    use_hierarchy: bool = True

    def __init__(self, bundle: Any, **kwargs: Any) -> None:
        super().__init__(bundle=bundle, **kwargs)  # type: ignore[call-arg]

    @property
    def _llm_type(self) -> str:
        return "offline-planner"

    def wants_question_vector(self, messages: Sequence[BaseMessage]) -> bool:
        """Whether this planner's first round will need the question's embedding, so the agent may start
        computing it early: only with ``semantic_net`` ``always`` (a semantic_search in round 0). Not when
        relation paths are walked in Cypher (the profile's path planner), and not ``as-needed``: then
        the vector is rarely needed (a truncated search_nodes result or a thin first round) and computing
        it anyway would take a core from the round's graph queries on a small machine."""
        try:
            plan = parse_plan(messages)
        except PlannerError:
            return False
        return _semantic_net(plan) == "always" and planner_for(self.bundle) is None

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The planner knows its tools by name; binding changes nothing (kept for interface parity)."""
        return self  # type: ignore[return-value]

    def unobserved_reply(self, messages: Sequence[BaseMessage], config: RunnableConfig | None) -> AIMessage | None:
        """``next_message`` without the chat-model call around it, when nothing would observe that call;
        None when something would (then the caller invokes the model as usual).

        Why: ``invoke`` on a chat model builds a callback manager, start and end events, a result
        wrapper and a cache lookup around ``_generate`` (about a third of a millisecond per planner turn
        under a LangGraph node), which only a tracer, a callback or a cache can tell apart. Without a
        handler in ``config`` (or from the environment: ``CallbackManager.configure`` adds the tracers
        ``LANGSMITH_TRACING`` asks for), a cache or a rate limiter, the reply is the same message; it
        has no run id (the graph's message reducer gives it one). A planner error returns None, so
        the ordinary call raises it the ordinary way (this planner is deterministic)."""
        cfg = config or {}
        manager = CallbackManager.configure(
            cfg.get("callbacks"), self.callbacks, self.verbose, cfg.get("tags"), self.tags,
            cfg.get("metadata"), self.metadata,
        )
        cached = isinstance(self.cache, BaseCache) or (self.cache is None and get_llm_cache() is not None)
        if manager.handlers or cached or self.rate_limiter is not None:
            return None
        try:
            return self.next_message(messages)
        except Exception:  # noqa: BLE001 - the ordinary call repeats it and raises it as a planner error
            return None

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        message = self.next_message(messages)
        return ChatResult(generations=[ChatGeneration(message=message)])

    # -- decision ----------------------------------------------------------------------------
    def next_message(self, messages: Sequence[BaseMessage]) -> AIMessage:
        plan = parse_plan(messages)
        walked = path_walk_message(self.bundle, plan, messages)  # multi-hop relation paths (profile-enabled)
        if walked is not None:
            return walked  # type: ignore[no-any-return]
        obs = read_observations(messages)
        max_rounds = max(1, int(plan.get("max_rounds") or 4))
        rnd = obs.rounds
        last = rnd >= max_rounds - 1
        calls: list[tuple[str, dict[str, Any]]] = []
        if not last:
            if rnd == 0:
                calls = self._first_round(plan)
            elif rnd == 1:
                calls = self._second_round(plan, obs)
        if not calls:
            return self._finish(plan, obs, rnd)
        tool_calls = [
            {"name": name, "args": args, "id": f"offline_{rnd}_{i}", "type": "tool_call"}
            for i, (name, args) in enumerate(calls[:MAX_CALLS_PER_ROUND])
        ]
        return AIMessage(content="", tool_calls=tool_calls)

    def _sources(self, plan: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[list[dict[str, str]]]]:
        target = plan.get("target_type")
        paths = [[_step(s) for s in p] for p in plan.get("relation_paths") or [] if p]
        linked = [e for e in plan.get("linked_entities") or [] if isinstance(e, dict) and e.get("label") != target]
        chosen = {str(k) for k in plan.get("sources") or []}
        if chosen and any(str(e.get("key")) in chosen for e in linked):
            # plan-once: the model named the entities the question is about; the other links misread it
            linked = [e for e in linked if str(e.get("key")) in chosen]
        keep = {k for keys in _source_groups(linked, str(target)).values() for k in keys}
        return [e for e in linked if str(e.get("key")) in keep], paths

    @staticmethod
    def _search(keys: list[str], rel: str, direction: str, to_label: str, limit: int) -> tuple[str, dict[str, Any]]:
        """A ``search_nodes`` call over ``keys`` (one call for many keys: the tool aggregates per neighbour
        and says which keys reach it). The tool ranks by relevance only when the result is cut."""
        args: dict[str, Any] = {
            "keys": keys,
            "rel_types": [rel],
            "direction": direction,
            "target_label": to_label,
            "limit": min(limit, SEARCH_MAX_LIMIT),
        }
        return ("search_nodes", args)

    def _first_hop(self, paths: list[list[dict[str, str]]], label: str) -> dict[str, str] | None:
        """The first step of the best path that starts at ``label`` (paths come shortest/best first)."""
        schema = schema_for(self.bundle.skb)
        for path in paths:
            step = path[0]
            for rel in schema.relations:
                if rel.rel != step["rel"]:
                    continue
                start = rel.src_label if step["direction"] == "out" else rel.dst_label
                end = rel.dst_label if step["direction"] == "out" else rel.src_label
                if start == label and end == step["to_label"]:
                    return step
        return None

    def _first_round(self, plan: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        target = plan.get("target_type")
        k = int(plan.get("per_call_k") or 20)
        linked, paths = self._sources(plan)
        calls: list[tuple[str, dict[str, Any]]] = []
        # one call per (first hop, source label) with every linked key of that label; one hierarchy
        # call per label likewise
        hops: dict[tuple[str, str, str, str], list[str]] = {}
        hierarchies: dict[tuple[str, str], list[str]] = {}
        for ent in linked:
            label = str(ent["label"])
            step = self._first_hop(paths, label)
            if step is None:
                continue
            hops.setdefault((label, step["rel"], step["direction"], step["to_label"]), []).append(str(ent["key"]))
            hierarchy = find_hierarchy(self.bundle.skb, label) if self.use_hierarchy else None
            if hierarchy is not None:
                hierarchies.setdefault((hierarchy.rel, hierarchy.label), []).append(str(ent["key"]))
        small = self._small_answers(hops, str(target)) if target else {}
        shared = self._shared_answers(hops, str(target), small) if target else None
        for (label, rel, direction, to_label), keys in hops.items():
            call = self._search(keys[:MAX_KEYS_PER_CALL], rel, direction, to_label, k * len(keys))
            calls.extend(self._checked(call, label, small, shared) if to_label == target else [call])
        for (rel, label), keys in hierarchies.items():
            calls.append(self._search(keys[:MAX_KEYS_PER_CALL], rel, "both", label, k * len(keys)))
        for label, call in self._hierarchy_hops(linked, paths, k):
            calls.extend(self._checked(call, label, small) if call[1]["target_label"] == target else [call])
        mode = _semantic_net(plan)
        if mode == "always" or (not calls and mode != "never"):
            # plan-once: the model's description of the answer; else the question itself
            args: dict[str, Any] = {"text": str(plan.get("search_text") or plan.get("question") or ""), "k": k}
            if target:
                args["label"] = target
            if args["text"]:
                calls.append(("semantic_search", args))
        return calls

    def _answer_count(self, key: str, step: tuple[str, str, str]) -> float:
        """How many answers one named key reaches along ``step`` (rel, direction, to_label): its edges there
        (infinite past :data:`HUB_DEGREE` edges in all: the degree rules a hub out for free)."""
        skb: SKB = self.bundle.skb
        if skb.degree(key) > HUB_DEGREE:
            return math.inf
        rel, direction, to_label = step
        return float(skb.edge_count(key, [rel], direction, to_label))  # type: ignore[arg-type]

    def _small_answers(
        self, hops: Mapping[tuple[str, str, str, str], list[str]], target: str
    ) -> dict[str, list[str]]:
        """Per label of named entities that lead to ``target``: the answers its keys with at most
        :data:`ANCHOR_MAX` answers each reach (read off the SKB's adjacency), when they fit a membership check."""
        skb: SKB = self.bundle.skb
        found: dict[str, list[str]] = {}
        for (label, rel, direction, to_label), keys in hops.items():
            if to_label != target:
                continue
            answers: dict[str, None] = {}
            for key in keys[:MAX_KEYS_PER_CALL]:
                if self._answer_count(key, (rel, direction, to_label)) <= ANCHOR_MAX:
                    answers.update(dict.fromkeys(skb.neighbor_keys(key, rel, direction, label=to_label)))  # type: ignore[arg-type]
            if 0 < len(answers) <= ANCHOR_MAX:
                found[label] = list(answers)
        return found

    def _shared_answers(
        self, hops: Mapping[tuple[str, str, str, str], list[str]], target: str, small: Mapping[str, list[str]]
    ) -> list[str] | None:
        """The answers every label of named entities leading to ``target`` reaches (each label: any of its keys),
        read off the SKB's adjacency as node ids, when some label has no other label of few answers to be checked
        among (``small``) and what they share fits a membership check.
        None otherwise, or when the entities have more than :data:`SHARED_MAX_EDGES` edges in all.
        Why: when every named entity is very connected ("about" a 384,058-document concept, "written by" a
        9,262-document author) the store would sample the hub, while what the two share is few; two
        neighbourhoods read as arrays and intersected through a mask over the nodes (no sort) cost a few ms."""
        skb: SKB = self.bundle.skb
        groups = [(g, keys[:MAX_KEYS_PER_CALL]) for g, keys in hops.items() if g[3] == target]
        labels = {g[0] for g, _ in groups}
        if len(labels) < 2 or len(small) >= 2:  # with two labels of few answers, each checks among the other's
            return None
        if sum(skb.degree(key) for _, keys in groups for key in keys) > SHARED_MAX_EDGES:
            return None
        n = len(skb.nodes)
        shared: np.ndarray | None = None
        for label in sorted(labels):
            reach = np.zeros(n, dtype=bool)
            for (group_label, rel, direction, to_label), keys in groups:
                if group_label == label:
                    for key in keys:
                        reach[skb.neighbor_ids(key, rel, direction, to_label)] = True  # type: ignore[arg-type]
            shared = reach if shared is None else shared & reach
        found = np.flatnonzero(shared) if shared is not None else np.zeros(0, dtype=np.int64)
        if not 0 < len(found) <= ANCHOR_MAX:
            return None
        keys_of = skb.node_keys()
        return [keys_of[int(i)] for i in found]

    def _checked(
        self,
        call: tuple[str, dict[str, Any]],
        label: str,
        small: Mapping[str, list[str]],
        shared: list[str] | None = None,
    ) -> list[tuple[str, dict[str, Any]]]:
        """``call`` (keys of ``label`` along one hop to the answer type) with its keys that reach more than
        :data:`ANCHOR_MAX` answers split off into a membership check among the answers of the other named
        label with the fewest (``small``), or, when no other label has so few, among the answers every named
        label shares (``shared``); the call as it is when there is nothing to split or check against.

        Why: "which document is about X and written by Y" asks for what X and Y have in common. Expanded
        one by one, each named entity's neighbourhood is read, ranked by relevance to the question and cut to
        ``k``, and in a graph with power-law degrees the largest neighbourhoods grow with the graph (a concept
        of the 1M-node scale graph has 384,058 documents, read as a 5,000-edge sample). What a very connected
        entity has in common with a rarely connected one is among the rare one's answers, so it is checked by
        membership among those (``search_nodes`` ``among``), at the cost of their edges, and the common answers
        are found even where the cut or the sample would have dropped them. The counts come from the SKB's
        adjacency, as the hierarchy hops' keys do."""
        others = [answers for other, answers in small.items() if other != label] or ([shared] if shared else [])
        if not others:
            return [call]
        name, args = call
        step = (args["rel_types"][0], args["direction"], args["target_label"])
        big = [key for key in args["keys"] if self._answer_count(key, step) > ANCHOR_MAX]
        if not big:
            return [call]
        among = min(others, key=len)
        split = set(big)
        rest = [key for key in args["keys"] if key not in split]
        calls = [(name, {**args, "keys": rest})] if rest else []
        return [*calls, (name, {**args, "keys": big, "among": among})]

    def _second_round(self, plan: Mapping[str, Any], obs: Observations) -> list[tuple[str, dict[str, Any]]]:
        skb: SKB = self.bundle.skb
        target = plan.get("target_type")
        k = int(plan.get("per_call_k") or 20)
        linked, paths = self._sources(plan)
        calls: list[tuple[str, dict[str, Any]]] = []
        # a membership check that found nothing: the named entities share no answer (or one was misread);
        # their own neighbourhoods, as without the check
        checked = False
        for (name, called), call_id in zip(obs.calls, obs.call_ids, strict=True):
            if name != "search_nodes" or called.get("among") is None or not call_id.startswith("offline_0_"):
                continue
            checked = True
            found = obs.results_by_call.get(call_id)
            if not (isinstance(found, Neighborhood) and found.neighbors):
                calls.append((name, {key: value for key, value in called.items() if key != "among"}))
        # second hop of two-hop paths from the best intermediates
        for path in paths:
            if len(path) != 2 or path[-1]["to_label"] != target:
                continue
            mid = path[0]["to_label"]
            mids = [n.key for n in obs.neighbors(path[0]["rel"]) if n.label == mid]
            if not mids:
                continue
            ranked = rank_targets(
                skb, mid, linked, [path[:1]], mids, top=SECOND_HOP_SEEDS, scoring=plan.get("scoring")
            )
            seeds = [key for key, _ in ranked[:SECOND_HOP_SEEDS]]
            if seeds:
                calls.append(self._search(seeds, path[1]["rel"], path[1]["direction"], path[1]["to_label"], k))
            break
        searched = any(name == "semantic_search" for name, _ in obs.calls)
        if _semantic_net(plan) == "as-needed" and not searched and not checked:
            # the safety net, when structure reached too few answers (a thin neighbourhood, a misread link);
            # not after membership checks: what the named entities share is few by design
            reached = {n.key for n in obs.neighbors() if target is None or n.label == target}
            text = str(plan.get("search_text") or plan.get("question") or "")
            if len(reached) < int(plan.get("k") or k) and text:
                args: dict[str, Any] = {"text": text, "k": k}
                if target:
                    args["label"] = target
                calls.append(("semantic_search", args))
        return calls

    def _hierarchy_hops(
        self, linked: list[dict[str, Any]], paths: list[list[dict[str, str]]], k: int
    ) -> list[tuple[str, tuple[str, dict[str, Any]]]]:
        """``search_nodes`` along each source label's first hop from the broader and narrower terms of its
        linked entities (one call per label and hop, with that label; the linked entities themselves are
        expanded by their own call).

        The keys are read off the SKB's hierarchy adjacency in the order the hierarchy call reports them
        (most linked entities first, then key), per linked entity in turn, so this call asks what a second
        round reading that call's result would ask, one round earlier."""
        if not self.use_hierarchy:
            return []
        skb: SKB = self.bundle.skb
        linked_keys = {str(e["key"]) for e in linked}
        by_label: dict[str, list[str]] = defaultdict(list)
        for ent in linked:  # as the hierarchy call of round 0: entities with a first hop
            if self._first_hop(paths, str(ent["label"])) is not None:
                by_label[str(ent["label"])].append(str(ent["key"]))
        reach: dict[str, dict[str, set[str]]] = {}  # label -> neighbour -> linked keys adjacent to it
        order: dict[str, list[str]] = {}
        for label, keys in by_label.items():
            hierarchy = find_hierarchy(skb, label)
            if hierarchy is None:
                continue
            seeds: dict[str, set[str]] = defaultdict(set)
            edges: dict[str, int] = defaultdict(int)
            for key in dict.fromkeys(keys[:MAX_KEYS_PER_CALL]):
                for other in skb.neighbor_keys(key, hierarchy.rel, "both", label=hierarchy.label):
                    seeds[other].add(key)
                    edges[other] += 1
            reach[label] = seeds
            order[label] = sorted(edges, key=lambda n: (-edges[n], n))
        hops: dict[tuple[str, str, str, str], list[str]] = {}
        for ent in linked:
            label, key = str(ent["label"]), str(ent["key"])
            step = self._first_hop(paths, label)
            if label not in reach or step is None:
                continue
            neigh = hops.setdefault((label, step["rel"], step["direction"], step["to_label"]), [])
            for other in order[label]:
                if key in reach[label][other] and other not in linked_keys and other not in neigh:
                    neigh.append(other)
        return [
            (label, self._search(neigh[:MAX_KEYS_PER_CALL], rel, direction, to_label, k * max(1, len(linked))))
            for (label, rel, direction, to_label), neigh in hops.items()
            if neigh
        ]

    def _finish(self, plan: Mapping[str, Any], obs: Observations, rnd: int) -> AIMessage:
        skb: SKB = self.bundle.skb
        target = plan.get("target_type")
        linked, paths = self._sources(plan)
        link_score = {str(e["key"]): float(e.get("score") or 1.0) for e in linked}
        candidates: list[str] = []
        support: dict[str, float] = defaultdict(float)
        for n in obs.neighbors():
            if target is None or n.label == target:
                candidates.append(n.key)
                support[n.key] += sum(link_score.get(seed, 0.5) for seed in n.seeds)
        semantic: dict[str, float] = {}
        for h in obs.hits:
            if target is None or h.label == target:
                candidates.append(h.key)
                semantic[h.key] = max(semantic.get(h.key, -1.0), h.score)
        if target:
            ranked = rank_targets(
                skb, str(target), linked, paths, candidates, semantic, support, top=self.finish_keys,
                scoring=plan.get("scoring"),
            )
        else:
            pool = {c: support.get(c, 0.0) + 0.1 * semantic.get(c, 0.0) for c in dict.fromkeys(candidates)}
            ranked = sorted(pool.items(), key=lambda kv: -kv[1])
        ranked = ranked[: self.finish_keys]
        confidence = None
        if len(ranked) >= 2:
            margin = ranked[0][1] - ranked[1][1]
            confidence = round(1.0 / (1.0 + math.exp(-margin)), 4)
        elif ranked:
            confidence = 0.5
        args = {"keys": [k for k, _ in ranked], "scores": [s for _, s in ranked], "confidence": confidence}
        return AIMessage(
            content="",
            tool_calls=[{"name": "finish", "args": args, "id": f"offline_{rnd}_finish", "type": "tool_call"}],
        )
