import subprocess
import sys

import pytest

from kernel_lib import params
from kernel_lib.params import ParameterError, load_plan, notebook_defaults, parse_override


@pytest.fixture
def dirs(tmp_path, write_notebook):
    nbs, prm = tmp_path / "notebooks", tmp_path / "parameters"
    nbs.mkdir()
    prm.mkdir()
    write_notebook(
        nbs / "a.ipynb",
        parameters="size: int = 4  # n\nrate: float = 0.5\nnames: list[str] = ['x']",
    )
    write_notebook(nbs / "b.ipynb", parameters="flag: bool = False")
    return nbs, prm


def plan(dirs, text, **kwargs):
    nbs, prm = dirs
    path = prm / "p.yaml"
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    return load_plan("p", parameters_dir=prm, notebooks_dir=nbs, **kwargs)


def test_values_go_only_to_notebooks_that_declare_them(dirs):
    p = plan(
        dirs, "workbook: {notebooks: [a, b], cell_timeout_s: 9}\nsize: 8\nrate: 1\nflag: true\n"
    )
    assert p.parameters_for("a") == {"size": 8, "rate": 1}
    assert p.parameters_for("b") == {"flag": True}
    assert p.cell_timeout_s == 9


def test_command_line_overrides_the_file(dirs):
    p = plan(
        dirs, "workbook: {notebooks: [a]}\nsize: 8\n", overrides=dict([parse_override("size=16")])
    )
    assert p.parameters_for("a") == {"size": 16}


def test_only_restricts_notebooks(dirs):
    assert plan(dirs, "workbook: {notebooks: [a, b]}\n", only=["b"]).notebooks == ("b",)


def test_defaults_are_python_values(dirs):
    assert notebook_defaults("a", dirs[0]) == {"size": 4, "rate": 0.5, "names": ["x"]}


@pytest.mark.parametrize("text, message", [
    ("workbook: {notebooks: [a]}\nsize: [1\n", r"p.yaml: malformed YAML at line \d"),
    ("- just\n- a list\n", "must be a mapping"),
    ("size: 3\n", "needs `workbook"),
    ("workbook: {notebooks: [a], colour: red}\n", "unknown key workbook.colour"),
    ("workbook: {notebooks: [zzz]}\n", r"p.yaml: key workbook.notebooks names unknown notebooks \['zzz'\]"),
    ("workbook: {notebooks: []}\n", "workbook.notebooks = \\[\\] must be a non-empty list"),
    ("workbook: {notebooks: a}\n", "must be a non-empty list"),
    ("workbook: {notebooks: [a]}\nsize: 3\nsize: 4\n", "duplicate key 'size'"),
    ("", "p.yaml: is empty"),
    ("  \n# only a comment\n", "is empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", "is a binary file"),
    (b"workbook: {notebooks: [a]}\nsize: \xff\n", "is not UTF-8 text"),
    ("workbook: {notebooks: [a]}\nsise: 3\n", "unknown key 'sise'"),
    ("workbook: {notebooks: [a]}\nsize: big\n", "key 'size' = 'big' is not int"),
    ("workbook: {notebooks: [a]}\nsize: true\n", "key 'size' = True is not int"),
    ("workbook: {notebooks: [a]}\nnames: [1, 2]\n", r"key 'names' = \[1, 2\] is not list\[str\]"),
    ("workbook: {notebooks: [a], cell_timeout_s: 0}\n", "cell_timeout_s"),
    ("workbook: {notebooks: [a]}\nsize: &s 3\n", r"p.yaml: YAML anchors and aliases \(&name, \*name\) are not allowed at line 2"),
    ("workbook: &w {notebooks: [a]}\nnames: [*w]\n", "YAML anchors and aliases"),
    ("workbook: {notebooks: [a]}\n<<: {size: 3}\n", r"p.yaml: YAML merge keys \(<<\) are not allowed at line 2"),
    ("workbook: {notebooks: [a]}\nsize: \x01\n", "p.yaml: malformed YAML: unacceptable character"),
    ("workbook: {notebooks: [a]}\nsize: " + "9" * 5000 + "\n", "p.yaml: unreadable YAML value"),
])  # fmt: skip
def test_bad_files_give_one_line_naming_file_and_key(dirs, text, message):
    with pytest.raises(ParameterError, match=message) as err:
        plan(dirs, text)
    assert "\n" not in str(err.value)


def test_unknown_platform_lists_the_known_ones(dirs):
    with pytest.raises(ParameterError, match=r"unknown platform 'nope': choose from \['p'\]"):
        plan(dirs, "workbook: {notebooks: [a]}\n") and load_plan("nope", parameters_dir=dirs[1])


def test_a_platform_is_a_parameter_files_stem_never_a_path(dirs):
    nbs, prm = dirs
    (prm / "p.yaml").write_text("workbook: {notebooks: [a]}\n")
    (prm / "...yaml").write_text("workbook: {notebooks: [a]}\n")  # its stem is ".."
    assert params.list_platforms(prm) == ["p"]
    for name in ("../parameters/p", str(prm / "p"), "p.yaml", "..", ""):
        with pytest.raises(ParameterError, match=r"unknown platform .*: choose from \['p'\]"):
            load_plan(name, parameters_dir=prm, notebooks_dir=nbs)


def test_bad_override_and_only(dirs):
    with pytest.raises(ParameterError, match="name=value"):
        parse_override("size")
    with pytest.raises(ParameterError, match=r"-p 'size=\[&a 1, \*a\]': YAML anchors"):
        parse_override("size=[&a 1, *a]")
    with pytest.raises(ParameterError, match="command line: unknown key 'x'"):
        plan(dirs, "workbook: {notebooks: [a]}\n", overrides={"x": 1})
    with pytest.raises(ParameterError, match=r"--only: \['b'\]: choose from .*\['a'\]"):
        plan(dirs, "workbook: {notebooks: [a]}\n", only=["b"])
    with pytest.raises(ParameterError, match="--only: no notebook named"):
        plan(dirs, "workbook: {notebooks: [a]}\n", only=[])  # `--only ,`


def test_every_shipped_platform_file_is_valid():
    for name in params.list_platforms():
        assert load_plan(name).notebooks, name


def test_params_and_variants_import_without_papermill():
    # `python -m kernel_lib bench` hosts need no Jupyter stack: papermill loads only to read a notebook
    code = (
        "import sys, kernel_lib.params, kernel_lib.variants; "
        "assert 'papermill' not in sys.modules, 'papermill imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
