"""Small hand-made graphs shared by tests in several folders (labels and relations unlike any benchmark's).

Why one module: a test file importing another test file's helpers couples them (and a fixture imported that
way is collected under two names); the graphs live here, their index fixtures in ``tests/conftest.py``.
"""

from __future__ import annotations

from typing import Any

from graphs.skb.model import SKB, Edge, Node, NodeType
from graphs.skb.profile import LinkingSpec, Profile, ScoringSpec

# -- a tiny ontology, deliberately not HPO-named: Term/SUBCLASS_OF/ANNOTATED ------------------
#
#   R
#   |-- A --- A1, A2
#   '-- B --- B1
# Items: I1 {A1}, I2 {A2}, I3 {B1}, I4 {A1, B1 (freq 0.2)}
# Propagated counts over 4 items: R 4, A 3, B 2, A1 2, A2 1, B1 2
# IC = -ln(count / 4): R 0, A ln(4/3), B ln 2, A1 ln 2, A2 ln 4, B1 ln 2


def tiny_skb(reverse_hierarchy: bool = False) -> SKB:
    skb = SKB("tiny")
    # the edge-weight property is domain knowledge: it comes from the profile, not from code
    skb.profile = Profile(scoring=ScoringSpec(edge_weight_property="freq"))
    for key in ["R", "A", "B", "A1", "A2", "B1"]:
        skb.add_node(Node(key, "Term", {"name": f"term {key}"}))
    for key in ["I1", "I2", "I3", "I4"]:
        skb.add_node(Node(key, "Item", {"name": f"item {key}"}))
    for child, parent in [("A", "R"), ("B", "R"), ("A1", "A"), ("A2", "A"), ("B1", "B")]:
        if reverse_hierarchy:
            skb.add_edge(Edge(parent, "HAS_CHILD", child))
        else:
            skb.add_edge(Edge(child, "SUBCLASS_OF", parent))
    for item, term, props in [
        ("I1", "A1", {}),
        ("I2", "A2", {}),
        ("I3", "B1", {}),
        ("I4", "A1", {}),
        ("I4", "B1", {"freq": 0.2}),
    ]:
        skb.add_edge(Edge(item, "ANNOTATED", term, props))
    return skb


CATEGORIES = {
    "C_ROOT": ("home goods", [], ""),
    "C_APPL": ("appliance", ["household device"], "A machine used in the home to perform a domestic task."),
    "C_KETTLE": (
        "electric kettle",
        ["kettle"],
        "A household appliance that boils water using an electric heating element. It switches off when the water boils.",
    ),
    "C_TOASTER": ("toaster", [], "A small appliance that browns slices of bread by exposing them to radiant heat."),
    "C_BLENDER": ("blender", ["liquidiser"], "A kitchen appliance with rotating blades used to mix or puree food."),
    "C_VACUUM": ("vacuum cleaner", ["hoover"], "A device that removes dust and dirt from floors and carpets by suction."),
    "C_LAMP": ("desk lamp", [], "A light fixture placed on a table to illuminate a work surface."),
    "C_FAN": ("ceiling fan", [], "A fan mounted on the ceiling of a room whose rotating paddles circulate air."),
    "C_STEAM": ("steam cleaning machine", [], "A device that cleans surfaces with hot vapour."),
    "C_STEAM_PRO": ("professional steamer", [], "Steam cleaning machine built for commercial use."),
}
PARENT = {"C_APPL": "C_ROOT", "C_LAMP": "C_ROOT", "C_FAN": "C_APPL", "C_KETTLE": "C_APPL", "C_TOASTER": "C_APPL",
          "C_BLENDER": "C_APPL", "C_VACUUM": "C_APPL", "C_STEAM": "C_APPL", "C_STEAM_PRO": "C_STEAM"}
PRODUCTS = {"P_BREAKFAST": ["C_KETTLE", "C_TOASTER"], "P_KITCHEN": ["C_BLENDER", "C_KETTLE"],
            "P_CLEAN": ["C_VACUUM", "C_FAN"], "P_OFFICE": ["C_LAMP", "C_FAN"]}


