"""One owner of the index lifecycle for the objects that serve an index to other programs.

Why a base: `SKBRetriever` and `SKBToolkit` both take an index directory (opened here, closed by
``close()``) or an open `IndexBundle` (left open: the caller owns it), and both are context managers.
Written once, the rule "close what you opened, never what you were given" cannot drift between them;
each subclass then implements only what it serves (as neo4j-graphrag's retrievers implement one search
method over a base that owns the driver).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle


class BundleOwner(BaseModel):
    """A pydantic model over one `IndexBundle` (``bundle``) that closes it only when it opened it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    bundle: Any = Field(description="the IndexBundle this object reads")

    _owns_bundle: bool = PrivateAttr(default=False)

    def _init_over(self, source: Path | str | IndexBundle, *, store: str | None = None, **fields: Any) -> None:
        """Initialise the model's fields over ``source``: an index directory is opened here (with ``store``)
        and owned; a bundle is used as given. An index opened here is closed again if the fields are invalid."""
        owns = isinstance(source, str | Path)
        if isinstance(source, str | Path):
            from graphs.bundle import IndexBundle

            source = IndexBundle.open(Path(source), store=store)
        try:
            super().__init__(bundle=source, **fields)
        except Exception:
            if owns:
                source.close()
            raise
        self._owns_bundle = owns

    def close(self) -> None:
        """Close the index when this object opened it (an `IndexBundle` passed in stays open)."""
        if self._owns_bundle:
            self.bundle.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
