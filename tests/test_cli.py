"""The command line: exit codes, one-line errors, nothing executed on bad input."""

import json
import subprocess
import sys

import pytest

from kernel_lib import __main__ as cli
from kernel_lib import params
from kernel_lib.records import Record


def test_unknown_platform_exits_2_with_one_line(capsys, tmp_path):
    assert cli.main(["run", "--platform", "nope", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown platform 'nope'") and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_yaml_with_unknown_key_exits_2_naming_it(capsys, tmp_path, monkeypatch):
    (tmp_path / "bad.yaml").write_text("workbook: {notebooks: [backend_cpu]}\ngemm_sizez: [8]\n")
    monkeypatch.setattr(params, "PARAMETERS_DIR", tmp_path)
    assert cli.main(["run", "--platform", "bad", "--out", str(tmp_path / "o")]) == 2
    assert "unknown key 'gemm_sizez'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_bench_device_prints_schema_records_as_json():
    argv = ["bench", "device", "--platform", "ci", "--json", "-p", "probe_compile=false", "-p", "compile_mlp=false"]
    out = subprocess.run([sys.executable, "-m", "kernel_lib", *argv], capture_output=True, text=True, check=True).stdout
    rows = json.loads(out)
    assert rows and {"gemm", "copy", "triad"} <= {r["case"] for r in rows}
    fields = set(Record.__dataclass_fields__)
    assert all(set(r) == fields for r in rows)
    assert all(r["status"] != "failed" for r in rows)
    assert all(r["median_ms"] > 0 for r in rows if r["case"] in ("gemm", "copy", "triad"))


def test_platforms_lists_files_and_detection(capsys):
    assert cli.main(["platforms"]) == 0
    out = capsys.readouterr().out
    assert "cpu" in out and "this machine:" in out


def test_check_without_a_report_exits_2(capsys):
    assert cli.main(["check", "--platform", "no-such-report"]) == 2


@pytest.mark.parametrize("argv", [["bench", "nope"], ["run", "--bogus"]])
def test_argparse_errors_exit_2(argv):
    with pytest.raises(SystemExit) as err:
        cli.main(argv)
    assert err.value.code == 2
