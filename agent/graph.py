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

import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import ContextThreadPoolExecutor
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from agent.config import AgentConfig
from agent.linking.entities import EntityLinker
from agent.planning.feedback import fed_back
from agent.planning.guided import (
    MAX_FINISH,
    GuidedCallError,
    RoundView,
    ranked_candidates,
    read_call,
    round_tools,
    round_view,
    state_block,
)
from agent.planning.llm import (
    Budget,
    BudgetSpentError,
    InvalidPlanError,
    PlannerCallError,
    Usage,
    check_tool_calls,
    invoke_with_retry,
    llm_plan,
    make_chat_model,
    visible_args,
)
from agent.planning.targets import predict_target_type, relation_paths
from agent.planning.walks import ranked_walks
from agent.results import AgentResult, ContextItem, Provenance, StageUsage
from agent.stages.refine import Next, constrain, next_stage, rerank_seeds
from agent.state import AgentInput, AgentOutput, AgentState, Candidate, SeedItem
from graphs.errors import ConfigError, PlannerError, SKBError
from graphs.sage.expand import expand as sage_expand
from graphs.skb.profile import profile_for
from graphs.text_safety import block_json, clean_text, neutralize_plan_tags, quoted
from prompts import load_prompt, render_prompt
from tools import make_tools
from tools.common import prefetch_query, schema_of
from tools.results import (
    CHARS_PER_TOKEN,
    TYPED_RESULTS,
    Finish,
    ToolError,
    estimate_tokens,
    parse_result,
    tool_error,
    tool_output,
)
from tools.results import ToolResult as ToolResultT

if TYPE_CHECKING:
    from langgraph.graph.state import CompiledStateGraph

    from graphs.bundle import IndexBundle
    from graphs.skb.model import GraphSchema

_T = TypeVar("_T")
_R = TypeVar("_R")

#: Tool-call arguments that size a result; clamped to ``per_call_k`` (K).
_SIZE_ARGS = {"semantic_search": "k", "search_nodes": "limit", "cypher": "max_rows"}
#: The nodes of one planner round (the ``act`` stage).
ACT_NODES = ("call_planner", "run_tools", "observe")
#: Timings that are parts of ``act`` (one planner round each), not stages of their own.
_SUB_STAGES = frozenset({"total", "call_planner", "run_tools", "observe"})
#: Context items the answer message lists.
ANSWER_ITEMS = 5

#: Tool error types that mean the graph store failed the call (recorded in ``degraded``), as opposed
#: to errors in the planner's input (unknown schema, syntax, too many rows) that it is told to fix.
STORE_FAILURES = frozenset({"store_unavailable", "store_error", "timeout", "internal"})


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
        _add_evidence(pool, item.key, item.label, item.score, prov, support=item.support, owned=owned)
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


