"""`skb profile induce` and `skb profile show`: the domain profile a graph gets, readable and editable.

Why: with no profile (or a partial one) ``skb index`` induces types, relation words and planner settings
from the data (``graphs.skb.induce``). A user should see what was induced, and be able to start a profile
of their own from it: ``induce`` writes it as TOML, ``show`` prints the profile an index uses with every
induced field marked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import typer

from graphs.errors import SKBError
from graphs.progress import terminal_text

profile_app = typer.Typer(help="Inspect and write domain profiles (induced from the data where not given).",
                          no_args_is_help=True)

_SECTION = re.compile(r"^\[(.+)\]\s*$")
_KEY = re.compile(r"^([A-Za-z0-9_\"'.-]+)\s*=")


def _fail(exc: SKBError) -> typer.Exit:
    typer.echo(terminal_text(f"error: {exc}"), err=True)
    return typer.Exit(code=2)


def _unquote(name: str) -> str:
    return ".".join(part.strip().strip('"').strip("'") for part in re.findall(r'"[^"]*"|\'[^\']*\'|[^.]+', name))


def _prune(value: Any) -> Any:
    """Drop empty and unset values (TOML has no null; an empty field says nothing)."""
    if isinstance(value, dict):
        pruned = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in pruned.items() if v not in ({}, [], "", None)}
    return value


def render_profile(data: dict[str, Any], induced: list[str], *, marks: bool) -> str:
    """The profile as TOML; with ``marks``, each field read from the data is followed by ``# induced``
    (the others were written by the user or are defaults)."""
    import tomli_w

    text = tomli_w.dumps(_prune(data))
    if not marks:
        return text
    done = set(induced)
    out: list[str] = []
    section = ""
    for line in text.splitlines():
        head = _SECTION.match(line)
        if head:
            section = _unquote(head.group(1))
            out.append(line)
            continue
        key = _KEY.match(line)
        if key:
            dotted = f"{section}.{_unquote(key.group(1))}" if section else _unquote(key.group(1))
            parts = dotted.split(".")
            is_induced = any(".".join(parts[:i]) in done for i in range(1, len(parts) + 1))
            if is_induced:
                line = f"{line}  # induced"
        out.append(line)
    return "\n".join(out) + "\n"


@profile_app.command("induce")
def induce_command(
    dataset: Annotated[str, typer.Option(help="triples | jsonl")],
    data: Annotated[Path, typer.Option(help="the triples file (or its directory), or the JSON lines directory")],
    profile: Annotated[Path | None, typer.Option(help="a partial profile: its fields win over induced ones")] = None,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="write the profile here (.toml); else print it")] = None,
) -> None:
    """Induce a profile from a graph's data (types, relation words, planner settings) as editable TOML."""
    from graphs.loaders import load_dataset
    from graphs.manifest import atomic_write_text
    from graphs.skb.profile import profile_for

    try:
        if dataset not in ("triples", "jsonl"):
            raise SKBError(f"--dataset {dataset!r}: profiles are induced for triples and jsonl graphs")
        skb = load_dataset(dataset, data, profile)  # type: ignore[arg-type]
        prof = profile_for(skb)
    except SKBError as exc:
        raise _fail(exc) from exc
    header = (f"# Profile induced by `skb profile induce` from {data}.\n"
              f"# Fields read from the data (edit any of them; what you write wins): {len(prof.induced)}.\n")
    text = header + render_profile(prof.model_dump(mode="json", exclude={"induced"}), prof.induced, marks=True)
    if out is None:
        typer.echo(terminal_text(text), nl=False)  # names from the graph: never terminal control
        return
    try:
        atomic_write_text(out, text)
    except OSError as exc:
        raise _fail(SKBError(f"cannot write {out} ({exc}); choose a writable path")) from exc
    typer.echo(terminal_text(f"wrote {out} ({len(prof.relations)} relations, {len(prof.labels)} labels, "
                             f"{len(prof.induced)} induced fields)"))


@profile_app.command("show")
def show_command(
    index_dir: Annotated[Path, typer.Option(help="index directory", envvar="SKB_INDEX_DIR")],
) -> None:
    """Print the profile an index uses; fields read from the data are marked `# induced`."""
    from graphs.bundle import IndexBundle
    from graphs.skb.profile import profile_for

    try:
        bundle = IndexBundle.open(index_dir)
        prof = profile_for(bundle.skb)
    except SKBError as exc:
        raise _fail(exc) from exc
    text = render_profile(prof.model_dump(mode="json", exclude={"induced"}), prof.induced, marks=True)
    typer.echo(terminal_text(text), nl=False)
