"""The agent as a LangGraph state machine.

    link_entities -> plan -> act (x T, planner tool calls) -> [fallback] -> expand (SAGE, k') -> finalize

Why this shape (SPARK/PASemiQA planning + SAGE expansion): linking and planning ground the
question in the schema before any search; the act loop lets a planner (LLM or offline rules)
walk explicit relations, search by meaning, or query precisely; the fallback guarantees an
answer when the plan finds nothing; SAGE adds the k' best neighbors of the top-k seeds,
which recovers answers one hop away from what the planner found.

Every node reads its settings through ``settings(config)``: the graph's AgentConfig with the
call's ``configurable`` overrides applied, so one compiled graph serves many configurations.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from agent.config import AgentConfig
from agent.llm_planner import (
    PlannerCallError,
    Usage,
    check_tool_calls,
    invoke_with_retry,
    llm_plan,
    make_chat_model,
)
from agent.results import AgentResult, ContextItem, Provenance, StageUsage
from agent.state import AgentState, Candidate, SeedItem
from graphs.errors import ConfigError, PlannerError, SKBError
from graphs.text_safety import block_json, clean_text, neutralize_plan_tags, quoted
from prompts import render_prompt
from tools import make_tools
from tools.common import schema_of

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from graphs.bundle import IndexBundle

#: Tool-call arguments that size a result; clamped to ``per_call_k`` (K).
_SIZE_ARGS = {"semantic_search": "k", "search_nodes": "limit", "cypher": "max_rows"}
#: Context items the answer message lists.
ANSWER_ITEMS = 5


def settings(base: AgentConfig, config: RunnableConfig | None) -> AgentConfig:
    """The graph's config with this call's ``configurable`` overrides."""
    return base.with_overrides((config or {}).get("configurable"))


def _elapsed_ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 3)


def _question_of(state: AgentState) -> str:
    question = (state.get("question") or "").strip()
    if question:
        return question
    for message in reversed(state.get("messages") or []):
        if isinstance(message, HumanMessage):
            text = str(message.text).strip()
            if text:
                return text
    raise ConfigError('the agent needs a question: pass {"question": "..."} or {"messages": [HumanMessage(...)]}')


def _to_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return dict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dict(dump())
    return dict(vars(obj))


def _path_text(path: Sequence[Mapping[str, Any]]) -> str:
    """A relation path as ``-[HAS_PHENOTYPE]->Phenotype`` / ``<-[CAUSES]-Gene``."""
    parts = []
    for step in path:
        rel, to = step.get("rel"), step.get("to_label")
        parts.append(f"-[{rel}]->{to}" if step.get("direction", "out") == "out" else f"<-[{rel}]-{to}")
    return "".join(parts)


# -- candidate pool -------------------------------------------------------------------------
def _add_evidence(
    pool: dict[str, Candidate], key: str, label: str, score: float, prov: dict[str, Any], support: int = 1
) -> None:
    """Evidence adds up: a node reached from several seeds or calls outranks one reached once."""
    entry = pool.get(key)
    if entry is None:
        pool[key] = Candidate(score=score * support, support=support, label=label, provenance=[prov])
        return
    entry["score"] += score * support
    entry["support"] += support
    if prov not in entry["provenance"]:
        entry["provenance"].append(prov)


def merge_observation(
    pool: dict[str, Candidate], name: str, artifact: Mapping[str, Any], bundle: IndexBundle, args: Mapping[str, Any]
) -> tuple[int, bool]:
    """Fold one tool result into the pool; returns (nodes added, whether explicit edges produced them)."""
    prov = dict(artifact.get("provenance") or {"tool": name, "step": 0, "query": ""})
    nodes = bundle.skb.nodes
    if "error" in artifact:
        return 0, False
    if name == "semantic_search":
        hits = artifact.get("hits") or []
        for hit in hits:
            _add_evidence(pool, hit["key"], hit.get("label", ""), float(hit.get("score", 0.0)), prov)
        return len(hits), False
    if name == "search_nodes":
        seeds = set(args.get("keys") or [])
        via: dict[str, set[str]] = {}
        score: dict[str, float] = {}
        label: dict[str, str] = {}
        for t in artifact.get("triples") or []:
            if t["dst"] in seeds and t["src"] not in seeds:
                other, lab, origin = t["src"], t.get("src_label", ""), t["dst"]
            else:
                other, lab, origin = t["dst"], t.get("dst_label", ""), t["src"]
            via.setdefault(other, set()).add(origin)
            score[other] = max(score.get(other, 0.0), float(t.get("score", 0.5)), 0.0)
            label[other] = lab
        for key, origins in via.items():
            _add_evidence(pool, key, label[key], score[key], prov, support=len(origins))
        return len(via), bool(via) and bool(args.get("rel_types"))
    if name == "cypher":
        rows = artifact.get("rows") or []
        found: list[str] = []
        for row in rows:
            for cell in row:
                for key in _keys_in(cell, nodes):
                    if key not in found:
                        found.append(key)
        n = max(len(found), 1)
        for i, key in enumerate(found):
            _add_evidence(pool, key, nodes[key].label, 1.0 - 0.5 * i / n, prov)
        query = str(args.get("query") or "")
        explicit = "-[" in query or "]-" in query or ")-->" in query or ")<--" in query
        return len(found), bool(found) and explicit
    return 0, False


def _keys_in(cell: Any, nodes: Mapping[str, Any]) -> list[str]:
    if isinstance(cell, str):
        return [cell] if cell in nodes else []
    if isinstance(cell, Mapping):
        key = cell.get("key")
        if isinstance(key, str) and key in nodes:
            return [key]
        return [k for v in cell.values() for k in _keys_in(v, nodes)]
    if isinstance(cell, list):
        return [k for v in cell for k in _keys_in(v, nodes)]
    return []


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


# -- the graph --------------------------------------------------------------------------------
class AgentGraph:
    """Builds and holds what the nodes share: the bundle, tools, planner models, linker."""

    def __init__(self, bundle: IndexBundle, config: AgentConfig, chat_model: BaseChatModel | None = None) -> None:
        self.bundle = bundle
        self.config = config
        self.chat_model = chat_model
        self._lock = threading.Lock()
        self._models: dict[Hashable, BaseChatModel] = {}
        self._linker: Any = None

    # -- shared resources ----------------------------------------------------------------
    def tools(self, cfg: AgentConfig, question: str) -> dict[str, BaseTool]:
        tools = make_tools(
            self.bundle,
            lambda: question,
            cypher_timeout_ms=cfg.cypher_timeout_ms,
            cypher_max_rows=cfg.cypher_max_rows,
        )
        return {t.name: t for t in tools}

    def model(self, cfg: AgentConfig) -> BaseChatModel:
        if self.chat_model is not None:
            return self.chat_model
        key = (cfg.planner, cfg.model, cfg.base_url, cfg.temperature, cfg.llm_timeout_s)
        with self._lock:
            model = self._models.get(key)
            if model is None:
                model = self._models[key] = make_chat_model(cfg, self.bundle)
        return model

    def offline_model(self, cfg: AgentConfig) -> BaseChatModel:
        """The offline planner, used when the configured planner keeps failing (``degrade_to_offline``)."""
        with self._lock:
            model = self._models.get("offline-fallback")
            if model is None:
                model = self._models["offline-fallback"] = make_chat_model(
                    cfg.model_copy(update={"planner": "offline"}), self.bundle
                )
        return model

    def can_degrade(self, cfg: AgentConfig) -> bool:
        return cfg.degrade_to_offline and (self.chat_model is not None or cfg.planner != "offline")

    def counts_llm(self, cfg: AgentConfig) -> bool:
        """The offline planner is a chat model by interface only; its calls are not LLM calls."""
        return self.chat_model is not None or cfg.planner != "offline"

    def linker(self) -> Any:
        if self._linker is None:
            from agent.linking import EntityLinker

            with self._lock:
                if self._linker is None:
                    self._linker = EntityLinker(self.bundle)
        return self._linker

    # -- nodes -------------------------------------------------------------------------------
    def link_entities(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        start = time.perf_counter()
        cfg = settings(self.config, config)
        question = clean_text(_question_of(state))
        if len(question) > cfg.max_question_chars:
            raise ConfigError(
                f"the question is {len(question):,} characters; the limit is max_question_chars="
                f"{cfg.max_question_chars:,}: shorten it (ask about the key facts) or raise the limit"
            )
        update: dict[str, Any] = {
            "question": question,
            "linked_entities": [],
            "candidates": {},
            "step": 0,
            "repairs": 0,
            "done": False,
            "finish": None,
            "used_explicit_relations": False,
            "fallback_used": False,
            "seeds": [],
            "expanded": [],
            "tool_calls": 0,
            "planner_offline": False,
            "scratchpad": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
        }
        if not state.get("messages"):
            update["messages"] = [HumanMessage(question)]
        degraded: list[str] = []
        if cfg.max_entities > 0:
            try:
                linked = self.linker().link(question, cfg.max_entities)
                update["linked_entities"] = [_to_dict(e) for e in linked]
            except ImportError as exc:
                degraded.append(f"entity linking unavailable ({exc})")
        update["degraded"] = degraded
        update["timings_ms"] = {"link_entities": _elapsed_ms(start)}
        return update

    def plan(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        start = time.perf_counter()
        cfg = settings(self.config, config)
        question = state["question"]
        linked = state.get("linked_entities") or []
        schema = schema_of(self.bundle)
        degraded: list[str] = []
        usage = Usage()
        target: str | None = None
        paths: list[list[dict[str, Any]]] = []
        planned = False
        offline = False
        if cfg.planner == "openai":
            try:
                target, paths = llm_plan(self.model(cfg), question, schema, linked, cfg, usage)
                planned = True
            except PlannerCallError as exc:
                if not self.can_degrade(cfg):
                    raise
                # the model could not be reached after retries: do not pay the retries again per round
                offline = True
                degraded.append(f"LLM plan failed, used the heuristic plan and the offline planner: {exc}")
            except PlannerError as exc:
                degraded.append(f"LLM plan failed, used the heuristic plan: {exc}")
        if not planned:
            try:
                target, paths = self._heuristic_plan(question, linked, cfg)
            except ImportError as exc:
                degraded.append(f"heuristic planning unavailable ({exc})")
        plan = {
            "question": question,
            "linked_entities": linked,
            "target_type": target,
            "relation_paths": paths,
            "k": cfg.k,
            "per_call_k": cfg.per_call_k,
            "max_rounds": cfg.max_rounds,
        }
        system = render_prompt(
            "planner_system.md",
            schema=schema.render(),
            tools=self._tool_text(cfg, question),
            per_call_k=cfg.per_call_k,
            max_rounds=cfg.max_rounds,
            k=cfg.k,
        )
        # Untrusted text (the question, node names) is shown as data: names JSON-quoted, and no
        # value can open or close the <plan> block the offline planner parses (block_json escapes
        # <, > and & inside it; neutralize_plan_tags defuses tags everywhere else).
        entities = "\n".join(f"- {e['key']} ({e['label']}): {quoted(e['name'])}" for e in linked) or "(none)"
        human = render_prompt(
            "plan_message.md",
            question=neutralize_plan_tags(question),
            entities=neutralize_plan_tags(entities),
            target_type=target or "(unknown)",
            paths=neutralize_plan_tags("\n".join(f"- {_path_text(p)}" for p in paths) or "(none)"),
            plan_json=block_json(plan),
        )
        update: dict[str, Any] = {
            "target_type": target,
            "relation_paths": paths,
            "scratchpad": [SystemMessage(system), HumanMessage(human)],
            "planner_offline": offline,
            "degraded": degraded,
            "timings_ms": {"plan": _elapsed_ms(start)},
        }
        if usage.llm_calls and self.counts_llm(cfg):
            update["usage"] = {"plan": usage.as_dict()}
        return update

    def _heuristic_plan(
        self, question: str, linked: Sequence[Mapping[str, Any]], cfg: AgentConfig
    ) -> tuple[str | None, list[list[dict[str, Any]]]]:
        from agent.planning import predict_target_type, relation_paths

        schema = schema_of(self.bundle)
        target = predict_target_type(question, schema)
        if target is None:
            return None, []
        sources = list(dict.fromkeys(str(e["label"]) for e in linked if e.get("label") != target))
        if not sources:
            return target, []
        raw = relation_paths(schema, sources, target, max_hops=cfg.max_hops)
        return target, [[_to_dict(step) for step in path] for path in raw]

    def _tool_text(self, cfg: AgentConfig, question: str) -> str:
        lines = []
        for tool in self.tools(cfg, question).values():
            params = tool.tool_call_schema.model_json_schema().get("properties", {})  # type: ignore[union-attr]
            lines.append(f"- {tool.name}({', '.join(params)}): {tool.description}")
        return "\n".join(lines)

    def act(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        start = time.perf_counter()
        cfg = settings(self.config, config)
        question = state["question"]
        step = int(state.get("step") or 0)
        repairs = int(state.get("repairs") or 0)
        tools = self.tools(cfg, question)
        usage = Usage()
        degraded: list[str] = []
        offline = bool(state.get("planner_offline"))
        scratchpad = state.get("scratchpad") or []
        reply: AIMessage | None = None
        if not offline:
            bound: Runnable[LanguageModelInput, BaseMessage] = self.model(cfg).bind_tools(list(tools.values()))
            try:
                reply = invoke_with_retry(bound, scratchpad, cfg)
                usage.add(reply)
            except PlannerError as exc:
                if not self.can_degrade(cfg):
                    raise
                offline = True
                degraded.append(f"planner model failed, continued with the offline planner: {exc}")
        if reply is None:
            reply = invoke_with_retry(self.offline_model(cfg), scratchpad, cfg)
        new_messages: list[AnyMessage] = [reply]
        checked = check_tool_calls(reply, tools)
        pool: dict[str, Candidate] = {
            k: Candidate(score=v["score"], support=v["support"], label=v["label"], provenance=list(v["provenance"]))
            for k, v in (state.get("candidates") or {}).items()
        }
        observations: list[dict[str, Any]] = []
        finish: dict[str, Any] | None = state.get("finish")
        explicit = bool(state.get("used_explicit_relations"))
        executed = 0
        if checked.valid:
            step += 1
        for i, call in enumerate(checked.valid):
            name = call["name"]
            call_id = call.get("id") or f"call_{step}_{i}"
            args = dict(call.get("args") or {})
            size_arg = _SIZE_ARGS.get(name)
            if size_arg is not None:
                args[size_arg] = min(int(args.get(size_arg) or cfg.per_call_k), cfg.per_call_k)
            run_args = {**args, "step": step, "question": question}
            try:
                message = tools[name].invoke({"type": "tool_call", "id": call_id, "name": name, "args": run_args})
            except Exception as exc:  # noqa: BLE001 - one failing call must not end the run; it is reported
                detail = str(exc) if isinstance(exc, SKBError) else f"{type(exc).__name__}: {exc}"
                degraded.append(f"tool {name} failed: {detail}")
                payload = {"error": {"type": "tool_failed", "message": detail, "hint": "try another tool"}}
                message = ToolMessage(content=json.dumps(payload), tool_call_id=call_id, name=name, status="error")
            executed += 1
            new_messages.append(message)
            artifact = getattr(message, "artifact", None) or {}
            error = artifact.get("error") if isinstance(artifact, Mapping) else None
            if isinstance(error, Mapping) and error.get("type") == "store_unavailable":
                degraded.append(f"tool {name}: graph store unavailable: {error.get('message')}")
            added, used_edges = merge_observation(pool, name, artifact, self.bundle, args)
            explicit = explicit or used_edges
            observations.append(
                {"step": step, "tool": name, "args": args, "nodes": added, "error": artifact.get("error")}
            )
            if name == "finish" and "error" not in artifact:
                finish = dict(artifact)
        new_messages.extend(checked.errors)
        done = finish is not None
        if checked.errors and not checked.valid:
            repairs += 1
            if repairs > cfg.max_repairs:
                degraded.append(f"planner made invalid tool calls {repairs} rounds in a row; stopped after max_repairs")
                done = True
        elif not checked.valid and not checked.errors:
            done = True  # the planner answered in text: nothing more to run
        if step >= cfg.max_rounds:
            done = True
        update: dict[str, Any] = {
            "scratchpad": new_messages,
            "candidates": pool,
            "observations": observations,
            "step": step,
            "repairs": repairs,
            "done": done,
            "finish": finish,
            "used_explicit_relations": explicit,
            "tool_calls": int(state.get("tool_calls") or 0) + executed,
            "planner_offline": offline,
            "degraded": degraded,
            "timings_ms": {"act": float(state.get("timings_ms", {}).get("act", 0.0)) + _elapsed_ms(start)},
        }
        if self.counts_llm(cfg) and usage.llm_calls:
            previous = (state.get("usage") or {}).get("act") or {}
            update["usage"] = {"act": {k: int(previous.get(k, 0)) + v for k, v in usage.as_dict().items()}}
        if done:
            update["seeds"] = select_seeds(pool, finish, state.get("target_type"), cfg.k)
        return update

    def route_after_act(self, state: AgentState, config: RunnableConfig) -> Literal["act", "fallback", "expand"]:
        if not state.get("done"):
            return "act"
        cfg = settings(self.config, config)
        seeds = state.get("seeds") or []
        if not seeds or (cfg.fallback_fill and len(seeds) < cfg.k):
            return "fallback"
        return "expand"

    def fallback(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        start = time.perf_counter()
        cfg = settings(self.config, config)
        question = state["question"]
        label = state.get("target_type")
        degraded: list[str] = []
        try:
            hits = self.bundle.search(question, mode="hybrid", k=cfg.k, label=label, weight=cfg.hybrid_weight)
        except ConfigError as exc:  # a predicted type the index does not know: search all types
            degraded.append(f"fallback search without type filter: {exc}")
            hits = self.bundle.search(question, mode="hybrid", k=cfg.k, weight=cfg.hybrid_weight)
        seeds = list(state.get("seeds") or [])
        have = {s["key"] for s in seeds}
        floor = seeds[-1]["score"] if seeds else float("inf")
        prov = {"tool": "hybrid_search", "step": int(state.get("step") or 0), "query": question}
        pool = dict(state.get("candidates") or {})
        for hit in hits:
            if len(seeds) >= cfg.k:
                break
            if hit.key in have:
                continue
            floor = min(floor, float(hit.score))
            seeds.append(SeedItem(key=hit.key, score=floor, origin="fallback"))
            have.add(hit.key)
            pool[hit.key] = Candidate(score=float(hit.score), support=1, label=hit.label, provenance=[prov])
        return {
            "seeds": seeds,
            "candidates": pool,
            "fallback_used": True,
            "degraded": degraded,
            "timings_ms": {"fallback": _elapsed_ms(start)},
        }

    def expand(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        """SAGE: the k' best one-hop neighbors of the top-k seeds (prune folded in: keep k')."""
        start = time.perf_counter()
        cfg = settings(self.config, config)
        seeds = state.get("seeds") or []
        skip = (
            cfg.policy == "never"
            or cfg.k_prime == 0
            or not seeds
            or (cfg.policy == "skip-when-explicit-edges" and bool(state.get("used_explicit_relations")))
        )
        if skip:
            return {"expanded": [], "timings_ms": {"expand": _elapsed_ms(start)}}
        try:
            from graphs.sage_expand import expand
        except ImportError as exc:
            return {
                "expanded": [],
                "degraded": [f"SAGE expansion unavailable ({exc})"],
                "timings_ms": {"expand": _elapsed_ms(start)},
            }
        ranked = expand(
            self.bundle,
            state["question"],
            [(s["key"], float(s["score"])) for s in seeds],
            cfg.k_prime,
            weight=cfg.sage_weight,
            use_similarity_edges=cfg.use_similarity_edges,
        )
        have = {s["key"] for s in seeds}
        floor = float(seeds[-1]["score"])
        expanded: list[SeedItem] = []
        for key, score in ranked:
            if key in have or key not in self.bundle.skb.nodes:
                continue
            have.add(key)
            floor = min(floor, float(score))
            expanded.append(SeedItem(key=key, score=floor, origin="sage"))
            if len(expanded) >= cfg.k_prime:
                break
        return {"expanded": expanded, "timings_ms": {"expand": _elapsed_ms(start)}}

    def finalize(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        start = time.perf_counter()
        question = state["question"]
        pool = state.get("candidates") or {}
        finish = state.get("finish") or {}
        finish_prov = finish.get("provenance")
        step = int(state.get("step") or 0)
        sage_prov = Provenance(tool="sage_expand", step=step, query=question)
        items: list[ContextItem] = []
        for rank, seed in enumerate([*(state.get("seeds") or []), *(state.get("expanded") or [])], 1):
            key = seed["key"]
            node = self.bundle.skb.nodes[key]
            cand = pool.get(key)
            provs = [Provenance(**p) for p in (cand["provenance"] if cand else [])]
            if finish_prov and key in (finish.get("keys") or []):
                provs.append(Provenance(**finish_prov))
            if seed["origin"] == "sage":
                provs.append(sage_prov)
            items.append(
                ContextItem(
                    key=key,
                    label=node.label,
                    name=node.name,
                    score=float(seed["score"]),
                    rank=rank,
                    origin=seed["origin"],  # type: ignore[arg-type]
                    provenance=provs,
                )
            )
        answer = _answer_text(question, items)
        timings = dict(state.get("timings_ms") or {})
        timings["finalize"] = _elapsed_ms(start)
        timings["total"] = round(sum(v for k, v in timings.items() if k != "total"), 3)
        usage = {stage: StageUsage(**u) for stage, u in (state.get("usage") or {}).items()}
        result = AgentResult(
            question=question,
            answer=answer,
            context=items,
            target_type=state.get("target_type"),
            relation_paths=[[_path_text([s]) for s in p] for p in state.get("relation_paths") or []],
            steps=step,
            used_explicit_relations=bool(state.get("used_explicit_relations")),
            fallback_used=bool(state.get("fallback_used")),
            degraded=list(state.get("degraded") or []),
            timings_ms=timings,
            llm_calls=sum(u.llm_calls for u in usage.values()),
            prompt_tokens=sum(u.prompt_tokens for u in usage.values()),
            completion_tokens=sum(u.completion_tokens for u in usage.values()),
            tool_calls=int(state.get("tool_calls") or 0),
            usage_by_stage=usage,
        )
        return {"result": result, "messages": [AIMessage(answer)], "timings_ms": {"finalize": timings["finalize"]}}

    # -- assembly ---------------------------------------------------------------------------
    def compile(self, **compile_kwargs: Any) -> CompiledStateGraph[Any, Any, Any, Any]:
        graph: StateGraph[Any, Any, Any, Any] = StateGraph(AgentState)
        nodes: dict[str, Callable[..., dict[str, Any]]] = {
            "link_entities": self.link_entities,
            "plan": self.plan,
            "act": self.act,
            "fallback": self.fallback,
            "expand": self.expand,
            "finalize": self.finalize,
        }
        for name, fn in nodes.items():
            graph.add_node(name, fn)
        graph.add_edge(START, "link_entities")
        graph.add_edge("link_entities", "plan")
        graph.add_edge("plan", "act")
        graph.add_conditional_edges("act", self.route_after_act, ["act", "fallback", "expand"])
        graph.add_edge("fallback", "expand")
        graph.add_edge("expand", "finalize")
        graph.add_edge("finalize", END)
        return graph.compile(name="skb-agent", **compile_kwargs)


def _answer_text(question: str, items: Sequence[ContextItem]) -> str:
    if not items:
        return f'No nodes found for "{question}".'
    lines = [f"{item.rank}. {item.name} [{item.key}] ({item.label})" for item in items[:ANSWER_ITEMS]]
    return render_prompt("answer.md", question=question, items="\n".join(lines)).strip()