# -- the graph --------------------------------------------------------------------------------
class AgentGraph:
    """Builds and holds what the nodes share: the bundle, tools, planner models, linker."""

    def __init__(self, bundle: IndexBundle, config: AgentConfig, chat_model: BaseChatModel | None = None) -> None:
        self.bundle = bundle
        planner = profile_for(bundle.skb).planner
        if "max_hops" not in config.model_fields_set and planner.relation_paths:
            # a graph planned by relation paths walks as deep as its profile says (written or induced); an
            # LLM's plan and the heuristic paths offered to it follow, unless the caller set max_hops
            config = config.model_copy(update={"max_hops": planner.max_hops})
        self.config = config
        self.chat_model = chat_model
        self._lock = threading.Lock()
        self._models: dict[Hashable, BaseChatModel] = {}
        self._linker: EntityLinker | None = None
        self._tools: dict[Hashable, dict[str, BaseTool]] = {}
        self._tool_texts: dict[int, str] = {}

    # -- shared resources ----------------------------------------------------------------
    def tools(self, cfg: AgentConfig, question: str) -> dict[str, BaseTool]:
        """The tools for these settings, built once and shared by every run (they are stateless: the
        question reaches them as an injected argument of each call). Rebuilding them per node cost
        more than a tool call, mostly in JSON-schema generation."""
        key = (cfg.cypher_timeout_ms, cfg.cypher_max_rows, cfg.tool_output_tokens, cfg.edge_weight_property)
        with self._lock:
            tools = self._tools.get(key)
            if tools is None:
                made = make_tools(
                    self.bundle,
                    cypher_timeout_ms=cfg.cypher_timeout_ms,
                    cypher_max_rows=cfg.cypher_max_rows,
                    budget_tokens=cfg.tool_output_tokens,
                    weight_property=cfg.edge_weight_property,
                )
                tools = self._tools[key] = {t.name: t for t in made}
        return tools

    def model(self, cfg: AgentConfig) -> BaseChatModel:
        if self.chat_model is not None:
            return self.chat_model
        key = (cfg.planner, cfg.model, cfg.base_url, cfg.temperature, cfg.llm_timeout_s)
        with self._lock:
            model = self._models.get(key)
            if model is None:
                model = self._models[key] = make_chat_model(cfg, self.bundle)
        return model

    def stage_model(self, cfg: AgentConfig) -> BaseChatModel:
        """The model the optional stages ask: the planner's, or with ``stage_llm="openai"`` the configured
        OpenAI-compatible model whichever planner plans (an injected chat model serves both)."""
        if self.chat_model is None and cfg.stage_llm == "openai":
            return self.model(cfg.model_copy(update={"planner": "openai"}))
        return self.model(cfg)

    def stage_counts_llm(self, cfg: AgentConfig) -> bool:
        """The stages have a real model to ask (``counts_llm`` for the planner's, or ``stage_llm="openai"``)."""
        return self.counts_llm(cfg) or cfg.stage_llm == "openai"

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

    def linker(self) -> EntityLinker:
        """The entity linker of the build being served: a rebuild gets a new one (the old one kept the
        replaced build's graph, and with it its mapped files, for as long as the process ran)."""
        skb = self.bundle.skb
        linker = self._linker
        if linker is None or linker.skb is not skb:
            with self._lock:
                linker = self._linker
                if linker is None or linker.skb is not skb:
                    linker = self._linker = EntityLinker(self.bundle)
        return linker

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
            "tool_output_tokens": 0,
            "pending_calls": [],
            "round_messages": [],
            "planner_offline": False,
            "started_at": time.time(),
            "budget_stop": None,
            "plan_report": None,
            "scratchpad": [RemoveMessage(id=REMOVE_ALL_MESSAGES)],
        }
        if not state.get("messages"):
            update["messages"] = [HumanMessage(question)]
        degraded: list[str] = []
        partial = self.bundle.missing_note()  # a staged index before its later stages: say what is missing
        if partial is not None:
            degraded.append(partial)
        if cfg.max_entities > 0:
            linked = self.linker().link(
                question, cfg.max_entities, clauses=cfg.clause_settings(), confidence_power=cfg.link_confidence_power
            )
            update["linked_entities"] = [_to_dict(e) for e in linked]
        update["degraded"] = degraded
        update["constraint_report"] = update["rerank_report"] = None  # a new question: no stale reports
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
        once = cfg.planner_mode == "plan-once"
        sources: list[str] = []
        search_text: str | None = None
        report: dict[str, Any] | None = None
        budget_stop: str | None = None
        if cfg.planner == "openai" and (cfg.planner_mode != "guided" or cfg.guided_llm_plan):
            budget = Budget.of(cfg, state.get("usage"), state.get("started_at"))
            try:
                preferred = ranked_walks(self.bundle, question, linked)  # the best walks, when too many to list
                outcome = llm_plan(self.model(cfg), question, schema, linked, cfg, usage, budget, once=once,
                                   preferred=preferred)
                target, paths, report = outcome.target_type, outcome.relation_paths, outcome.report
                sources, search_text = outcome.sources, outcome.search_text
                planned = True
            except BudgetSpentError as exc:
                # no model call fits the question's budget: nothing later can call the model either
                budget_stop, offline = exc.budget, True
                degraded.append(f"{exc}: used the heuristic plan and the offline planner")
            except InvalidPlanError as exc:
                report = exc.report
                degraded.append(f"LLM plan failed, used the heuristic plan: {exc}")
            except PlannerCallError as exc:
                if not self.can_degrade(cfg):
                    raise
                # the model could not be reached after retries: do not pay the retries again per round
                offline = True
                degraded.append(f"LLM plan failed, used the heuristic plan and the offline planner: {exc}")
            except PlannerError as exc:
                degraded.append(f"LLM plan failed, used the heuristic plan: {exc}")
        llm_paths = planned and bool(paths)
        if not planned:
            target, paths = self._heuristic_plan(question, linked, cfg)
        elif target is None or not paths:
            # a valid but partial LLM plan: what the model left open comes from the heuristic plan
            # (a model's target is kept; paths are predicted for it)
            guess, guessed_paths = self._heuristic_plan(question, linked, cfg, target=target)
            if report is not None:
                report["completed"] = [f for f, missing in (("target_type", target is None), ("relation_paths", not paths)) if missing]
            target, paths = target or guess, paths or guessed_paths
        plan: dict[str, Any] = {
            "question": question,
            "linked_entities": linked,
            "target_type": target,
            "relation_paths": paths,
            "k": cfg.k,
            "per_call_k": cfg.per_call_k,
            "max_rounds": cfg.max_rounds,
            "semantic_net": cfg.semantic_net,
            "scoring": cfg.scoring_overrides(),
        }
        if once:
            # plan-once (SPARK): the plan and its tool arguments came from one model call; the offline
            # planner is the deterministic executor that walks it (its paths, sources and search text)
            offline = True
            if planned:
                # walk the model's own paths when it gave some; else the executor predicts them
                plan.update({"sources": sources, "search_text": search_text, "walk_plan_paths": llm_paths})
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
            "plan_report": report,
            "timings_ms": {"plan": _elapsed_ms(start)},
        }
        if budget_stop:
            update["budget_stop"] = budget_stop
        if usage.llm_calls and self.counts_llm(cfg):
            update["usage"] = {"plan": usage.as_dict()}
        return update

    def _heuristic_plan(
        self, question: str, linked: Sequence[Mapping[str, Any]], cfg: AgentConfig, target: str | None = None
    ) -> tuple[str | None, list[list[dict[str, Any]]]]:
        """Target type from the wording (unless given) and the schema's relation paths to it."""
        schema = schema_of(self.bundle)
        target = target or predict_target_type(question, schema) or self._default_answer_label(schema)
        if target is None:
            return None, []
        sources = list(dict.fromkeys(str(e["label"]) for e in linked if e.get("label") != target))
        if not sources:
            return target, []
        raw = relation_paths(schema, sources, target, max_hops=cfg.max_hops)
        return target, [[_to_dict(step) for step in path] for path in raw]

    def _default_answer_label(self, schema: GraphSchema) -> str | None:
        """The profile's answer type for questions that name none, when this SKB has that label."""
        label = profile_for(self.bundle.skb).planner.default_answer_label
        return label if label is not None and label in schema.label_names() else None

    def _tool_text(self, cfg: AgentConfig, question: str) -> str:
        tools = self.tools(cfg, question)
        text = self._tool_texts.get(id(tools))
        if text is None:
            lines = []
            for tool in tools.values():
                params = visible_args(tool)
                lines.append(f"- {tool.name}({', '.join(params)}): {tool.description}")
            text = self._tool_texts[id(tools)] = "\n".join(lines)
        return text

    # -- the act loop: call_planner -> run_tools -> observe -> (call_planner | fallback | expand) ------
    def call_planner(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        """One planner turn: the model's tool calls, validated against the tools and clamped to K."""
        start = time.perf_counter()
        cfg = settings(self.config, config)
        tools = self.tools(cfg, state["question"])
        usage = Usage()
        degraded: list[str] = []
        offline = bool(state.get("planner_offline"))
        scratchpad = state.get("scratchpad") or []
        if not state.get("step"):
            self._prefetch_question_vector(cfg, state["question"], offline, scratchpad)
        if not offline and cfg.planner_mode == "guided":
            return self._guided_round(state, cfg, start)
        reply: AIMessage | None = None
        budget_stop: str | None = None
        if not offline and not self.counts_llm(cfg):
            # the offline planner is a chat model by interface only: no prompt goes anywhere, so none is
            # counted against a budget (counting one cost more than the planner's own work)
            reply = invoke_with_retry(self.model(cfg).bind_tools(list(tools.values())), scratchpad, cfg)
        elif not offline:
            bound: Runnable[LanguageModelInput, BaseMessage] = self.model(cfg).bind_tools(list(tools.values()))
            budget = Budget.of(cfg, state.get("usage"), state.get("started_at"))
            try:
                reply = budget.call(bound, scratchpad, cfg, usage)
            except BudgetSpentError as exc:
                budget_stop, offline = exc.budget, True
                if self.can_degrade(cfg):
                    degraded.append(f"{exc}: continued with the offline planner")
                else:  # stop calling the model; the round ends with what the pool holds (or the fallback)
                    degraded.append(f"{exc}: stopped planning")
                    reply = AIMessage(content="")
            except PlannerError as exc:
                if not self.can_degrade(cfg):
                    raise
                offline = True
                degraded.append(f"planner model failed, continued with the offline planner: {exc}")
        if reply is None:
            reply = invoke_with_retry(self.offline_model(cfg), scratchpad, cfg)
        checked = check_tool_calls(reply, tools)
        step = int(state.get("step") or 0) + (1 if checked.valid else 0)
        pending = _clamped(checked.valid, cfg, step)
        update: dict[str, Any] = {
            # what the model wrote goes back into every later prompt: cut to a tool result's budget
            "scratchpad": [reply if offline else fed_back(reply, cfg.tool_output_tokens, cfg.model)],
            "pending_calls": pending,
            "round_messages": list(checked.errors),
            "step": step,
            "planner_offline": offline,
            "degraded": degraded,
            "timings_ms": _add_time(state, "call_planner", start),
        }
        if budget_stop:
            update["budget_stop"] = budget_stop
        if self.counts_llm(cfg) and usage.llm_calls:
            previous = (state.get("usage") or {}).get("act") or {}
            update["usage"] = {"act": {k: int(previous.get(k, 0)) + v for k, v in usage.as_dict().items()}}
        return update

    def _guided_round(self, state: AgentState, cfg: AgentConfig, start: float) -> dict[str, Any]:
        """One guided round (``planner_mode="guided"``, ``agent.planning.guided``): the offline planner's next
        actions become a menu, the round's tool schemas offer only what exists, and the model sees a bounded
        state block, never the message history. A call that names something not offered is repaired up to
        ``guided_repairs`` times (the error goes into the next state block); after that, or when the model
        cannot be reached, the menu's first option runs (noted in ``degraded``)."""
        question = state["question"]
        tools = self.tools(cfg, question)
        scratchpad = state.get("scratchpad") or []
        schema = schema_of(self.bundle)
        linked = state.get("linked_entities") or []
        pool = state.get("candidates") or {}
        target = state.get("target_type")
        proposal = check_tool_calls(invoke_with_retry(self.offline_model(cfg), scratchpad, cfg), tools).valid
        view = round_view(schema, linked, pool, target, proposal)
        names = self._names(view, linked)
        ranked = list(dict.fromkeys([*view.finish_keys, *ranked_candidates(pool, target)]))[:MAX_FINISH]
        candidates = [(k, str(pool[k].get("label", "")), names.get(k, ""), float(pool[k].get("score", 0.0))) for k in ranked]
        round_no = int(state.get("step") or 0) + 1
        system = load_prompt("guided_system.md")

        def block(error: str | None) -> str:
            text, shown = state_block(
                question=question, target=target, paths=[_path_text(p) for p in state.get("relation_paths") or []],
                linked=linked, history=state.get("observations") or [], candidates=candidates, view=view, names=names,
                round_no=round_no, max_rounds=cfg.max_rounds, budget_tokens=cfg.guided_state_tokens,
                model=cfg.model, error=error,
            )
            del view.menu[shown:]  # ``pick`` offers only the options the text shows
            return text

        first_text = block(None)
        menu_only = cfg.guided_tools == "menu"
        bound = self.model(cfg).bind_tools(round_tools(view, cfg.per_call_k, menu_only), tool_choice="required")
        budget = Budget.of(cfg, state.get("usage"), state.get("started_at"))
        usage, degraded = Usage(), []
        error: str | None = None
        calls: list[dict[str, Any]] | None = None
        budget_stop: str | None = None
        offline = False
        row: dict[str, Any] = {"round": round_no, "attempts": 0, "valid_first_try": False, "valid": False,
                               "view": view.to_json(), "estimated_prompt_tokens": [], "prompt_tokens": []}
        for _ in range(1 + cfg.guided_repairs):
            text = first_text if error is None else block(error)
            messages = [SystemMessage(system), HumanMessage(text)]
            before = usage.estimated_prompt_tokens
            try:
                reply = budget.call(bound, messages, cfg, usage)
            except BudgetSpentError as exc:
                budget_stop, offline = exc.budget, True
                degraded.append(f"{exc}: " + ("continued with the offline planner" if self.can_degrade(cfg) else "stopped planning"))
                calls = None if self.can_degrade(cfg) else []
                break
            except PlannerError as exc:
                if not self.can_degrade(cfg):
                    raise
                offline = True
                degraded.append(f"planner model failed, continued with the offline planner: {exc}")
                break
            row["attempts"] += 1
            row["estimated_prompt_tokens"].append(usage.estimated_prompt_tokens - before)
            meta: Mapping[str, Any] = reply.usage_metadata or {}
            row["prompt_tokens"].append(int(meta.get("input_tokens", 0) or 0))
            try:
                if not reply.tool_calls:
                    raise GuidedCallError("no tool call in the reply; call exactly one of the tools")
                calls = read_call(reply.tool_calls[0], view, cfg.per_call_k, menu_only)
            except GuidedCallError as exc:
                error = str(exc)
                row.setdefault("errors", []).append(error)
                continue
            row["valid"] = True
            row["valid_first_try"] = row["attempts"] == 1
            first = reply.tool_calls[0]
            row["choice"] = f"pick:{first['args'].get('option')}" if first["name"] == "pick" else first["name"]
            break
        if calls is None:
            calls = [{"name": c["name"], "args": dict(c.get("args") or {}), "id": c.get("id")} for c in proposal]
            if not offline:
                degraded.append(f"guided round {round_no}: no valid call after {row['attempts']} attempt(s); ran the "
                                "offline planner's next action")
        step = int(state.get("step") or 0) + (1 if calls else 0)
        pending = _clamped(calls, cfg, step)
        executed = AIMessage(content="", tool_calls=[{"name": c["name"], "args": c["args"], "id": c["id"]} for c in pending])
        update: dict[str, Any] = {
            "scratchpad": [executed],
            "pending_calls": pending,
            "round_messages": [],
            "step": step,
            "planner_offline": offline,
            "degraded": degraded,
            "guided_rounds": [row] if row["attempts"] else [],
            "timings_ms": _add_time(state, "call_planner", start),
        }
        if budget_stop:
            update["budget_stop"] = budget_stop
        if usage.llm_calls:
            previous = (state.get("usage") or {}).get("act") or {}
            update["usage"] = {"act": {k: int(previous.get(k, 0)) + v for k, v in usage.as_dict().items()}}
        return update

    def _names(self, view: RoundView, linked: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """Display names of the keys a round shows (graph text: shown quoted by the state block)."""
        names = {str(e["key"]): str(e.get("name") or "") for e in linked if e.get("key")}
        wanted = {*view.keys, *view.finish_keys}
        for option in view.menu:
            for call in option:
                wanted.update(str(k) for k in (call.get("args") or {}).get("keys") or [])
        for key in wanted - set(names):
            node = self.bundle.node(key)
            if node is not None:
                names[key] = node.name
        return names

    def _prefetch_question_vector(
        self, cfg: AgentConfig, question: str, offline: bool, scratchpad: Sequence[BaseMessage]
    ) -> None:
        """Start embedding the question on the tool pool when the planner says its first round will
        need the vector (``wants_question_vector``): the forward pass then overlaps the planner's turn
        instead of leading the first tool round. A planner without the hook gets no prefetch."""
        model = self.offline_model(cfg) if offline else self.model(cfg)
        wants = getattr(model, "wants_question_vector", None)
        if callable(wants) and wants(scratchpad):
            prefetch_query(self.bundle, question, _shared_pool())

    def run_tools(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        """Run the round's calls concurrently (they are independent by construction: one model turn),
        at most ``max_parallel_tools`` at a time. Results keep the call order; every tool run is traced
        under this node (see ``run_concurrently``)."""
        start = time.perf_counter()
        cfg = settings(self.config, config)
        question = state["question"]
        step = int(state.get("step") or 0)
        tools = self.tools(cfg, question)
        calls = state.get("pending_calls") or []

        def run_one(call: Mapping[str, Any]) -> tuple[ToolMessage, str | None]:
            name, call_id = str(call["name"]), str(call["id"])
            run_args = {**call["args"], "step": step, "question": question}
            try:
                message = tools[name].invoke({"type": "tool_call", "id": call_id, "name": name, "args": run_args})
            except Exception as exc:  # noqa: BLE001 - one failing call must not end the run; it is reported
                detail = str(exc) if isinstance(exc, SKBError) else f"{type(exc).__name__}: {exc}"
                error = tool_error(name, step, str(call["args"]), "tool_failed", detail, "try another tool")
                text, _ = tool_output(error, cfg.tool_output_tokens)
                failed = ToolMessage(content=text, artifact=error, tool_call_id=call_id, name=name, status="error")
                return failed, f"tool {name} failed: {detail}"
            if not isinstance(message, ToolMessage):
                message = ToolMessage(content=str(message), tool_call_id=call_id, name=name)
            return _budgeted(message, name, cfg.tool_output_tokens), None

        outcomes = run_concurrently(run_one, calls, cfg.max_parallel_tools)
        messages = [m for m, _ in outcomes]
        return {
            "round_messages": [*messages, *(state.get("round_messages") or [])],
            "degraded": [d for _, d in outcomes if d],
            "timings_ms": _add_time(state, "run_tools", start),
        }

    def observe(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        """Fold the round's results into the candidate pool and decide whether the loop is done."""
        start = time.perf_counter()
        cfg = settings(self.config, config)
        pool: dict[str, Candidate] = dict(state.get("candidates") or {})  # entries copied on write
        owned: set[str] = set()
        calls = state.get("pending_calls") or []
        round_messages = list(state.get("round_messages") or [])
        results = {str(m.tool_call_id): m for m in round_messages if isinstance(m, ToolMessage)}
        step = int(state.get("step") or 0)
        finish = state.get("finish")
        explicit = bool(state.get("used_explicit_relations"))
        degraded: list[str] = []
        observations: list[dict[str, Any]] = []
        tokens = 0
        for call in calls:
            message = results.get(str(call["id"]))
            if message is None:
                continue
            name = str(call["name"])
            tokens += estimate_tokens(str(message.content))
            result = parse_result(name, getattr(message, "artifact", None) or message.content)
            if isinstance(result, ToolError) and result.error.type == "store_unavailable":
                degraded.append(f"tool {name}: graph store unavailable: {result.error.message}")
            elif isinstance(result, ToolError) and result.error.type in STORE_FAILURES:
                # the store failed the call (not the planner's input): the answer lacks what it would have found
                degraded.append(f"tool {name} failed ({result.error.type}): {result.error.message}")
            added = merge_observation(pool, result, self.bundle, owned)
            explicit = explicit or (result is not None and result.explicit_edges and added > 0)
            error = result.error.model_dump() if isinstance(result, ToolError) else None
            observations.append({"step": step, "tool": name, "args": call["args"], "nodes": added, "error": error})
            if isinstance(result, Finish):
                finish = result.model_dump(mode="json")
        rejected = [
            m for m in round_messages if isinstance(m, ToolMessage) and m.tool_call_id not in {c["id"] for c in calls}
        ]
        tokens += sum(estimate_tokens(str(m.content)) for m in rejected)
        repairs = int(state.get("repairs") or 0)
        done = finish is not None
        if rejected and not calls:
            repairs += 1
            if repairs > cfg.max_repairs:
                degraded.append(f"planner made invalid tool calls {repairs} rounds in a row; stopped after max_repairs")
                done = True
        elif not calls and not rejected:
            done = True  # the planner answered in text: nothing more to run
        if step >= cfg.max_rounds:
            done = True
        update: dict[str, Any] = {
            "scratchpad": round_messages,
            "candidates": pool,
            "observations": observations,
            "repairs": repairs,
            "done": done,
            "finish": finish,
            "used_explicit_relations": explicit,
            "tool_calls": int(state.get("tool_calls") or 0) + len(calls),
            "tool_output_tokens": int(state.get("tool_output_tokens") or 0) + tokens,
            "pending_calls": [],
            "round_messages": [],
            "degraded": degraded,
            "timings_ms": _add_time(state, "observe", start),
        }
        if done:
            update["seeds"] = select_seeds(pool, finish, state.get("target_type"), cfg.k)
        return update

    def route(
        self, state: AgentState, config: RunnableConfig
    ) -> Literal["call_planner", "fallback", "constrain", "rerank", "expand"]:
        if not state.get("done"):
            return "call_planner"
        cfg = settings(self.config, config)
        seeds = state.get("seeds") or []
        if not seeds or (cfg.fallback_fill and len(seeds) < cfg.k):
            return "fallback"
        return next_stage(cfg)

    def route_refine(self, state: AgentState, config: RunnableConfig) -> Next:
        """After the fallback: the optional constraint and rerank stages, then SAGE."""
        return next_stage(settings(self.config, config))

    def route_after_constraints(self, state: AgentState, config: RunnableConfig) -> Next:
        return next_stage(settings(self.config, config), after="constrain")

    def constrain(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        """AF-Retriever constraints with incremental scope expansion (``agent.stages.refine.constrain``)."""
        return constrain(self, state, config, settings(self.config, config))

    def rerank(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        """LLM reranking of the top seeds (``agent.stages.refine.rerank_seeds``)."""
        return rerank_seeds(self, state, config, settings(self.config, config))

    def fallback(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        start = time.perf_counter()
        cfg = settings(self.config, config)
        question = state["question"]
        label = state.get("target_type")
        degraded: list[str] = []
        try:
            hits = self.bundle.search(
                question, mode="hybrid", k=cfg.k, label=label, weight=cfg.hybrid_weight, fusion=cfg.fallback_fusion
            )
        except ConfigError as exc:  # a predicted type the index does not know: search all types
            degraded.append(f"fallback search without type filter: {exc}")
            hits = self.bundle.search(
                question, mode="hybrid", k=cfg.k, weight=cfg.hybrid_weight, fusion=cfg.fallback_fusion
            )
        seeds = list(state.get("seeds") or [])
        have = {s["key"] for s in seeds}
        floor = seeds[-1]["score"] if seeds else float("inf")
        tool = "hybrid_search" if cfg.fallback_fusion == "minmax" else f"hybrid_search:{cfg.fallback_fusion}"
        prov = {"tool": tool, "step": int(state.get("step") or 0), "query": question}
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
        ranked = sage_expand(
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
        notes = _shortfall_notes(settings(self.config, config), state)
        timings = dict(state.get("timings_ms") or {})
        timings["finalize"] = _elapsed_ms(start)
        timings["total"] = round(sum(v for k, v in timings.items() if k not in _SUB_STAGES), 3)
        usage = {stage: StageUsage(**u) for stage, u in (state.get("usage") or {}).items()}
        result = AgentResult(
            question=question,
            answer=answer,
            context=items,
            target_type=state.get("target_type"),
            relation_paths=[[_path_text([s]) for s in p] for p in state.get("relation_paths") or []],
            path_scores=_path_scores(state.get("scratchpad") or []),
            steps=step,
            used_explicit_relations=bool(state.get("used_explicit_relations")),
            fallback_used=bool(state.get("fallback_used")),
            degraded=list(state.get("degraded") or []),
            notes=notes,
            constraints=state.get("constraint_report"),
            rerank=state.get("rerank_report"),
            timings_ms=timings,
            llm_calls=sum(u.llm_calls for u in usage.values()),
            prompt_tokens=sum(u.prompt_tokens for u in usage.values()),
            completion_tokens=sum(u.completion_tokens for u in usage.values()),
            tool_calls=int(state.get("tool_calls") or 0),
            tool_output_tokens=int(state.get("tool_output_tokens") or 0),
            usage_by_stage=usage,
            stopped_by_budget=state.get("budget_stop"),  # type: ignore[arg-type]  # one of BUDGET_NAMES
            plan=state.get("plan_report"),
            guided=state.get("guided_rounds") or None,
        )
        return {"result": result, "messages": [AIMessage(answer)], "timings_ms": {"finalize": timings["finalize"]}}

    # -- assembly ---------------------------------------------------------------------------
    def compile(self, **compile_kwargs: Any) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The state machine; input, output and config schemas let LangGraph Studio show the knobs."""
        # AgentConfig as the context schema: LangGraph Studio lists its fields (with defaults and
        # descriptions) as the assistant's configurable knobs; nodes read them from ``configurable``.
        graph: StateGraph[Any, Any, Any, Any] = StateGraph(
            AgentState, context_schema=AgentConfig, input_schema=AgentInput, output_schema=AgentOutput
        )
        nodes: dict[str, Callable[..., dict[str, Any]]] = {
            "link_entities": self.link_entities,
            "plan": self.plan,
            "call_planner": self.call_planner,
            "run_tools": self.run_tools,
            "observe": self.observe,
            "fallback": self.fallback,
            "constrain": self.constrain,
            "rerank": self.rerank,
            "expand": self.expand,
            "finalize": self.finalize,
        }
        for name, fn in nodes.items():
            # one planner round is three nodes; traces and usage count them as the ``act`` stage
            # the constrain node's LLM calls count as stage ``constraints`` (AgentResult.usage_by_stage)
            metadata = {"stage": "act"} if name in ACT_NODES else {"stage": "constraints"} if name == "constrain" else None
            graph.add_node(name, fn, metadata=metadata)
        graph.add_edge(START, "link_entities")
        graph.add_edge("link_entities", "plan")
        graph.add_edge("plan", "call_planner")
        graph.add_edge("call_planner", "run_tools")
        graph.add_edge("run_tools", "observe")
        graph.add_conditional_edges(
            "observe", self.route, ["call_planner", "fallback", "constrain", "rerank", "expand"]
        )
        graph.add_conditional_edges("fallback", self.route_refine, ["constrain", "rerank", "expand"])
        graph.add_conditional_edges("constrain", self.route_after_constraints, ["rerank", "expand"])
        graph.add_edge("rerank", "expand")
        graph.add_edge("expand", "finalize")
        graph.add_edge("finalize", END)
        return graph.compile(name="skb-agent", **compile_kwargs)


def _add_time(state: AgentState, stage: str, start: float) -> dict[str, float]:
    """The stage's accumulated time (the act loop's nodes run once per round) plus the ``act`` total."""
    timings = state.get("timings_ms") or {}
    elapsed = _elapsed_ms(start)
    return {
        stage: round(float(timings.get(stage, 0.0)) + elapsed, 3),
        "act": round(float(timings.get("act", 0.0)) + elapsed, 3),
    }


#: Threads shared by every run's tool calls (a round holds at most ``max_parallel_tools`` of them).
TOOL_THREADS = 32
_tool_pool: ContextThreadPoolExecutor | None = None
_tool_pool_lock = threading.Lock()


def _shared_pool() -> ContextThreadPoolExecutor:
    global _tool_pool
    with _tool_pool_lock:
        if _tool_pool is None:
            _tool_pool = ContextThreadPoolExecutor(max_workers=TOOL_THREADS, thread_name_prefix="skb-tool")
        return _tool_pool


def run_concurrently(fn: Callable[[_T], _R], items: Sequence[_T], limit: int) -> list[_R]:
    """``[fn(x) for x in items]`` with at most ``limit`` running at once; results in item order.

    Why this shape: ``limit - 1`` workers from a process-wide pool plus the calling thread pull items
    from one queue. A pool per round started its threads every round (a measurable share of a
    round's time on a busy machine); the calling thread doing its share saves a hand-off and keeps the
    round moving even when the shared pool is busy with other questions' calls. The pool copies the
    caller's context into its workers, so tool runs are traced under the calling node.
    """
    if len(items) <= 1 or limit <= 1:
        return [fn(x) for x in items]
    results: list[_R | None] = [None] * len(items)
    queue = iter(range(len(items)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                i = next(queue, None)
            if i is None:
                return
            results[i] = fn(items[i])

    futures = [_shared_pool().submit(work) for _ in range(min(limit, len(items)) - 1)]
    work()
    for future in futures:
        if not future.cancel():  # a worker that never started has nothing left to do
            future.result()
    return results  # type: ignore[return-value]  # every slot was filled: the queue was drained


def _clamped(calls: Sequence[Mapping[str, Any]], cfg: AgentConfig, step: int) -> list[dict[str, Any]]:
    """The calls to run, ids given, sizes clamped: K results per call; search_nodes gets K per expanded key
    (it aggregates many keys in one call)."""
    pending: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        name = str(call["name"])
        args = dict(call.get("args") or {})
        size_arg = _SIZE_ARGS.get(name)
        if size_arg is not None:
            per = (len(args.get("keys") or []) or 1) if name == "search_nodes" else 1
            args[size_arg] = min(int(args.get(size_arg) or cfg.per_call_k), cfg.per_call_k * per)
        pending.append({"name": name, "id": call.get("id") or f"call_{step}_{i}", "args": args})
    return pending


def _budgeted(message: ToolMessage, name: str, budget_tokens: int) -> ToolMessage:
    """The tool message with a typed artifact and model text within the budget, whatever the tool returned
    (a tool that answers with a JSON dict or an over-long text gets its text re-rendered from the typed
    result). A typed artifact whose text fits is passed through: our tools render it with this budget."""
    artifact = getattr(message, "artifact", None)
    if isinstance(artifact, TYPED_RESULTS) and estimate_tokens(str(message.content)) <= budget_tokens:
        return message
    result = parse_result(name, artifact if artifact is not None else message.content)
    if result is None:
        text = str(message.content)
        if estimate_tokens(text) > budget_tokens:
            limit = budget_tokens * CHARS_PER_TOKEN
            while limit > 1 and estimate_tokens(text[: limit - 1] + "\u2026") > budget_tokens:
                limit = limit * 3 // 4  # dense text (JSON, keys) has fewer characters per token
            message = message.model_copy(update={"content": text[: limit - 1] + "\u2026"})
        return message
    text = result.model_text(budget_tokens)
    if text == message.content and artifact is result:
        return message
    return message.model_copy(update={"content": clean_text(text), "artifact": result})


def _path_scores(messages: Sequence[Any]) -> dict[str, Any] | None:
    """The path planner's scored candidates, carried by the planner message that walked them (the last)."""
    for message in reversed(messages):
        found = getattr(message, "additional_kwargs", {}).get("path_scores")
        if isinstance(found, dict):
            return found
    return None


def _shortfall_notes(cfg: AgentConfig, state: AgentState) -> list[str]:
    """Say why fewer than k seeds or k' expansions came back, instead of a silently short list."""
    notes: list[str] = []
    seeds = len(state.get("seeds") or [])
    if seeds < cfg.k:
        how = (
            "raise per_call_k (K, results per tool call) or max_rounds"
            if cfg.fallback_fill
            else "set fallback_fill=true to top up with hybrid search, or raise per_call_k (K, results per tool call)"
        )
        notes.append(
            f"k={cfg.k} seed nodes asked, {seeds} found: the planner's tool calls return at most "
            f"per_call_k={cfg.per_call_k} results each and found no more candidates; {how}"
        )
    expanded = len(state.get("expanded") or [])
    skipped = cfg.policy == "never" or (
        cfg.policy == "skip-when-explicit-edges" and bool(state.get("used_explicit_relations"))
    )
    if cfg.k_prime > expanded and seeds and not skipped:  # a configured skip is not a shortfall
        notes.append(
            f"k'={cfg.k_prime} expansions asked, {expanded} added: the seeds have no more one-hop neighbours "
            "or similar nodes to add"
        )
    return notes


def _answer_text(question: str, items: Sequence[ContextItem]) -> str:
    if not items:
        return f'No nodes found for "{question}".'
    lines = [f"{item.rank}. {item.name} [{item.key}] ({item.label})" for item in items[:ANSWER_ITEMS]]
    return render_prompt("answer.md", question=question, items="\n".join(lines)).strip()
