"""Which HNSW graphs an index holds, and with which parameters, by its size (no hnswlib needed to decide).

Why the global graph is not always built: it inserts every vector a second time, half of the HNSW stage, which is
most of a large build (a million generated nodes: about 500 of 1,000 CPU seconds), and half of its graph files and
of an update's insertions. It serves the walk of hybrid ranking alone (and searches past ``MERGE_LABELS_UP_TO``
labels), so ``wants_global_graph`` builds it where the build is small or the labels many; elsewhere every search
without a label is the merge of the label graphs, and an index of one label needs none (its one label graph holds
the same rows).

Why a large index builds with fewer candidates and searches with more: an element's insertion costs about its
``ef_construction``, and at a million nodes the HNSW stage is half of the build. Past ``LARGE_INDEX`` nodes
``sized_params`` builds with ``LARGE_EF_CONSTRUCTION`` (100, against 200) and searches with ``LARGE_EF`` (256,
against 128): on a million generated nodes that halves the HNSW stage's CPU seconds, and a search finds more of the
exact top 20 than the old pair did (node texts 0.880 against 0.866, questions 0.795 against 0.753) for about 1 ms
more when it merges the label graphs (``evals/reports/scale/LEAN_BUILD.md``). Smaller indexes keep the defaults,
and a config that sets either keeps it.
"""

from __future__ import annotations

from graphs.manifest import HNSWParams

#: A ``per_label`` search merges the label graphs' answers up to this many labels (each label is one more search:
#: 2.8x the global graph's time at 8 labels), and walks the global graph past it.
MERGE_LABELS_UP_TO = 16
#: Up to this many nodes an index with more than one label also builds the global graph (see the module docstring):
#: there its second insertion costs a build tens of CPU seconds (100k generated nodes: 53), and hybrid ranking's
#: walk stays 2.6-2.8x cheaper than the merge; past it the build cost grows to the largest part of the build.
GLOBAL_GRAPH_UP_TO = 200_000


def wants_global_graph(nodes: int, labels: int) -> bool:
    """Whether an index of ``nodes`` nodes in ``labels`` labels builds the global graph (``HNSWParams.global_graph``
    None): with many labels (the merge costs a search per label), or more than one label up to
    ``GLOBAL_GRAPH_UP_TO`` nodes."""
    return labels > MERGE_LABELS_UP_TO or (labels > 1 and nodes <= GLOBAL_GRAPH_UP_TO)


#: Past this many nodes an index builds and searches its graphs with ``LARGE_EF_CONSTRUCTION`` and ``LARGE_EF``.
LARGE_INDEX = 200_000
LARGE_EF_CONSTRUCTION = 100
LARGE_EF = 256


def sized_params(nodes: int, *, M: int, ef_construction: int | None, ef: int | None,
                 global_graph: bool | None = None, mapped: bool = False) -> HNSWParams:
    """The parameters an index of ``nodes`` nodes is built with: ``ef_construction`` and ``ef`` as given, and where
    None, the defaults for its size (see the module docstring)."""
    large = nodes > LARGE_INDEX
    default = HNSWParams()
    return HNSWParams(
        M=M,
        ef_construction=ef_construction or (LARGE_EF_CONSTRUCTION if large else default.ef_construction),
        ef=ef or (LARGE_EF if large else default.ef),
        global_graph=global_graph,
        mapped=mapped,
    )


def resolved_params(params: HNSWParams, nodes: int, labels: int) -> HNSWParams:
    """``params`` with ``global_graph`` decided (``wants_global_graph`` where it is None): what an unsharded build
    makes, and what its id table records."""
    if params.global_graph is not None:
        return params
    return params.model_copy(update={"global_graph": wants_global_graph(nodes, labels)})
