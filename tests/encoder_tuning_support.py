"""A small tool-shop graph with its own jargon, for the encoder-tuning tests (no dataset vocabulary)."""

from __future__ import annotations

from typing import Any

from graphs.skb.model import SKB, Edge, Node, NodeType
from graphs.skb.profile import LabelSpec, LinkingSpec, Profile, RelationSpec

#: key -> (name, synonyms, definition): trade names a general encoder cannot read, explained by the graph.
TOOLS: dict[str, tuple[str, list[str], str]] = {
    "T_ROOT": ("hand tool", [], "A tool powered by hand rather than by a motor."),
    "T_SPUDGER": ("spudger", ["plastic pry tool"], "A non-conductive wedge used to separate snapped-together casings."),
    "T_FID": ("fid", ["rope splicing spike"], "A tapered cone used to open the strands of a rope when splicing."),
    "T_FROE": ("froe", ["riving knife"], "An L-shaped blade struck with a mallet to split wood along the grain."),
    "T_CATSPAW": ("cat's paw", ["nail puller"], "A small bar with a cupped claw for digging out embedded nails."),
    "T_DOZUKI": ("dozuki", ["japanese back saw"], "A thin pull saw stiffened by a spine, for fine joinery cuts."),
    "T_BRADAWL": ("bradawl", ["pilot hole awl"], "A pointed hand tool for starting screw holes in wood."),
    "T_HOLDFAST": ("holdfast", ["bench hook clamp"], "A hooked iron rod that wedges in a bench hole to pin work down."),
    "T_SPOKESHAVE": ("spokeshave", ["two-handled plane"], "A small plane for shaping curved wooden parts such as legs."),
    "T_NAILSET": ("nail set", ["nail punch"], "A short steel rod used to drive nail heads below the surface."),
    "T_JOBBER": ("jobber", ["general purpose twist drill"], "A drill bit of medium length for metal and wood."),
    "T_BENCHDOG": ("bench dog", ["workbench peg"], "A peg in a workbench top that holds a board against a vise."),
}
PARENT = {key: "T_ROOT" for key in TOOLS if key != "T_ROOT"}
SHOPS = {"S_NORTH": ["T_SPUDGER", "T_FID", "T_FROE"], "S_SOUTH": ["T_DOZUKI", "T_BRADAWL", "T_JOBBER"]}


def tool_shop_skb() -> SKB:
    skb = SKB("tool-shop")
    skb.profile = Profile(
        labels={"Tool": LabelSpec(words=["implement"]), "Shop": LabelSpec(words=["store", "retailer"])},
        relations={
            "STOCKS": RelationSpec(
                signature="Shop -> Tool", description="a store sells this implement", forward="sells {x}",
                aliases=["carries"],
            ),
            "KIND_OF": RelationSpec(signature="Tool -> Tool", description="a narrower kind of implement"),
        },
        linking=LinkingSpec(vocabulary_labels=["Tool"], definition_fields=["explanation"]),
    )
    skb.node_types["Tool"] = NodeType(label="Tool", name_field="title", synonym_field="also_called",
                                      text_fields=["title", "also_called", "explanation"])
    skb.node_types["Shop"] = NodeType(label="Shop", name_field="title", text_fields=["title"])
    for key, (name, synonyms, definition) in TOOLS.items():
        props: dict[str, Any] = {"title": name, "explanation": definition}
        if synonyms:
            props["also_called"] = synonyms
        skb.add_node(Node(key, "Tool", props))
    for key in SHOPS:
        skb.add_node(Node(key, "Shop", {"title": key.lower().replace("_", " ") + " branch"}))
    for child, parent in PARENT.items():
        skb.add_edge(Edge(child, "KIND_OF", parent))
    for shop, tools in SHOPS.items():
        for tool in tools:
            skb.add_edge(Edge(shop, "STOCKS", tool))
    return skb
