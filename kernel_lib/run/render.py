"""An executed notebook made readable: its findings after its title, and standalone HTML without
progress bars (the .ipynb keeps them)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

from kernel_lib.records import RESULTS_SUFFIX
from kernel_lib.report.lead import with_findings
from kernel_lib.results.files import Results, read_notebook

# A tqdm bar ("desc:  40%|████      | 6/15 [00:01<00:01,  4.94it/s]", or "12it [00:03, 3.9it/s]")
# and the terminal escapes tqdm writes between bars (cursor up, erase line).
_BAR = re.compile(r"\d{1,3}%\|.*\|\s*\S+/\S+\s*\[|\d+(\.\d+)?[kMG]?it \[\d+:\d\d")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _progress_residue(line: str) -> bool:
    """A stderr line that is a progress bar (its last carriage-returned state), or nothing at all."""
    shown = _ANSI.sub("", line.rsplit("\r", 1)[-1])
    return not shown.strip() or bool(_BAR.search(shown))


def without_progress_bars(nb):
    """`nb` with tqdm progress bars removed from its stderr streams (other stderr lines, such as
    warnings, stay; an output left blank goes). The .ipynb keeps them: this is for the HTML."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        outputs = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                kept = [line for line in output["text"].split("\n") if not _progress_residue(line)]
                if not kept:
                    continue
                output["text"] = "\n".join(kept) + "\n"
            outputs.append(output)
        if "outputs" in cell:
            cell["outputs"] = outputs
    return nb


def lead_with_findings(notebook: Path, platform: str) -> Results | None:
    """Put what the executed notebook found (its saved records' declared headlines and their
    plot) after its title, and return its results as read (`read_notebook`: the runner hands
    them on to the report and the results store); a notebook that saved no records is left as
    it is (None)."""
    path = notebook.with_name(notebook.stem + RESULTS_SUFFIX)
    if not path.exists():
        return None
    results = read_notebook(path)
    nb = with_findings(nbformat.read(notebook, as_version=4), results.frame, platform)
    nbformat.write(nb, str(notebook))
    return results


def to_html(notebook: Path) -> Path:
    """The executed notebook as standalone HTML with images embedded, without progress bars."""
    nb = without_progress_bars(nbformat.read(notebook, as_version=4))
    resources = {"metadata": {"name": notebook.stem, "path": str(notebook.parent)}}
    body, _ = HTMLExporter(embed_images=True).from_notebook_node(nb, resources=resources)
    target = notebook.with_suffix(".html")
    target.write_text(body)
    return target