def catalog_skb() -> SKB:
    skb = SKB("catalog")
    skb.profile = Profile(linking=LinkingSpec(vocabulary_labels=["Category"], definition_fields=["gloss"]))
    skb.node_types["Category"] = NodeType(label="Category", synonym_field="aka", text_fields=["name", "aka", "gloss"])
    skb.node_types["Product"] = NodeType(label="Product", text_fields=["name"])
    for key, (name, aka, gloss) in CATEGORIES.items():
        props: dict[str, Any] = {"name": name}
        if aka:
            props["aka"] = aka
        if gloss:
            props["gloss"] = gloss
        skb.add_node(Node(key, "Category", props))
    for key in PRODUCTS:
        skb.add_node(Node(key, "Product", {"name": key.lower().replace("_", " ")}))
    for child, parent in PARENT.items():
        skb.add_edge(Edge(child, "SUBCLASS_OF", parent))
    for product, cats in PRODUCTS.items():
        for cat in cats:
            skb.add_edge(Edge(product, "IN_CATEGORY", cat))
    return skb


RECIPES = {
    # key: (name, ingredients, cuisine, minutes)
    "R1": ("Lemon Pasta", ["Lemon", "Garlic", "Pasta"], "Italian", 20),
    "R2": ("Garlic Bread", ["Garlic", "Bread"], "Italian", 15),
    "R3": ("Lemon Chicken", ["Lemon", "Garlic", "Chicken"], "Greek", 45),
    "R4": ("Chicken Soup", ["Chicken", "Carrot"], "Greek", 60),
    "R5": ("Carrot Cake", ["Carrot", "Flour"], "American", 70),
    "R6": ("Garlic Prawns", ["Garlic", "Prawn"], "Spanish", 25),
}


def recipe_skb() -> SKB:
    skb = SKB(
        "recipes",
        node_types=[
            NodeType(label="Recipe", description="A dish", text_fields=["name", "minutes"]),
            NodeType(label="Ingredient", description="Something a recipe uses"),
            NodeType(label="Cuisine", description="A cooking tradition"),
        ],
    )
    ingredients = sorted({i for _, ings, _, _ in RECIPES.values() for i in ings})
    cuisines = sorted({c for _, _, c, _ in RECIPES.values()})
    for name in ingredients:
        skb.add_node(Node(f"I:{name}", "Ingredient", {"name": name}))
    for name in cuisines:
        skb.add_node(Node(f"C:{name}", "Cuisine", {"name": name}))
    for key, (name, ings, cuisine, minutes) in RECIPES.items():
        skb.add_node(Node(key, "Recipe", {"name": name, "minutes": minutes}))
        for ing in ings:
            skb.add_edge(Edge(key, "USES", f"I:{ing}"))
        skb.add_edge(Edge(key, "FROM_CUISINE", f"C:{cuisine}"))
    skb.validate()
    return skb


# -- an orchard: trees, birds and nests, with what differs between stores ---------------------------------


def orchard_skb() -> SKB:
    """Trees, Birds and Nests: birds nest in trees, trees shade trees, a tree shades itself (a self-loop),
    one bird nests twice in one tree (parallel edges), and keys sort differently by case and code point."""
    skb = SKB("orchard")
    trees = ["oak", "Oak-2", "élm", "ash", "Ash", "b1", "b10", "b2"]
    for key in trees:
        skb.add_node(Node(key, "Tree", {"name": f"tree {key}"}))
    birds = [f"w{i:02d}" for i in range(12)] + ["Zeta", "zeta", "ñu"]
    for key in birds:
        skb.add_node(Node(key, "Bird", {"name": f"bird {key}"}))
    skb.add_node(Node("n1", "Nest", {"name": "nest one"}))
    for i, bird in enumerate(birds):
        skb.add_edge(Edge(bird, "NESTS_IN", trees[i % 3]))
        skb.add_edge(Edge(bird, "VISITS", trees[(i + 1) % len(trees)]))
    skb.add_edge(Edge("w00", "NESTS_IN", "oak"))  # parallel edge
    skb.add_edge(Edge("oak", "SHADES", "Oak-2"))
    skb.add_edge(Edge("Oak-2", "SHADES", "oak"))
    skb.add_edge(Edge("oak", "SHADES", "oak"))  # self-loop
    skb.add_edge(Edge("élm", "SHADES", "ash"))
    skb.add_edge(Edge("n1", "BUILT_BY", "w01"))
    skb.add_edge(Edge("n1", "HANGS_FROM", "oak"))
    return skb
