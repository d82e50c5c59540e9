"""What a command may write over, and how it writes: the one place that owns writing.

- A report (a folder whose run.json a run wrote, and everything in it: `run-<k>/`, notebooks,
  pages, records) is written only by the commands that make reports (`run`, `cloud collect`,
  `report`), through results.outdir (`owned`, `staged`, `install`). No other output lands in
  one: `output_file` refuses a report's own file; a plain file the user names is theirs to
  overwrite.
- A folder a command fills (`output_folder`) is new, empty or one it made before (its mark file).
- The results store (kernel_lib.results.store) is a file of its own (`own_file`: never in a
  report), changed only in SQLite transactions; `--rebuild` keeps the store it changes beside it.
- A file is written whole or not at all (`written`, `write_text`: a sibling temporary file renamed
  over it), and a tree copied whole or not at all (`copy_tree`): a full or read-only disk leaves
  what was there byte for byte, and raises one OSError naming the path (the CLI's one line, exit 1).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from kernel_lib.params import ROOT, ParameterError
from kernel_lib.results.folders import RUN_FILE

STDOUT = "-"  # an output file named `-`: standard output


def is_report(folder: Path) -> bool:
    """A report a run wrote: its run.json names a platform and a run id."""
    try:
        run = json.loads((Path(folder) / RUN_FILE).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(run, dict) and {"platform", "run_id"} <= run.keys()


def report_holding(path: Path) -> Path | None:
    """The outermost report folder that `path` is in (or is), else None."""
    path = Path(path).resolve()
    held = None
    for folder in (path, *path.parents):
        if (folder / RUN_FILE).is_file() and is_report(folder):
            held = folder
    return held


def refuse_checkout(path: Path, option: str) -> None:
    """ParameterError when `path` is the repository or one of its parents."""
    path = Path(path).resolve()
    if path == ROOT or path in ROOT.parents:
        raise ParameterError(f"{option} {path} is or contains the repository")


def output_file(value: str, option: str) -> Path | None:
    """The file `option VALUE` names, checked before anything runs (ParameterError, one line):
    its folder exists, it is not a folder, nor one of a report's own files. None for `-`
    (standard output). A file of the user's is theirs to overwrite."""
    if value == STDOUT:
        return None
    path = Path(value)
    if not path.parent.is_dir():
        raise ParameterError(f"{option} {value}: no such folder {path.parent}")
    return own_file(value, option)


def own_file(value: str | Path, option: str) -> Path:
    """The file `option VALUE` names, checked before it is written (ParameterError, one line):
    not a folder, nor one of a report's own files (the results store, which makes its folder)."""
    path = Path(value)
    if path.is_dir():
        raise ParameterError(f"{option} {value}: is a folder")
    report = report_holding(path.parent)
    if report is not None:
        raise ParameterError(
            f"{option} {value}: would be one of the report's own files ({report}: only its run "
            "writes there): choose a file outside it"
        )
    return path


def output_folder(folder: Path, option: str, mark: str) -> Path:
    """A folder a command fills, checked before it runs: new, empty, or holding `mark` (the file
    that command leaves there); never a report, a file, the checkout or someone's folder."""
    folder = Path(folder)
    refuse_checkout(folder, option)
    if folder.exists() and not folder.is_dir():
        raise ParameterError(f"{option} {folder} is a file")
    if report_holding(folder) is not None:
        raise ParameterError(f"{option} {folder} is in the report {report_holding(folder)}")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / mark).exists():
        raise ParameterError(
            f"{option} {folder} holds files that this command did not write (no {mark}): "
            "choose a new folder"
        )
    return folder


def _one_line(err: OSError, path: Path) -> OSError:
    """`err` with the path it concerns (default `path`), for the CLI's one line."""
    return OSError(err.errno, err.strerror or str(err), str(err.filename or path))


@contextlib.contextmanager
def written(path: Path):
    """A sibling temporary file for the block to write, renamed over `path` when it ends: `path`
    written whole or not at all. An OSError (a full, read-only disk) names the path and leaves
    the old file as it was."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.writing-{os.getpid()}")
    try:
        yield temporary
        os.replace(temporary, path)
    except OSError as err:
        if str(err.filename) == str(temporary):  # removed below: name the file being written
            err.filename = None
        raise _one_line(err, path) from None
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()


def write_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all (`written`)."""
    with written(path) as temporary:
        temporary.write_text(text)


def copy_tree(source: Path, target: Path, *, last: str = RUN_FILE) -> None:
    """Copy folder `source` to the new folder `target`, `last` (run.json: what makes a finished
    report) copied after everything else. An OSError names the first file that failed (not
    shutil's list of them) and leaves no `target`."""
    failed: list[OSError] = []

    def copy(src, dst):
        try:
            return shutil.copy2(src, dst)
        except OSError as err:
            failed.append(err)
            raise

    try:
        top = Path(source)  # only the top `last`: a repeated report's run-<k>/ keep their own

        def later(folder, names):
            return [last] if Path(folder) == top and last in names else []

        shutil.copytree(source, target, ignore=later, copy_function=copy)
        if (Path(source) / last).exists():
            copy(Path(source) / last, Path(target) / last)
    except BaseException as err:
        shutil.rmtree(target, ignore_errors=True)
        if isinstance(err, OSError):  # shutil.Error too: its args are a list of every failure
            raise _one_line(failed[0] if failed else err, target) from None
        raise
