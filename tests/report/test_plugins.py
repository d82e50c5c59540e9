"""The user's kernels (kernel_lib.plugins) in what people read: a line per slot leads the findings
cell, a "Your kernels" section in the report's pages and the gallery, every text of theirs
escaped; nothing changes where no record is a plug-in's; compare, the store keep them."""

import dataclasses
import json

from kernel_lib.compare import compare_folders, to_json, to_text
from kernel_lib.records import failed, measured, skipped, with_ratio
from kernel_lib.report.aggregate import aggregate_records, write_aggregate_run
from kernel_lib.report.gallery import build_gallery
from kernel_lib.report.lead import findings_markdown
from kernel_lib.report.markup import markdown_text
from kernel_lib.report.pages import build_report
from kernel_lib.report.plugins import (
    gallery_section,
    plugin_lines,
    plugin_markdown,
    plugin_sections,
    plugin_table,
    with_best_builtin,
)
from kernel_lib.report.read import report_records
from kernel_lib.results import store
from kernel_lib.timing import Timing, ratio
from tests import fakes

MARKUP = "<script>alert(1)</script>"
ROUNDS = {  # per interleaving round (ms): the baseline, two built-ins, the user's kernel
    "dense_gemm": (2.0,) * 8,
    "dispatch_fast": (1.0, 1.02, 0.98, 1.01, 0.99, 1.03, 0.97, 1.0),
    "dispatch_slow": (1.5,) * 8,
    "my_dispatch": (0.8, 0.82, 0.79, 0.81, 0.8, 0.83, 0.78, 0.8),
}
CODE = {"module": "my_kernels", "file": "/home/me/my_kernels.py", "revision": "1a2b3c4d5e6f"}


def _source(name: str, sha256: str = "0123456789abcdef", **fields) -> dict:
    return {"slot": "moe.dispatch", "name": name, **CODE, "sha256": sha256, **fields}


def _timed(name: str, facts, at: dict):
    rounds = ROUNDS[name]
    timing = Timing(
        sorted(rounds)[4], min(rounds), max(rounds), min(rounds), 8, "perf_counter", None,
        samples_ms=rounds, round_medians_ms=rounds,
    )  # fmt: skip
    return measured("moe", "throughput", name, timing, facts=facts, flops=1e9, **at)


def _compare(facts, tokens: int, *, sha256: str = "0123456789abcdef", theirs: bool = True):
    """One compare at T=`tokens`: dense_gemm (its baseline), two built-ins, my_dispatch (a
    plug-in, timed) and a second plug-in that failed its check, its name, module, file and
    reason markup (a results file is the user's: its names are not checked)."""
    at = {"dtype": "bfloat16", "shape": {"T": tokens, "E": 8}, "mode": "forward"}
    base = _timed("dense_gemm", facts, at)
    ours = [
        with_ratio(r, base, ratio(base.round_medians_ms, r.round_medians_ms))
        for r in (_timed(n, facts, at) for n in ("dispatch_fast", "dispatch_slow", "my_dispatch"))
    ]
    mine = dataclasses.replace(ours[2], plugin=_source("my_dispatch", sha256))
    other = dataclasses.replace(
        failed("moe", "throughput", "fused", f"ValueError: {MARKUP}", facts=facts, **at),
        status="wrong",
        plugin=_source(MARKUP, module=MARKUP, file=f"/tmp/{MARKUP}.py"),
    )
    return [base, *ours[:2], *([mine, other] if theirs else [])]


def _records(facts, tokens=(64, 128), **options):
    return [r for t in tokens for r in _compare(facts, t, **options)]


