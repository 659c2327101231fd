"""The agent's model plumbing, below planning and the stages: the chat-model client and its retries
(``client``), per-question budgets, usage and the call that falls back (``budget``), tool-call checks
(``toolcalls``) and structured output with near-JSON repair (``structured``). What a plan is lives in
``agent.planning``; this room knows nothing of plans.
"""
