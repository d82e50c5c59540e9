"""The host allocator as a platform choice: its environment, its refusal, what a process records."""

import pytest

from kernel_lib import allocator
from kernel_lib.params import ParameterError, load_plan
from kernel_lib.run.runner import run_plan


def test_each_choice_sets_only_its_variables_and_names_itself(tmp_path):
    (tmp_path / "libjemalloc.so.2").touch()
    base = {"PATH": "/bin", "LD_PRELOAD": "/old.so", "MALLOC_CONF": "x"}
    assert allocator.environment("system", base) == {"PATH": "/bin", allocator.ENV: "system"}
    kept = allocator.environment("system_kept", base)
    assert kept["MALLOC_MMAP_THRESHOLD_"] == kept["MALLOC_TRIM_THRESHOLD_"] == allocator.KEPT
    assert "LD_PRELOAD" not in kept
    jemalloc = allocator.environment("jemalloc", base, dirs=[tmp_path])
    assert jemalloc["LD_PRELOAD"] == str(tmp_path / "libjemalloc.so.2")
    assert jemalloc["MALLOC_CONF"] == allocator.JEMALLOC_CONF


def test_a_missing_library_is_refused_naming_its_package(tmp_path):
    with pytest.raises(allocator.Missing, match=r"apt-get install libtcmalloc-minimal4"):
        allocator.environment("tcmalloc", {}, dirs=[tmp_path])
    with pytest.raises(ValueError, match="allocator='hoard' must be one of system, system_kept"):
        allocator.environment("hoard", {})


def test_in_effect_reads_the_runners_choice_or_the_variables(monkeypatch):
    for name in (*allocator.VARIABLES, allocator.ENV):
        monkeypatch.delenv(name, raising=False)
    assert allocator.in_effect() == "system"
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "1")
    assert allocator.in_effect() == "system_kept (MALLOC_MMAP_THRESHOLD_=1)"
    monkeypatch.setenv(allocator.ENV, "system_kept")
    assert allocator.in_effect() == allocator.describe("system_kept")
    monkeypatch.setenv(allocator.ENV, "tcmalloc")  # named, but not preloaded into this process
    assert allocator.in_effect().endswith("NOT loaded in this process")


@pytest.fixture
def plan_dir(tmp_path, write_notebook):
    nbs, prm = tmp_path / "notebooks", tmp_path / "parameters"
    nbs.mkdir(), prm.mkdir()
    write_notebook(nbs / "a.ipynb", parameters="size: int = 4")
    return nbs, prm


def _plan(plan_dir, text):
    nbs, prm = plan_dir
    (prm / "p.yaml").write_text(text)
    return load_plan("p", parameters_dir=prm, notebooks_dir=nbs)


def test_the_workbook_key_is_validated_and_defaults_to_system(plan_dir):
    assert _plan(plan_dir, "workbook: {notebooks: [a]}\n").allocator == "system"
    plan = _plan(plan_dir, "workbook: {notebooks: [a], allocator: system_kept}\n")
    assert plan.allocator == "system_kept"
    with pytest.raises(ParameterError, match=r"p.yaml: key workbook.allocator = 'fast' must be"):
        _plan(plan_dir, "workbook: {notebooks: [a], allocator: fast}\n")


def test_the_runner_refuses_an_allocator_that_is_not_installed(plan_dir, monkeypatch, tmp_path):
    monkeypatch.setattr(allocator, "_library_dirs", lambda: [tmp_path / "nowhere"])
    plan = _plan(plan_dir, "workbook: {notebooks: [a], allocator: jemalloc}\n")
    with pytest.raises(ParameterError, match=r"p.yaml: allocator jemalloc: .* libjemalloc2\)$"):
        run_plan(plan, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


RECORDS = """from kernel_lib.platform import device_facts
print("allocator:", device_facts().as_dict()["allocator"])"""


@pytest.mark.slow
def test_the_kernel_gets_the_allocator_and_run_json_records_it(tmp_path, write_notebook):
    nbs, prm = tmp_path / "notebooks", tmp_path / "parameters"
    nbs.mkdir(), prm.mkdir()
    write_notebook(nbs / "a.ipynb", RECORDS)
    (prm / "p.yaml").write_text("workbook: {notebooks: [a], allocator: system_kept}\n")
    plan = load_plan("p", parameters_dir=prm, notebooks_dir=nbs)
    out = tmp_path / "out"
    run_plan(plan, out, progress=False)
    described = allocator.describe("system_kept")
    assert f"allocator: {described}" in (out / "a.ipynb").read_text()
    assert f'"allocator": "{described}"' in (out / "run.json").read_text()
    assert described in (out / "index.html").read_text().replace("<wbr>", "")
