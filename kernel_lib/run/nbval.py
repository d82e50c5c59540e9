"""`python -m kernel_lib check`: a report's notebooks re-executed under nbval (a copy, so the
report is untouched), the outputs of cells tagged nbval-check-output compared, and the records
they save kept in .cache/nbval/<report>/ (`make test` and .ci/run read them: tests/test_cli.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from kernel_lib import OUTPUTS
from kernel_lib.params import ROOT, ParameterError
from kernel_lib.platform import threads_each
from kernel_lib.records import RESULTS_DIR_ENV
from kernel_lib.run.runner import say_other_code

# the notebooks side by side, one per core (pytest-xdist), each one's cells in order in one kernel
MAX_WORKERS = 4
PARALLEL = ("-n", "auto", "--maxprocesses", str(MAX_WORKERS), "--dist", "loadfile")


def readable(notebook: Path) -> None:
    """ParameterError (one line naming it) unless `notebook` reads as nbval reads it (nbformat,
    version 4) and is a valid notebook: a damaged one is not handed to pytest."""
    try:
        nbformat.validate(nbformat.read(notebook, as_version=4))
    except (ValueError, AttributeError, KeyError, TypeError, nbformat.ValidationError) as err:
        why = str(err).partition(": '")[0].splitlines()  # not nbformat's preview of the text
        raise ParameterError(
            f"{notebook} is damaged ({why[0][:100] if why else type(err).__name__}): `run` "
            "remakes the report"
        ) from None


def check(platform: str, only: str | None = None) -> int:
    """nbval's exit code for the notebooks of outputs/<platform> (`only`: a comma-separated
    subset); ParameterError (nothing run) for a report or notebook that is not there, or a
    damaged notebook (`readable`)."""
    reports = sorted(
        p.name for p in OUTPUTS.iterdir() if p.is_dir() and not p.name.startswith(".")
    )
    if platform not in reports:  # a folder's name, never a path out of outputs/ or .cache/nbval/
        raise ParameterError(
            f"--platform {platform!r}: no report folder outputs/{platform} (have {reports})"
        )
    source = OUTPUTS / platform
    notebooks = sorted(source.glob("*.ipynb"))
    if not notebooks:
        raise ParameterError(
            f"no executed notebooks in {source.relative_to(ROOT)}: run the report first"
        )
    if only is not None:  # a subset, say under an ISA where only some of them can differ
        names = [n.strip() for n in only.split(",") if n.strip()]
        have = [nb.stem for nb in notebooks]
        if not names or set(names) - set(have):
            raise ParameterError(f"--only {only!r}: a comma-separated list among {have}")
        notebooks = [nb for nb in notebooks if nb.stem in names]
    for nb in notebooks:
        readable(nb)
    work = ROOT / ".cache" / "nbval" / platform
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for nb in notebooks:
        shutil.copy2(nb, work / nb.name)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "--nbval-lax",
        "--nbval-current-env",
        *PARALLEL,
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(work),
        str(work),
    ]
    # the re-executed notebooks save their records into the copy, never into outputs/local/
    env = {**os.environ, RESULTS_DIR_ENV: str(work)}
    env.setdefault("OMP_NUM_THREADS", str(threads_each(min(MAX_WORKERS, len(notebooks)))))
    code = subprocess.run(command, cwd=work, env=env).returncode
    if code:
        say_other_code(source)
    return code
