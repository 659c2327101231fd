"""The agent graph's node bodies, by what they do: ``link`` (entity linking), ``plan`` (target type,
relation paths, the planner's prompt), ``act`` (one planner round: call, run tools, observe) with
``guided`` (the guided round) and ``pool`` (the candidate pool), and ``finish`` (fallback search,
SAGE expansion, the result). Each node is a function of the shared ``Runtime``, the state and the
call's ``RunnableConfig``; ``agent.graph`` wires them.
"""
