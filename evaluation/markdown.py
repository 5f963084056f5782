"""Markdown pieces the evaluation reports share: tables and percentages."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["cell", "pct", "table"]


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *, left: int = 1) -> list[str]:
    """A pipe table: the first ``left`` columns left-aligned, the rest right; "(none)"
    without rows."""
    if not rows:
        return ["(none)"]
    align = ["---" if i < left else "---:" for i in range(len(header))]
    return [_row(header), _row(align), *(_row(r) for r in rows)]


def pct(x: float | None, missing: str = "-") -> str:
    """``x`` (0-1) as a percentage with one decimal; ``missing`` for None."""
    return missing if x is None else f"{100 * x:.1f}%"


def cell(text: str, limit: int = 80) -> str:
    """Free text made safe for a table cell: one line, pipes escaped, at most ``limit``
    characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return flat.replace("|", "\\|")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"
