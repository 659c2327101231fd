"""Word forms the planners compare (``graphs.skb.language``): singulars and roots, remembered within a bound."""

from __future__ import annotations

from graphs.skb.language import root, singular


def test_singular_and_root_forms() -> None:
    assert [singular(w) for w in ("Genres", "votes", "quickly", "Movies")] == ["genre", "vote", "quickly", "movie"]
    assert [root(w) for w in ("directed", "director", "genres")] == ["direct", "direct", "genre"]


def test_lookups_are_remembered_within_a_bound() -> None:
    singular.cache_clear()
    first = singular("Actors")
    assert singular("Actors") == first == "actor" and singular.cache_info().hits == 1
    assert singular.cache_info().maxsize == root.cache_info().maxsize == 1 << 16
