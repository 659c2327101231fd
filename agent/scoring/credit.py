"""What one annotation edge and one matched query term are worth: the edge's weight (from the domain
profile's edge property) and the credit of a match through a broader term.

Why apart from the model: both are per-edge and per-match rules that the model (``annotation_model``) and
its builder (``ontology.build_model``) share, and that a stored model's code digest covers.
"""

from __future__ import annotations

#: Annotation weight of an edge without a usable frequency property.
DEFAULT_EDGE_WEIGHT = 1.0


def edge_weight(props: dict[str, object], floor: float = 0.0, prop: str | None = None) -> float:
    """Annotation weight from the numeric edge property ``prop`` in [0, 1] (the domain profile's
    ``scoring.edge_weight_property``, e.g. HPO's ``freq``); 1.0 when absent or when ``prop`` is None."""
    if prop is None:
        return DEFAULT_EDGE_WEIGHT
    value = props.get(prop)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(floor, min(1.0, float(value)))
    return DEFAULT_EDGE_WEIGHT


def match_value(shared_ic: float, query_ic: float, power: float) -> float:
    """Credit of a query term matched through a common ancestor: ``IC(q) * (IC(c) / IC(q)) ** power``.

    ``shared_ic`` is IC(c) of the most informative term the query term q shares with an annotation
    (q itself when the target is annotated with q or a narrower term, then the credit is IC(q) whatever
    the power). Power 1 is Resnik's IC(c). Why a power above 1: Resnik credits a match through a broad
    ancestor with that ancestor's IC in full, and with every feature of a question a little of that
    credit reaches every target annotated anywhere under the same broad branches. A target with many
    annotations collects it from most features and can outrank the target that carries the features
    themselves, most of all when features are linked from paraphrases, as neighbours of the right term
    (measured on the paraphrase benchmark: evals report ``paraphrased-clauses.md``). A power above 1
    keeps a near match (the sibling's parent, almost as informative as the term) close to full credit
    and shrinks a far one (a broad category) towards zero.
    """
    if power == 1.0 or shared_ic <= 0.0 or query_ic <= 0.0 or shared_ic >= query_ic:
        return shared_ic
    return query_ic * (shared_ic / query_ic) ** power
