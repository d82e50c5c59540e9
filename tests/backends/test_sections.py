import dataclasses
from pathlib import Path

import nbformat
import pytest

from kernel_lib.backends import roofline, sections
from kernel_lib.backends.target import CPU_MATRIX_FLAGS, cpu_facts
from kernel_lib.headlines import headline
from kernel_lib.platform import DeviceFacts

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("backend_*.ipynb"))


def test_measuring_names_the_device_or_why_nothing(cpu_target, absent):
    assert sections.measuring(cpu_target).startswith(f"measuring {cpu_target.facts.name} (")
    assert sections.measuring(absent("xpu")) == f"measuring nothing: {absent('xpu').reason}"


def test_cpu_facts_name_the_model_and_every_matrix_flag(cpu_target):
    facts = sections.facts(cpu_target)
    table = facts.table.iloc[:, 0]
    assert table["cpu_model"] == cpu_target.facts.name
    assert table["isa_flags"] == cpu_target.facts.arch
    assert {table[f] for f in CPU_MATRIX_FLAGS} <= {"yes", "no"}


def test_cpu_facts_spell_out_the_flags_a_cpu_has():
    facts = DeviceFacts("cpu", "cpu", "Xeon 8480", arch="avx2 avx512f amx_bf16")
    got = cpu_facts(facts)
    assert (got["cpu_model"], got["amx_bf16"], got["avx512_bf16"]) == ("Xeon 8480", "yes", "no")


def test_each_section_returns_its_records_and_table(cpu_target, tiny):
    for section in (
        sections.capabilities(cpu_target, tiny),
        sections.roof(cpu_target, tiny),
        sections.overheads(cpu_target, tiny),
        sections.mlp(cpu_target, tiny),
    ):
        assert section.records and len(section.table) == len(section.records)


def test_check_table_shows_pass_and_skipped_without_digits(cpu_target, tiny):
    table = sections.check_table(
        sections.roof(cpu_target, tiny), sections.overheads(cpu_target, tiny)
    )
    assert set(table["check"]) == {"PASS", "skipped"}
    assert list(table.columns) == ["case", "implementation", "dtype", "shape", "check"]


def test_check_table_raises_naming_a_wrong_record(monkeypatch, cpu_target, tiny):
    monkeypatch.setattr(roofline, "copy", lambda dst, src: dst.copy_(src).add_(1))
    with pytest.raises(AssertionError, match="copy/torch_copy/float32"):
        sections.check_table(sections.roof(cpu_target, tiny))


def test_error_table_has_the_digits(cpu_target, tiny):
    errors = sections.error_table(sections.roof(cpu_target, tiny))
    assert {"rel_error", "tolerance", "reference"} <= set(errors.columns)


@pytest.mark.slow
def test_headlines_are_declared_not_picked_each_by_its_section(cpu_target, tiny):
    cfg = dataclasses.replace(tiny, gemm_sizes=(16, 32), compile_mlp=True)
    roof, mlp = sections.roof(cpu_target, cfg), sections.mlp(cpu_target, cfg)
    assert [r.headline for r in roof.records if r.headline] == [sections.BF16_GEMM]
    assert [r.headline for r in mlp.records if r.headline] == [sections.COMPILED_MLP]
    records = roof.records + mlp.records
    declared = {r.headline: r for r in records if r.headline}
    gemm = declared[sections.BF16_GEMM]
    assert (gemm.dtype, gemm.shape["N"], gemm.baseline) == ("bfloat16", 32, "torch_mm (float32)")
    assert declared[sections.COMPILED_MLP].baseline == "eager"
    assert [line.split(":")[0] for line in sections.headline_lines(records)] == [
        headline(sections.BF16_GEMM).title,
        headline(sections.COMPILED_MLP).title,
    ]


def test_a_skipped_headline_is_still_declared_with_its_reason(cpu_target, tiny):
    assert sections.headline_lines(sections.mlp(cpu_target, tiny).records) == [
        f"{headline(sections.COMPILED_MLP).title}: skipped: compile_mlp=False"
    ]


def test_no_gemm_headline_without_fp32_to_compare_with(cpu_target, tiny):
    cfg = dataclasses.replace(tiny, gemm_dtypes=("bfloat16",))
    assert not any(r.headline for r in sections.roof(cpu_target, cfg).records)


def _code_cells(path):
    return [
        c.source
        for c in nbformat.read(path, 4).cells
        if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])
    ]


def test_the_five_notebooks_share_sections_not_copied_code():
    assert len(NOTEBOOKS) == 5
    seen = {}
    for path in NOTEBOOKS:
        for source in _code_cells(path):
            lines = source.splitlines()
            assert not any(w in source for w in ("def ", "class ", "for ")), (path.name, source)
            if len(lines) > 2 and not lines[0].startswith("from "):
                assert source not in seen, f"{path.name} copies a cell of {seen[source]}"
                seen[source] = path.name


def test_every_notebook_checks_with_pass_fail_cells_only():
    for path in NOTEBOOKS:
        cells = nbformat.read(path, 4).cells
        tagged = [c.source for c in cells if "nbval-check-output" in c.metadata.get("tags", [])]
        assert tagged and all("error_table" not in s for s in tagged), path.name
