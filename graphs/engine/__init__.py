"""Build engines: where the stages of an index build that grow with the graph run.

``local`` (the default) runs them in the build process, as they always ran; ``ray`` runs them as Ray work
(``graphs.engine.ray_engine``, imported only when chosen): embedding with Ray Data over an actor pool, the
HNSW index as shards built in parallel tasks, the similarity kNN over sharded graphs, BM25 tokenised in
parallel tasks with its statistics computed once over the merged corpus. The stages themselves are plain
functions over partitions (``graphs.engine.stages``) that run the same way in both engines.
"""

from graphs.engine.local import BuildEngine, LocalEngine

__all__ = ["BuildEngine", "LocalEngine", "open_engine"]


def open_engine(name: str, *, address: str | None = None, shards: int | None = None) -> BuildEngine:
    """The engine called ``name`` (``local`` | ``ray``); ``address`` and ``shards`` as `RayEngine` takes them."""
    from graphs.errors import ConfigError

    if name == "local":
        if address is not None:
            raise ConfigError("--ray-address applies to --engine ray only; drop it or add --engine ray")
        return LocalEngine(shards=shards or 1)
    if name == "ray":
        from graphs.engine.ray_engine import RayEngine

        return RayEngine(address=address, shards=shards)
    raise ConfigError(f"unknown --engine {name!r}; use local or ray")