def _save(folder, facts, records, run_id: str = "r-cpu"):
    """A run of the moe notebook on the platform cpu, as the runner leaves it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "moe.results.json").write_text(json.dumps(fakes.rows(records, run_id)))
    (folder / "run.json").write_text(json.dumps(fakes.measured_run("cpu", facts, ["moe"])))


def _report(folder, facts, records):
    _save(folder, facts, records)
    build_report(folder)
    return folder


LINE = (
    "moe.dispatch — my_dispatch: 2 ok; throughput forward bfloat16 E=8,T=64: 2.50x [2.41, 2.56] "
    "vs dense_gemm, 1.24x [1.24, 1.25] vs best built-in dispatch_fast; throughput forward "
    "bfloat16 E=8,T=128: 2.50x [2.41, 2.56] vs dense_gemm, 1.24x [1.24, 1.25] vs best built-in "
    f"dispatch_fast · {MARKUP}: 2 wrong (wrong: ValueError: {MARKUP})"
)


def test_a_line_per_slot_against_the_baseline_and_the_best_built_in(tmp_path, cpu_facts):
    records = report_records(_report(tmp_path / "cpu", cpu_facts, _records(cpu_facts)))
    assert plugin_lines(records) == [LINE]  # dispatch_fast: the fastest of ours, not the baseline
    cell = findings_markdown(records, "cpu")
    lead = cell.split("\n\n")[1:3]
    assert lead[0].startswith("**Your kernels.** Each plug-in against its case's baseline")
    assert lead[1] == "- " + markdown_text(LINE)  # its markup escaped
    assert "<script>" not in cell


def test_many_cases_read_as_their_median_and_range(tmp_path, cpu_facts):
    big = skipped("moe", "throughput", "my_dispatch", "out of memory", facts=cpu_facts)
    records = [*_records(cpu_facts, tokens=(64, 128, 256)), big]
    records[-1] = dataclasses.replace(big, plugin=_source("my_dispatch"))
    frame = report_records(_report(tmp_path / "cpu", cpu_facts, records))
    (line,) = plugin_lines(frame)
    assert line.startswith(
        "moe.dispatch — my_dispatch: 3 ok, 1 skipped (skipped: out of memory); 2.50x over 3 "
        "cases (2.50–2.50) vs dense_gemm, 1.24x over 3 cases (1.24–1.24) vs the best built-in"
    )


def test_the_report_and_the_gallery_show_them_escaped(tmp_path, cpu_facts):
    root = tmp_path / "outputs"
    folder = _report(root / "cpu", cpu_facts, _records(cpu_facts))
    _report(root / "h100", cpu_facts, _records(cpu_facts, theirs=False))
    gallery = build_gallery(root).read_text()
    index, summary = (folder / "index.html").read_text(), (folder / "SUMMARY.md").read_text()
    for page in (index, gallery, summary):
        assert "Your kernels" in page and "<script>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the name, module, file, reason
    assert index.index("<h2>Your kernels</h2>") < index.index("<h2>Headlines</h2>")
    assert summary.index("## Your kernels") < summary.index("## Headlines")
    assert "sha256 0123456789abcdef · git 1a2b3c4d5e6f" in index
    (row,) = plugin_table(report_records(folder)).head(1).to_dict("records")
    assert row == {
        "slot": "moe.dispatch",
        "name": "my_dispatch",
        "case": "throughput forward bfloat16 E=8,T=64",
        "status": "ok",
        "vs baseline": "2.50x [2.41, 2.56] vs dense_gemm",
        "vs best built-in": "1.24x [1.24, 1.25] vs dispatch_fast",
        "code": "module my_kernels · file /home/me/my_kernels.py · sha256 0123456789abcdef · "
        "git 1a2b3c4d5e6f",
    }
    rows = gallery.split("<h2>Your kernels</h2>")[1].split("<h2>Headlines</h2>")[0]
    assert rows.count("<tr>") == 4 and "<td>h100</td>" not in rows  # only cpu's plug-ins


def test_without_plug_in_records_nothing_changes(tmp_path, cpu_facts):
    root = tmp_path / "outputs"
    folder = _report(root / "cpu", cpu_facts, _records(cpu_facts, theirs=False))
    records = report_records(folder)
    assert with_best_builtin(records) is records
    assert (plugin_lines(records), plugin_markdown(records)) == ([], "")
    assert plugin_sections(records) == ("", "") and gallery_section({"cpu": records}) == ""
    assert "Your kernels" not in findings_markdown(records, "cpu")
    index = (folder / "index.html").read_text()
    assert "Your kernels" not in index and "</p>\n<h2>Headlines</h2>" in index
    assert "Your kernels" not in build_gallery(root).read_text()


def test_a_repeated_report_aggregates_their_ratios_over_the_runs(tmp_path, cpu_facts):
    out = tmp_path / "outputs" / "cpu"
    for index in (1, 2):
        _save(out / f"run-{index}", cpu_facts, _records(cpu_facts, tokens=(64,)), f"id{index}")
    base = {k: v for k, v in fakes.measured_run("cpu", cpu_facts, []).items() if k != "notebooks"}
    write_aggregate_run(out, {**base, "repeat": 2})
    build_report(out)
    mine = aggregate_records(out).set_index("implementation").loc["my_dispatch"]
    assert (mine["plugin.sha256"], mine["best_builtin"]) == ("0123456789abcdef", "dispatch_fast")
    assert round(mine["vs_best"], 2) == 1.24
    assert "1.24x [1.24,<wbr> 1.25] vs dispatch_fast" in (out / "index.html").read_text()


def test_compare_and_the_store_keep_them_and_say_when_the_code_changed(tmp_path, cpu_facts):
    a = _report(tmp_path / "a" / "cpu", cpu_facts, _records(cpu_facts))
    b = _report(tmp_path / "b" / "cpu", cpu_facts, _records(cpu_facts, sha256="fedcba98"))
    c = compare_folders([a], [b])
    assert any(k.endswith("/my_dispatch/bfloat16/forward/E=8,T=64") for k in c.table["key"])
    assert (
        "Your code changed: moe.dispatch my_dispatch ran sha256 0123456789abcdef in A, fedcba98 "
        "in B: a difference may come from it." in to_text(c)
    )
    assert to_json(c)["code_changed"] == [
        {
            "slot": "moe.dispatch",
            "name": "my_dispatch",
            "a": ["0123456789abcdef"],
            "b": ["fedcba98"],
        }
    ]
    assert "code_changed" not in to_json(compare_folders([a], [a]))
    path = tmp_path / "history.sqlite"
    store.add_report(a, path)
    kept = [json.loads(r["record"])["plugin"] for r in store.records(path, ["r-cpu"])]
    assert _source("my_dispatch") in kept
