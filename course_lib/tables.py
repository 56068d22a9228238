"""A small table that renders as HTML in Jupyter and as aligned text everywhere else.

Lessons show measured results as tables; under papermill/CI the same object prints
as plain text, and ``to_markdown()`` goes into the run summary written by ``make course``.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field


def _fmt(value) -> str:
    if isinstance(value, float):
        if value != value:  # NaN
            return "n/a"
        if value == 0 or 1e-3 <= abs(value) < 1e6:
            return f"{value:.4g}"
        return f"{value:.3e}"
    if value is None:
        return "—"
    return str(value)


def cell_text(value) -> str:
    """A value as a :class:`Table` cell prints it: text that quotes a cell quotes this."""
    return _fmt(value)


@dataclass
class Table:
    """Rows of dicts with a fixed column order and an optional title."""

    columns: list[str]
    rows: list[dict] = field(default_factory=list)
    title: str = ""

    def add(self, **row) -> None:
        unknown = set(row) - set(self.columns)
        if unknown:
            raise KeyError(f"unknown columns {sorted(unknown)}; table has {self.columns}")
        self.rows.append(row)

    def _cells(self) -> list[list[str]]:
        return [[_fmt(row.get(c)) for c in self.columns] for row in self.rows]

    def __str__(self) -> str:
        cells = self._cells()
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(self.columns)]
        line = lambda vals: "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()
        out = [self.title] if self.title else []
        out += [line(self.columns), line(["-" * w for w in widths])]
        out += [line(r) for r in cells]
        return "\n".join(out)

    __repr__ = __str__

    def to_markdown(self) -> str:
        out = [f"**{self.title}**", ""] if self.title else []
        out.append("| " + " | ".join(self.columns) + " |")
        out.append("|" + "|".join("---" for _ in self.columns) + "|")
        out += ["| " + " | ".join(r) + " |" for r in self._cells()]
        return "\n".join(out)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in self._cells()
        )
        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
