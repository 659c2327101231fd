"""The Cypher lexer remembers recent queries' tokens (every query is read by several checks): a remembered
reading equals a fresh one, no caller can change another's, errors are raised every time, and the memory is
bounded (a count of queries, and only queries up to a length)."""

from __future__ import annotations

import pytest

from graphs.errors import CypherValidationError
from graphs.store import cypher_lexer
from graphs.store.cypher_lexer import tokenize


def test_a_remembered_reading_equals_a_fresh_one_and_is_not_shared() -> None:
    cypher = "MATCH (a:Thing {key: 'k\\'1'})-[:PART_OF]->(b) /* c */ RETURN b.name LIMIT 5"
    cypher_lexer._remembered.cache_clear()
    first = tokenize(cypher)
    first.append(first[0])  # a caller's list is its own
    again = tokenize(cypher)
    assert again == cypher_lexer._tokenize(cypher, True) and len(again) == len(first) - 1
    assert cypher_lexer._remembered.cache_info().hits == 1
    plain = "MATCH (a {key: 'a\\'b\\'c'}) RETURN a"
    assert tokenize(plain, backslash_escapes=False) == cypher_lexer._tokenize(plain, False)
    assert tokenize(plain, backslash_escapes=False) != tokenize(plain)  # the two readings are remembered apart


def test_errors_are_raised_each_time() -> None:
    for _ in range(2):
        with pytest.raises(CypherValidationError, match="unterminated string"):
            tokenize("MATCH (n) WHERE n.name = 'open RETURN n")


def test_the_memory_is_bounded() -> None:
    cypher_lexer._remembered.cache_clear()
    long = "RETURN " + " + ".join(["1"] * cypher_lexer.CACHE_QUERY_CHARS)
    assert len(tokenize(long)) == 2 * cypher_lexer.CACHE_QUERY_CHARS  # lexed, not remembered
    assert cypher_lexer._remembered.cache_info().currsize == 0
    for i in range(cypher_lexer.CACHE_QUERIES + 10):
        tokenize(f"RETURN {i}")
    assert cypher_lexer._remembered.cache_info().currsize == cypher_lexer.CACHE_QUERIES
