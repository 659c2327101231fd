"""Static resource bounds on a Cypher query and its parameters: parse cost, list and string growth,
parameter values a server would not see as sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from graphs.errors import CypherValidationError, ParameterValueError, QueryTooComplexError
from graphs.store.cypher_arithmetic import INT64_MAX, INT64_MIN, Number, fold
from graphs.store.cypher_lexer import Token, _context, _is_name_position, tokenize

# Why static bounds: FalkorDB's Cypher parser backtracks, so parse time doubles with every
# level of expression nesting (brackets, CASE, prefix -, + and NOT), and parsing happens before
# the per-query timeout starts; `RETURN` + 22 minus signs + `1` parsed for 7 s. Likewise
# range() and string concatenation inside one expression are materialised in full before the
# server's per-query memory check runs (range(1, 5e7) reached 785 MB under a 256 MiB cap).
# Measured on this project's FalkorDB (see the README safety section): depth 12 parses in
# about 10-150 ms, depth 16 in 0.3-1 s, depth 18 in 1-2 s.

MAX_QUERY_CHARS = 10_000
"""Longest query text the store accepts (the cypher tool's own argument limit is lower)."""

MAX_EXPRESSION_DEPTH = 12
"""Deepest nesting of brackets ( [ {, CASE ... END and prefix operators (-, +, NOT) in one expression."""

MAX_PARSE_COST = 2**15
"""Bound on the estimated parse cost: the sum over tokens of 2**(nesting depth at the token).
One depth-12 chain costs about 2**13; a flat 4,000-character query a few thousand. It stops
many moderately deep sub-expressions in one query (300 copies of a depth-11 chain parsed for 10 s)."""

MAX_RANGE_ELEMENTS = 100_000
"""Most elements one range() call may produce (100,000 integers are about 1.6 MB on the server)."""

MAX_RANGE_TOTAL = 1_000_000
"""Most elements all range() calls of one query may produce together. Ranges cannot multiply
inside one expression because nested iteration is refused; UNWIND range() x UNWIND range()
multiplies rows, which stream and are bounded by the server timeout."""

MAX_PARAM_DEPTH = 32
"""Deepest nesting of lists and maps in a query parameter value."""


_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {")", "]", "}"}
_BINARY_PUNCT = frozenset(
    {",", "=", "<>", "<", ">", "<=", ">=", "+", "-", "*", "/", "%", "^", "=~", "|", ":", "..", ";", "+="}
)
"""Tokens that end the operand of a prefix operator (when they are not prefix operators themselves)."""
_OPERAND_END_WORDS = frozenset(
    {
        "AND", "OR", "XOR", "IN", "IS", "CONTAINS", "STARTS", "ENDS", "AS", "WHERE", "RETURN", "WITH",
        "ORDER", "BY", "LIMIT", "SKIP", "UNION", "THEN", "ELSE", "WHEN", "END", "MATCH", "OPTIONAL",
        "UNWIND", "CALL", "YIELD", "DISTINCT", "ASC", "DESC", "ASCENDING", "DESCENDING",
    }
)  # fmt: skip


def _unary_position(prev: Token | None) -> bool:
    """True when a `-`/`+` after `prev` is a prefix operator (nothing to its left to add to)."""
    if prev is None:
        return True
    if prev.kind == "punct":
        return prev.text not in _CLOSERS
    return prev.kind == "word" and prev.text.upper() in (_OPERAND_END_WORDS | {"NOT"})


def _nesting(tokens: Sequence[Token]) -> tuple[int, int, Token | None]:
    """(max depth, estimated parse cost, token where the depth limit was first passed).

    A level is an open bracket, an open CASE, or a prefix operator whose operand has not ended;
    prefix levels end at the next binary operator, separator, keyword or closing bracket.
    Stops counting once the depth passes MAX_EXPRESSION_DEPTH (the answer is "too deep" anyway).
    """
    stack: list[str] = []
    deepest, cost = 0, 0
    prev: Token | None = None
    for idx, tok in enumerate(tokens):
        text = tok.text
        upper = text.upper() if tok.kind == "word" else ""
        name = tok.kind == "word" and _is_name_position(tokens, idx)
        prefix = (tok.kind == "punct" and text in ("-", "+") and _unary_position(prev)) or (upper == "NOT" and not name)
        ends_operand = (tok.kind == "punct" and (text in _BINARY_PUNCT or text in _CLOSERS)) or (
            upper in _OPERAND_END_WORDS and not name
        )
        if ends_operand and not prefix:
            while stack and stack[-1] == "prefix":
                stack.pop()
        cost += 2 ** len(stack)
        if tok.kind == "punct" and text in _OPENERS:
            stack.append(text)
        elif tok.kind == "punct" and text in _CLOSERS:
            if stack:
                stack.pop()
        elif upper == "CASE" and not name:
            stack.append("CASE")
        elif upper == "END" and not name and stack and stack[-1] == "CASE":
            stack.pop()
        elif prefix:
            stack.append("prefix")
        if len(stack) > deepest:
            deepest = len(stack)
            if deepest > MAX_EXPRESSION_DEPTH:
                return deepest, cost, tok
        prev = tok
    return deepest, cost, None


def _call_args(tokens: Sequence[Token], open_idx: int) -> tuple[list[list[Token]], int]:
    """Top-level comma-separated arguments of the call whose '(' is at open_idx; and the index after ')'."""
    args: list[list[Token]] = [[]]
    depth = 0
    j = open_idx + 1
    while j < len(tokens):
        tok = tokens[j]
        if tok.kind == "punct" and tok.text in _OPENERS:
            depth += 1
        elif tok.kind == "punct" and tok.text in _CLOSERS:
            if depth == 0:
                return (args if args != [[]] else []), j + 1
            depth -= 1
        elif depth == 0 and tok.kind == "punct" and tok.text == ",":
            args.append([])
            j += 1
            continue
        args[-1].append(tok)
        j += 1
    return (args if args != [[]] else []), j


def _constant(cypher: str, arg: Sequence[Token], params: Mapping[str, Any] | None) -> Number | None:
    """The value of a range() argument as the server computes it (Cypher's integer and float arithmetic, see
    `cypher_arithmetic`) when it is a constant expression of literals and numeric $parameters; None when it
    depends on data or is not a number."""
    if not arg or any(t.kind not in ("number", "punct", "word", "param") for t in arg):
        return None
    end = arg[-1].pos + len(arg[-1].text)
    return fold(cypher[arg[0].pos : end], params)


def _range_elements(cypher: str, args: Sequence[Sequence[Token]], params: Mapping[str, Any] | None) -> float | None:
    """How many elements range(start, end[, step]) builds on the server; None when a bound is not constant.

    Exact for integers (the server's bounds are 64-bit integers, so Python's integers count them without
    rounding). The server refuses a float bound ("expected Integer but was Float") and a zero step before
    it builds anything, so those count 0 -- unless the float would enumerate past a limit read as a number,
    which is refused as well: the count must never be below what a server could build.
    """
    if len(args) not in (2, 3):
        return None
    values = [_constant(cypher, a, params) for a in args]
    if any(v is None for v in values):
        return None
    start, end = values[0], values[1]
    step = values[2] if len(values) == 3 else 1
    assert start is not None and end is not None and step is not None
    if isinstance(start, int) and isinstance(end, int) and isinstance(step, int):
        return 0.0 if step == 0 else float(max(0, (end - start) // step + 1))
    if any(math.isnan(float(v)) for v in (start, end, step)) or step == 0:
        return 0.0
    if any(math.isinf(float(v)) for v in (start, end, step)):
        return math.inf
    return max(0.0, math.floor((float(end) - float(start)) / float(step)) + 1)


def _reduce_growth(tokens: Sequence[Token], open_idx: int) -> str | None:
    """The accumulator name when a reduce() body uses it twice as an operand (`s + s`, `[s, s]`),
    which doubles the value on every step; None otherwise."""
    args, _ = _call_args(tokens, open_idx)
    if not args:
        return None
    first = args[0]
    if not first or first[0].kind not in ("word", "qident"):
        return None
    acc = first[0].text
    body: list[Token] = []
    flat = [t for a in args for t in a]
    for k, tok in enumerate(flat):
        if tok.kind == "punct" and tok.text == "|":
            body = flat[k + 1 :]
            break
    operand_marks = {"+", "*", ",", "(", ")", "[", "]", "{", "}", ":"}
    uses = 0
    for k, tok in enumerate(body):
        if tok.kind not in ("word", "qident") or tok.text != acc:
            continue
        before = body[k - 1] if k > 0 else None
        after = body[k + 1] if k + 1 < len(body) else None
        if before is not None and before.kind == "punct" and before.text == ".":
            continue  # a property named like the accumulator
        near = [t.text for t in (before, after) if t is not None and t.kind == "punct"]
        if any(mark in operand_marks for mark in near) or after is None:
            uses += 1
    return acc if uses >= 2 else None


_ITERATING_FUNCTIONS = frozenset({"all", "any", "none", "single", "reduce", "filter", "extract"})


def _nested_iteration(tokens: Sequence[Token]) -> Token | None:
    """The first list iteration (`[x IN ...`, all/any/none/single/reduce(x IN ...)) that runs inside the
    body of another one, or None.

    Why: one expression is evaluated without the server's timeout or memory checks, which run
    between records only; `[x IN l | [y IN l | x + y]]` over 20,000 collected keys ran for over a
    minute and past 1.7 GB under a 5 s timeout and a 256 MiB cap. A single level is linear in data
    the query already holds; the source of an iteration (`[x IN [y IN l WHERE ...] | x]`) is not
    nested, only its WHERE/| body is.
    """
    stack: list[list[bool]] = []  # per open bracket: [is an iteration, its body has started]
    for idx, tok in enumerate(tokens):
        if tok.kind == "word" and tok.text.upper() == "WHERE" and stack and stack[-1][0]:
            stack[-1][1] = True
            continue
        if tok.kind != "punct":
            continue
        if tok.text in _OPENERS:
            prev = tokens[idx - 1] if idx > 0 else None
            var = tokens[idx + 1] if idx + 1 < len(tokens) else None
            kw = tokens[idx + 2] if idx + 2 < len(tokens) else None
            comprehension = (
                tok.text == "["
                and var is not None
                and var.kind in ("word", "qident")
                and kw is not None
                and kw.kind == "word"
                and kw.text.upper() == "IN"
            )
            function = (
                tok.text == "("
                and prev is not None
                and prev.kind == "word"
                and prev.text.lower() in _ITERATING_FUNCTIONS
                and not _is_name_position(tokens, idx - 1)
            )
            iterating = comprehension or function
            if iterating and any(is_iter and in_body for is_iter, in_body in stack):
                return tok
            stack.append([iterating, False])
        elif tok.text in _CLOSERS:
            if stack:
                stack.pop()
        elif tok.text == "|" and stack and stack[-1][0]:
            stack[-1][1] = True
    return None


def check_resources(cypher: str, params: Mapping[str, Any] | None = None) -> None:
    """Raise QueryTooComplexError when `cypher` could hold a server thread or its memory unbounded.

    Checks, in order: text length, expression nesting depth and estimated parse cost (see
    MAX_EXPRESSION_DEPTH, MAX_PARSE_COST), range() calls (their element counts must be constant
    and at most MAX_RANGE_ELEMENTS each, MAX_RANGE_TOTAL together), nested list iteration inside
    one expression, and reduce() bodies that double their accumulator.
    """
    if not isinstance(cypher, str):
        raise CypherValidationError(f"query must be a string, got {type(cypher).__name__}")
    if len(cypher) > MAX_QUERY_CHARS:
        raise QueryTooComplexError(
            f"query is {len(cypher)} characters; the limit is {MAX_QUERY_CHARS}: pass data as $parameters "
            "and split the question into smaller queries"
        )
    tokens = tokenize(cypher)
    depth, cost, where = _nesting(tokens)
    if where is not None:
        raise QueryTooComplexError(
            f"expression nesting deeper than {MAX_EXPRESSION_DEPTH} levels at offset {where.pos} "
            f"({_context(cypher, where.pos)!r}); brackets, CASE and prefix operators (-, +, NOT) each count a "
            "level and the server's parse time doubles with every level: flatten the expression "
            "(name intermediate values with WITH, drop redundant brackets and double negations)"
        )
    if cost > MAX_PARSE_COST:
        raise QueryTooComplexError(
            f"query is too expensive to parse (estimated cost {cost} > {MAX_PARSE_COST}: many nested "
            f"sub-expressions, deepest {depth} levels); split it into simpler queries or flatten the nesting"
        )
    nested = _nested_iteration(tokens)
    if nested is not None:
        raise QueryTooComplexError(
            f"nested list iteration at offset {nested.pos} ({_context(cypher, nested.pos)!r}): an iteration "
            "inside the WHERE/| body of another one runs within a single expression, where the server's "
            "timeout and memory cap do not apply; make the outer loop rows instead (UNWIND list AS x, "
            "then iterate once per row)"
        )
    total = 0.0
    for idx, tok in enumerate(tokens):
        if tok.kind != "word" or _is_name_position(tokens, idx):
            continue
        nxt = tokens[idx + 1] if idx + 1 < len(tokens) else None
        if nxt is None or nxt.kind != "punct" or nxt.text != "(":
            continue
        prev = tokens[idx - 1] if idx > 0 else None
        if prev is not None and prev.kind == "punct" and prev.text == ".":
            continue  # a namespaced function (string.join) is not range/reduce
        lowered = tok.text.lower()
        if lowered == "range":
            args, _ = _call_args(tokens, idx + 1)
            count = _range_elements(cypher, args, params)
            if count is None:
                raise QueryTooComplexError(
                    f"range() at offset {tok.pos} ({_context(cypher, tok.pos)!r}) has a bound that is not a "
                    "constant number (literals and numeric $parameters with + - * / % ^): the server builds the whole "
                    f"list before any memory check, so bounds must be known in advance (at most {MAX_RANGE_ELEMENTS} "
                    "elements); pass the bounds as $parameters or iterate over the list itself (UNWIND list AS x)"
                )
            total += count
            if count > MAX_RANGE_ELEMENTS or total > MAX_RANGE_TOTAL:
                raise QueryTooComplexError(
                    f"range() at offset {tok.pos} ({_context(cypher, tok.pos)!r}) produces {count:.3g} elements "
                    f"({total:.3g} for the query's ranges together); the limit is {MAX_RANGE_ELEMENTS} per "
                    f"range() and {MAX_RANGE_TOTAL} per query: use smaller bounds or filter with WHERE "
                    "instead of enumerating numbers"
                )
        elif lowered == "reduce":
            acc = _reduce_growth(tokens, idx + 1)
            if acc is not None:
                raise QueryTooComplexError(
                    f"reduce() at offset {tok.pos} uses its accumulator {acc!r} twice in one step "
                    f"({_context(cypher, tok.pos)!r}), which doubles the value each iteration and exhausts "
                    "memory; append a single element per step (acc + x) or use collect()"
                )


def _param_path(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    text = str(key)
    return f"{path}.{text}" if text.isidentifier() else f"{path}[{text[:40]!r}]"


def _int_text(value: int) -> str:
    """A big integer for a message: its first digits, or its size when it has too many for ``str()``."""
    if value.bit_length() > 10_000:
        return f"{'-' if value < 0 else ''}(a number of about {int(value.bit_length() * 0.30103)} digits)"
    text = str(value)
    return text[:30] + ("..." if len(text) > 30 else "")


def check_params(params: Mapping[str, Any] | None) -> None:
    """Raise ParameterValueError, naming the parameter path, for a value the server would not see as sent.

    FalkorDB silently clamps integers beyond 64 bits to INT64_MAX, reports NaN/Infinity as a
    syntax error in the query, and cuts strings at a NUL character; a very deep value made
    the Python client raise RecursionError. Each is refused here with the path of the value
    (``$keys[3]``, ``$filter.name``) so the caller can fix that value. Walks iteratively, so
    the depth bound itself cannot overflow the stack.
    """
    if params is None:
        return
    if not isinstance(params, Mapping):
        raise ParameterValueError(f"params must be a map of name -> value, got {type(params).__name__}")
    todo: list[tuple[str, Any, int]] = []
    for name, value in params.items():
        if not isinstance(name, str) or "\x00" in name:
            raise ParameterValueError(f"parameter name {name!r} must be a string without NUL characters")
        todo.append((f"${name}", value, 0))
    while todo:
        path, value, depth = todo.pop()
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                raise ParameterValueError(
                    f"parameter {path} = {_int_text(value)} does not fit in "
                    f"a signed 64-bit integer ({INT64_MIN} .. {INT64_MAX}); the server would silently change it: "
                    "pass a smaller number, or a string if it is an identifier"
                )
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ParameterValueError(
                    f"parameter {path} is {value!r}; NaN and infinite numbers (e.g. 1e999) cannot be sent: "
                    "pass a finite number or null"
                )
            continue
        if isinstance(value, str):
            if "\x00" in value:
                raise ParameterValueError(
                    f"parameter {path} contains a NUL character (U+0000) at position {value.index(chr(0))}; "
                    "the graph stores text without NUL, so remove it"
                )
            continue
        if isinstance(value, Mapping | list | tuple):
            if depth >= MAX_PARAM_DEPTH:
                raise ParameterValueError(
                    f"parameter {path} nests lists/maps deeper than {MAX_PARAM_DEPTH} levels; flatten the value"
                )
            if isinstance(value, Mapping):
                for key, item in value.items():
                    if not isinstance(key, str) or "\x00" in key:
                        raise ParameterValueError(
                            f"parameter {path} has the map key {str(key)[:40]!r}; map keys must be strings "
                            "without NUL characters"
                        )
                    todo.append((_param_path(path, key), item, depth + 1))
            else:
                todo.extend((_param_path(path, i), item, depth + 1) for i, item in enumerate(value))
            continue
        raise ParameterValueError(
            f"parameter {path} is a {type(value).__name__}; use strings, numbers, booleans, null, lists and maps"
        )
