"""The HTML every report page is made of: one style, a page, tables that wrap to the window,
figures embedded as data URIs, links only to files that exist. Every value from outside (a
folder's name, a record's or run.json's text) is escaped here: a page runs no script of theirs."""

from __future__ import annotations

import base64
import html
import io
import numbers
from pathlib import Path
from urllib.parse import quote

import pandas as pd
from matplotlib.figure import Figure

# Pages fit the window: tables take its width and wrap their cells; small multiples flow in a grid.
STYLE = """body{font-family:sans-serif;margin:1.5em;max-width:90em}
table{border-collapse:collapse;width:100%;table-layout:auto}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;
overflow-wrap:break-word}
.scroll{overflow-x:auto;max-width:100%} img{max-width:100%}
.panels{display:grid;grid-template-columns:repeat(auto-fill,minmax(22em,1fr));gap:.8em}
.panel{margin:0;border:1px solid #ddd;padding:.3em}
.panel figcaption{font-size:.8em;color:#555} small{color:#555}
details{margin:.6em 0} summary{cursor:pointer;font-weight:bold}"""


def page(title: str, body: str) -> str:
    """A standalone HTML page (the report style) with `body` (HTML) under an <h1> `title` (text)."""
    title = html.escape(title)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{title}</title>
<style>{STYLE}</style></head>
<body><h1>{title}</h1>
{body}
</body></html>
"""


def scroll(table_html: str) -> str:
    """A table (HTML) in a box that scrolls sideways should its cells not wrap narrow enough."""
    return f'<div class="scroll">{table_html}</div>'


def text(value: str) -> str:
    """`value` escaped for HTML, breakable after its commas (record ids, shapes) so that it wraps."""
    return html.escape(value).replace(",", ",<wbr>")


def _cell(value):
    """A table cell: a number (or a missing value) as pandas shows it, anything else as text."""
    if isinstance(value, numbers.Number) or (pd.api.types.is_scalar(value) and pd.isna(value)):
        return value
    return text(str(value))


MARKDOWN_ACTIVE = str.maketrans({c: "\\" + c for c in "\\`[]|"})


def markdown_text(value) -> str:
    """`value` as text in a Markdown table cell that is rendered as HTML (a notebook's findings
    cell): on one line, its HTML escaped, no link, code span or cell break of its own."""
    return html.escape(" ".join(str(value).split())).translate(MARKDOWN_ACTIVE)


def plain(text: str) -> str:
    """`text` as matplotlib draws it, literally: a '$' of a folder's or record's name never opens
    mathtext (whose parse error would stop the page)."""
    return str(text).replace("$", r"\$")


def table(frame: pd.DataFrame, *, raw: tuple[str, ...] = (), index: bool = False) -> str:
    """`frame` as a wrapped HTML table, its headers, index and cells escaped but for the cells of
    the `raw` (HTML) columns."""
    cells = frame.map(_cell)
    for column in raw:
        cells[column] = frame[column]
    cells.columns = [_cell(c) for c in frame.columns]
    cells.index = [_cell(i) for i in frame.index]
    return scroll(cells.to_html(index=index, escape=False, na_rep=""))


def details(summary: str, body: str, *, open_: bool = False) -> str:
    """`body` (HTML) folded under a `summary` line (text)."""
    return (
        f"<details{' open' if open_ else ''}><summary>{html.escape(summary)}</summary>"
        f"{body}</details>"
    )


def href(target: str, label: str) -> str:
    """A link to the relative path `target` labelled `label` (text): the path percent-quoted, so
    that a name with ':' is never read as a scheme (javascript:), nor one with '#' or '?' cut."""
    return f'<a href="{html.escape(quote(target))}">{html.escape(label)}</a>'


def link(folder: Path, target: str, label: str) -> str:
    """A link to `target` (relative to `folder`, where the page is), only when the file exists."""
    return href(target, label) if (folder / target).exists() else ""


def png_data_uri(fig: Figure) -> str:
    """The figure as an embeddable `data:image/png;base64,...` URI."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
