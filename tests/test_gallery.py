"""The gallery and the per-report sections, built from records only (no notebook is run)."""

import dataclasses
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from kernel_lib import __main__ as cli
from kernel_lib import gallery
from kernel_lib.aggregate import aggregate_records, write_aggregate_run
from kernel_lib.records import as_headline, measured, save_records, skipped, with_ratio
from kernel_lib.report import build_report
from kernel_lib.timing import Ratio, Timing

T = Timing(2.0, 1.9, 2.2, 1.8, 10, "perf_counter + cpu synchronize", None)


def _records(facts, speedup: float, *, fp8_runs: bool, dtype: str, tokens: int):
    at = {"facts": facts, "dtype": dtype, "shape": {"T": tokens, "E": 8}}
    base = measured("moe", "forward", "dense_gemm", T, flops=8e9, **at)
    fast = measured("moe", "forward", "dispatch_x", T, flops=4e9, **at)
    fast = dataclasses.replace(fast, check={"pass": True, "rel_error": 0.0})
    ratio = Ratio(speedup, speedup * 0.95, speedup * 1.05, 0.95, 10)
    moe = [
        base,
        as_headline(with_ratio(fast, base, ratio), "best dispatch vs dense GEMM"),
        as_headline(
            with_ratio(dataclasses.replace(fast, implementation="dispatch_y"), base, ratio),
            "best dispatch vs seed",
        ),
    ]
    fp8 = (
        [as_headline(with_ratio(fast, base, ratio), "fp8 vs bf16")]
        if fp8_runs
        else [
            as_headline(
                skipped("fp8", "linear", "fp8", "no FP8 units", facts=facts), "fp8 vs bf16"
            )
        ]
    )
    fp8 = [dataclasses.replace(r, topic="fp8") for r in fp8]
    return moe, fp8


def _run(platform: str, facts, notebooks, **extra) -> dict:
    return {
        "platform": platform,
        "parameters": f"parameters/{platform}.yaml",
        "description": "",
        "started_utc": "2026-01-01T00:00:00+00:00",
        "finished_utc": "2026-01-01T00:01:00+00:00",
        "run_id": f"r-{platform}",
        "git": "abc1234",
        "command": "python -m kernel_lib run",
        "environment": facts.as_dict(),
        "notebooks": [
            {
                "notebook": nb,
                "status": "ok",
                "detail": "",
                "seconds": 1.0,
                "run_id": f"r-{platform}",
            }
            for nb in notebooks
        ],
        **extra,
    }


def _report(
    folder: Path,
    facts,
    speedup: float,
    *,
    fp8_runs: bool = True,
    dtype: str = "bfloat16",
    tokens: int = 4096,
) -> Path:
    moe, fp8 = _records(facts, speedup, fp8_runs=fp8_runs, dtype=dtype, tokens=tokens)
    save_records(moe, "moe", folder)
    save_records(fp8, "fp8", folder)
    for nb in ("moe", "fp8"):  # the executed notebooks the index links to
        (folder / f"{nb}.html").write_text("<html></html>")
        (folder / f"{nb}.ipynb").write_text("{}")
    (folder / "run.json").write_text(json.dumps(_run(folder.name, facts, ["moe", "fp8"])))
    build_report(folder)
    return folder


@pytest.fixture
def outputs(tmp_path, cpu_facts):
    root = tmp_path / "outputs"
    _report(root / "h100", cpu_facts, 2.0)
    _report(root / "cpu", cpu_facts, 0.8, fp8_runs=False)
    (root / "local").mkdir()  # results saved by hand: no run.json, not a report
    return root


def _links(page: Path) -> list[str]:
    return re.findall(r'href="([^"]+)"', page.read_text())


def _headline_figures(outputs):
    folders = gallery.report_folders(outputs)
    rows = [gallery.headline_rows(gallery.report_records(f), f.name) for f in folders]
    return gallery.headline_figures(pd.concat(rows, ignore_index=True), [f.name for f in folders])


def test_gallery_lists_every_report_and_its_links_resolve(outputs):
    index = gallery.build_gallery(outputs)
    text = index.read_text()
    assert [p.name for p in gallery.report_folders(outputs)] == ["cpu", "h100"]
    assert 'href="cpu/index.html"' in text and 'href="h100/index.html"' in text
    assert "local" not in re.findall(r'href="([^"/]+)/', text)
    for link in _links(index):
        assert (outputs / link).exists(), link
    assert "abc1234" in text and "Test CPU" in text  # git revision and device of each report
    assert "2.00x [1.90, 2.10] vs dense_gemm" in text  # headlines side by side
    assert "skipped: no FP8 units" in text
    assert text.count("data:image/png;base64,") == 2  # one figure per topic: moe, fp8


