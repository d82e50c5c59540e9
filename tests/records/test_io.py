"""Where a notebook's results go (issue #12): never the current directory, also by hand."""

import json
from pathlib import Path

import nbformat
import papermill
import pytest
import yaml

from kernel_lib import records
from kernel_lib.params import (
    ParameterError,
    Plan,
    config_class,
    list_notebooks,
    load_plan,
    notebook_defaults,
    notebook_parameters,
)
from kernel_lib.records import (
    LOCAL_RESULTS_DIR,
    RESULTS_DIR_ENV,
    resolve_results_dir,
    save_notebook_records,
    save_records,
)

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = list_notebooks()


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """An empty current directory, and no runner environment."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv(RESULTS_DIR_ENV, raising=False)
    return cwd


def test_an_explicit_results_dir_wins(elsewhere, tmp_path, monkeypatch):
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path / "runner"))
    got = resolve_results_dir(str(tmp_path / "mine"), str(tmp_path / "out" / "nb.ipynb"))
    assert got == tmp_path / "mine"
    assert resolve_results_dir("rel") == elsewhere / "rel"  # asked for: taken from the cwd


def test_else_beside_the_output_notebook_papermill_injected(elsewhere, tmp_path, monkeypatch):
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path / "runner"))
    assert resolve_results_dir("", str(tmp_path / "out" / "nb.ipynb")) == tmp_path / "out"
    assert resolve_results_dir("", "out/nb.ipynb") == elsewhere / "out"
    assert resolve_results_dir("", "nb.ipynb") == elsewhere  # the output notebook is there too


@pytest.mark.parametrize("output_path", [None, "", "-", "s3://bucket/nb.ipynb"])
def test_else_the_runners_folder(elsewhere, tmp_path, monkeypatch, output_path):
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path / "runner"))
    assert resolve_results_dir("", output_path) == tmp_path / "runner"


def test_else_outputs_local_in_the_repository(elsewhere):
    got = resolve_results_dir()
    assert got == LOCAL_RESULTS_DIR == ROOT / "outputs" / "local"
    assert got.is_absolute() and got != elsewhere
    assert resolve_results_dir("", "-") == LOCAL_RESULTS_DIR


def test_save_records_without_a_directory_never_writes_into_the_cwd(
    elsewhere, tmp_path, monkeypatch
):
    local = tmp_path / "local"
    monkeypatch.setattr(records.io, "LOCAL_RESULTS_DIR", local)
    path = save_records([], "nb")
    assert path == local / "nb.results.json" and (local / "nb.results.csv").exists()
    assert list(elsewhere.iterdir()) == []


def test_save_notebook_records_reads_the_notebooks_globals(elsewhere, tmp_path, capsys):
    save_notebook_records([], "nb", {"results_dir": "", "PAPERMILL_OUTPUT_PATH": "out/nb.ipynb"})
    assert (elsewhere / "out" / "nb.results.json").exists()
    assert capsys.readouterr().out == "results: out/nb.results.json and nb.results.csv\n"
    save_notebook_records([], "nb", {"results_dir": str(tmp_path / "mine")})
    assert (tmp_path / "mine" / "nb.results.json").exists()
    assert str(tmp_path / "mine" / "nb.results.json") in capsys.readouterr().out
    assert [p.name for p in elsewhere.iterdir()] == ["out"]


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_notebook_declares_results_dir_and_saves_through_it(notebook):
    spec = notebook_parameters(notebook)["results_dir"]
    assert spec["inferred_type_name"] == "str" and spec["default"] == '""' and spec["help"]
    nb = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4)
    assert nb.cells[-1].source.startswith("save_notebook_records(")
    assert nb.cells[-1].source.endswith(f'"{notebook}", globals())')
    # its config takes only its own fields: results_dir is ignored
    config_class(notebook).from_params(notebook_defaults(notebook))


def test_the_runner_refuses_results_dir_from_the_command_line():
    with pytest.raises(ParameterError, match="command line: key 'results_dir' is only for"):
        load_plan("ci", overrides={"results_dir": "/tmp/x"})


def test_the_runner_refuses_results_dir_in_a_platform_file(tmp_path):
    data = {"workbook": {"notebooks": ["backend_cpu"]}, "results_dir": "/tmp/x"}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ParameterError, match="p.yaml: key 'results_dir' is only for"):
        load_plan("p", parameters_dir=tmp_path)


def test_a_plan_never_injects_results_dir():
    plan = Plan("p", "p.yaml", ("backend_cpu",), {"results_dir": "/tmp/x", "min_time_s": 0.1})
    assert plan.parameters_for("backend_cpu") == {"min_time_s": 0.1}


def test_a_notebook_run_by_hand_writes_beside_its_output_notebook(elsewhere):
    """papermill from another directory, with the output path injected as
    `papermill --inject-output-path` does: the results lie beside out/backend_xpu.ipynb."""
    (elsewhere / "out").mkdir()
    output = "out/backend_xpu.ipynb"  # relative, as typed on a command line
    papermill.execute_notebook(
        str(ROOT / "notebooks" / "backend_xpu.ipynb"),
        output,
        parameters={"PAPERMILL_OUTPUT_PATH": output},
        kernel_name="kernel-workbook",
        progress_bar=False,
    )
    out = elsewhere / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "backend_xpu.ipynb",
        "backend_xpu.results.csv",
        "backend_xpu.results.json",
    ]
    assert [p.name for p in elsewhere.iterdir()] == ["out"]  # nothing in the cwd
    rows = json.loads((out / "backend_xpu.results.json").read_text())
    assert rows and {r["status"] for r in rows} == {"skipped"}
    last = nbformat.read(out / "backend_xpu.ipynb", as_version=4).cells[-1]
    assert last.outputs[0]["text"] == (
        "results: out/backend_xpu.results.json and backend_xpu.results.csv\n"
    )
