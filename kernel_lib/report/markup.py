"""The HTML every report page is made of: one style, a page, tables that wrap to the window,
figures embedded as data URIs, links only to files that exist."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

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
    """A standalone HTML page (the report style) with `body` under an <h1> title (HTML)."""
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


def table(frame: pd.DataFrame, *, raw: tuple[str, ...] = (), index: bool = False) -> str:
    """`frame` as a wrapped HTML table, its text escaped but for the `raw` (HTML) columns."""
    cells = frame.map(lambda v: text(v) if isinstance(v, str) else v)
    for column in raw:
        cells[column] = frame[column]
    return scroll(cells.to_html(index=index, escape=False, na_rep=""))


def details(summary: str, body: str, *, open_: bool = False) -> str:
    """`body` (HTML) folded under a `summary` line (text)."""
    return (
        f"<details{' open' if open_ else ''}><summary>{html.escape(summary)}</summary>"
        f"{body}</details>"
    )


def link(folder: Path, target: str, text: str) -> str:
    """A link to `target` (relative to `folder`, where the page is), only when the file exists."""
    if not (folder / target).exists():
        return ""
    return f'<a href="{html.escape(target)}">{html.escape(text)}</a>'


def png_data_uri(fig: Figure) -> str:
    """The figure as an embeddable `data:image/png;base64,...` URI."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