def test_one_panel_per_headline_one_bar_per_platform(outputs):
    figures = _headline_figures(outputs)
    assert sorted(figures) == ["fp8", "moe"]
    assert len(figures["moe"].axes) == 2 and len(figures["fp8"].axes) == 1
    moe_panel = figures["moe"].axes[0]
    assert len(moe_panel.patches) == 2  # a bar for each platform
    ticks = [t.get_text() for t in moe_panel.get_yticklabels()]
    assert ticks == ["cpu · bfloat16", "h100 · bfloat16"]  # each bar's dtype
    assert moe_panel.get_title(loc="left").endswith("· bfloat16 E=8,T=4096")  # all measured so
    assert any(line.get_xdata()[0] == 1.0 for line in moe_panel.lines)  # the reference line
    fp8_panel = figures["fp8"].axes[0]
    assert len(fp8_panel.patches) == 1  # cpu skipped it: a reason in place of its bar
    assert any("no FP8 units" in t.get_text() for t in fp8_panel.texts)


def test_a_headline_measured_in_other_dtypes_across_platforms_says_so(tmp_path, cpu_facts):
    root = tmp_path / "outputs"
    _report(root / "h100", cpu_facts, 2.0)
    _report(root / "cpu", cpu_facts, 0.8, dtype="float32")
    panel = _headline_figures(root)["moe"].axes[0]
    assert [t.get_text() for t in panel.get_yticklabels()] == ["cpu · float32", "h100 · bfloat16"]
    assert panel.get_title(loc="left").endswith("(dtypes differ between platforms: see the table)")
    text = gallery.build_gallery(root).read_text()
    # the table says it too, with the shape
    assert "0.80x [0.76, 0.84] vs dense_gemm (slower) · float32 E=8,T=4096" in text
    assert "2.00x [1.90, 2.10] vs dense_gemm · bfloat16 E=8,T=4096" in text


def test_a_headline_measured_at_other_shapes_across_platforms_says_so(tmp_path, cpu_facts):
    root = tmp_path / "outputs"
    _report(root / "h100", cpu_facts, 2.0, tokens=16384)
    _report(root / "cpu", cpu_facts, 0.8)
    panel = _headline_figures(root)["moe"].axes[0]
    assert panel.get_title(loc="left").endswith("(shapes differ between platforms: see the table)")
    _report(root / "cpu", cpu_facts, 0.8, dtype="float32")
    panel = _headline_figures(root)["moe"].axes[0]
    assert "(dtypes and shapes differ between" in panel.get_title(loc="left")


def test_each_report_gets_its_plots_correctness_and_notebook_links(outputs):
    index = outputs / "h100" / "index.html"
    text = index.read_text()
    assert "<h2>Headlines</h2>" in text and "data:image/png;base64," in text
    assert "<h2>Correctness</h2>" in text and "checks passed" in text
    for link in _links(index):
        assert (index.parent / link).exists(), link
    summary = gallery.correctness_summary(gallery.report_records(outputs / "cpu"))
    by_notebook = summary.set_index("notebook")
    assert by_notebook.loc["moe", "checks passed"] == 2
    assert by_notebook.loc["fp8", "skipped"] == 1
    assert 'class="scroll"' in text and "overflow-x:auto" in text  # wide tables scroll


def test_report_command_rebuilds_from_records(outputs, capsys):
    (outputs / "h100" / "index.html").unlink()
    assert cli.main(["report", str(outputs / "h100"), "--gallery", str(outputs)]) == 0
    assert (outputs / "h100" / "index.html").exists() and (outputs / "index.html").exists()
    assert cli.main(["report", str(outputs / "local")]) == 2  # not a report folder


def test_repeated_report_aggregates_the_runs(tmp_path, cpu_facts):
    """run-1/ and run-2/ as the runner leaves them: the aggregate shows the median of the run
    medians, their min-max and the run ids, and links into each run."""
    out = tmp_path / "outputs" / "cpu"
    for index, median in ((1, 2.0), (2, 3.0)):
        run = out / f"run-{index}"
        run.mkdir(parents=True)
        timing = dataclasses.replace(T, median_ms=median, p10_ms=median * 0.9, p90_ms=median * 1.1)
        record = measured("moe", "forward", "dense_gemm", timing, facts=cpu_facts, flops=8e9)
        from kernel_lib.records import stamp

        rows = stamp([record], run_id=f"id{index}", platform="cpu")
        (run / "moe.results.json").write_text(
            json.dumps([dataclasses.asdict(r) for r in rows], default=list)
        )
        (run / "moe.html").write_text("<html></html>")
        (run / "moe.ipynb").write_text("{}")
        (run / "run.json").write_text(json.dumps(_run("cpu", cpu_facts, ["moe"])))
        build_report(run)
    base = {k: v for k, v in _run("cpu", cpu_facts, []).items() if k != "notebooks"}
    write_aggregate_run(out, {**base, "repeat": 2})
    build_report(out)
    (row,) = aggregate_records(out).to_dict("records")
    assert row["median_ms"] == 2.5 and (row["median_ms_min"], row["median_ms_max"]) == (2.0, 3.0)
    assert row["run_ids"] == "run-1:id1 run-2:id2"
    text = (out / "index.html").read_text()
    assert "2 runs" in text and "2–3" in text and "run-1:id1 run-2:id2" in text
    for link in _links(out / "index.html"):
        assert (out / link).exists(), link
    assert "run-2/moe.html" in (out / "SUMMARY.md").read_text()
    gallery.build_gallery(out.parent)
    assert "<td>2</td>" in (out.parent / "index.html").read_text()  # its runs
