"""The gallery and the per-report sections, built from records only (no notebook is run)."""

import dataclasses
import html
import json
import re
import shutil
from pathlib import Path
from urllib.parse import unquote

import nbformat
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from kernel_lib import __main__ as cli
from kernel_lib.headlines import headline, key_of
from kernel_lib.records import (
    as_headline,
    measured,
    save_records,
    skipped,
    stamp,
    to_dicts,
    with_ratio,
)
from kernel_lib.report import trends
from kernel_lib.report.aggregate import aggregate_records, write_aggregate_run
from kernel_lib.report.findings import correctness_summary, figure_text, headline_rows
from kernel_lib.report.gallery import build_gallery
from kernel_lib.report.lead import findings_markdown
from kernel_lib.report.pages import build_report, rebuild_reports
from kernel_lib.report.panels import CEILING_COLOUR, COLOURS, Panel, panels
from kernel_lib.report.read import REFERENCE_PLATFORM, read_report, report_folders, report_records
from kernel_lib.report.trends import store_trends
from kernel_lib.results import files as result_files
from kernel_lib.results import store
from kernel_lib.run.execute import NotebookResult
from kernel_lib.run.runner import run_repeated
from kernel_lib.timing import Ratio, Timing
from tests import fakes
from tests.fakes import MARKUP

T = Timing(2.0, 1.9, 2.2, 1.8, 10, "perf_counter + cpu synchronize", None)


SEED, DENSE = "moe.seed_same_dtype", "moe.forward_vs_dense"  # a ratio; a fraction of a ceiling


def _records(facts, speedup: float, *, fp8_runs: bool, dtype: str, tokens: tuple[int, ...]):
    """moe: at each of `tokens`, dispatch_x declared against the dense GEMM (a ceiling) and
    dispatch_y against the seed (a ratio); fp8: its linear headline, measured or skipped."""
    ratio = Ratio(speedup, speedup * 0.95, speedup * 1.05, 0.95, 10)
    moe = []
    for t in tokens:
        at = {"facts": facts, "dtype": dtype, "shape": {"T": t, "E": 8}}
        base = measured("moe", "forward", "dense_gemm", T, flops=8e9, **at)
        fast = measured("moe", "forward", "dispatch_x", T, flops=4e9, **at)
        fast = dataclasses.replace(fast, check={"pass": True, "rel_error": 0.0})
        moe += [
            base,
            as_headline(with_ratio(fast, base, ratio), DENSE),
            as_headline(
                with_ratio(dataclasses.replace(fast, implementation="dispatch_y"), base, ratio),
                SEED,
            ),
        ]
    at = {"facts": facts, "dtype": dtype, "shape": {"T": tokens[0], "E": 8}}
    fast = measured("moe", "forward", "dispatch_x", T, flops=4e9, **at)
    base = measured("moe", "forward", "dense_gemm", T, flops=8e9, **at)
    fp8 = (
        [as_headline(with_ratio(fast, base, ratio), "fp8.linear_vs_bf16")]
        if fp8_runs
        else [
            as_headline(
                skipped("fp8", "linear", "fp8", "no FP8 units", facts=facts),
                "fp8.linear_vs_bf16",
            )
        ]
    )
    fp8 = [dataclasses.replace(r, topic="fp8") for r in fp8]
    return moe, fp8


def _report(
    folder: Path,
    facts,
    speedup: float,
    *,
    fp8_runs: bool = True,
    dtype: str = "bfloat16",
    tokens: tuple[int, ...] = (4096,),
    platform: str = "",
) -> Path:
    moe, fp8 = _records(facts, speedup, fp8_runs=fp8_runs, dtype=dtype, tokens=tokens)
    save_records(moe, "moe", folder)
    save_records(fp8, "fp8", folder)
    for nb in ("moe", "fp8"):  # the executed notebooks the index links to
        (folder / f"{nb}.html").write_text("<html></html>")
        (folder / f"{nb}.ipynb").write_text("{}")
    run = fakes.measured_run(platform or folder.name, facts, ["moe", "fp8"])
    (folder / "run.json").write_text(json.dumps(run))
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


def _rows(outputs: Path) -> tuple[pd.DataFrame, list[str]]:
    """Every report's headline rows under `outputs`, as the gallery reads them, and the platforms."""
    folders = report_folders(outputs)
    rows = [headline_rows(report_records(f), f.name) for f in folders]
    return pd.concat(rows, ignore_index=True), [f.name for f in folders]


def _panels(outputs: Path) -> dict[str, list[Panel]]:
    return panels(*_rows(outputs))


def _by_key(outputs: Path) -> dict[str, Panel]:
    found = [p for topic in _panels(outputs).values() for p in topic]
    assert len({p.key for p in found}) == len(found)  # one panel per key
    return {p.key: p for p in found}


def _ticks(panel: Panel) -> list[str]:
    return [t.get_text() for t in panel.figure.axes[0].get_yticklabels()]


def _colours(panel: Panel) -> list[str]:
    return [to_hex(bar.get_facecolor()) for bar in panel.figure.axes[0].patches]


def test_gallery_lists_every_report_and_its_links_resolve(outputs):
    index = build_gallery(outputs)
    text = index.read_text()
    assert [p.name for p in report_folders(outputs)] == ["cpu", "h100"]
    assert 'href="cpu/index.html"' in text and 'href="h100/index.html"' in text
    assert "local" not in re.findall(r'href="([^"/]+)/', text)
    for link in _links(index):
        assert (outputs / link).exists(), link
    assert "abc1234" in text and "Test CPU" in text  # git revision and device of each report
    assert "cpu 0123456789ab, locked" in text  # the environment that measured it
    assert "2.00x [1.90, 2.10] vs dense_gemm" in text  # headlines side by side: a ratio
    assert "2.00 [1.90, 2.10] of the dense GEMM pair of the same FLOPs" in text  # a ceiling
    assert "skipped: no FP8 units" in text
    assert text.count("data:image/png;base64,") == 3  # one panel per key: 2 moe, 1 fp8
    assert sorted(re.findall(r'data-key="([^"]+)"', text)) == sorted(
        ["fp8.linear_vs_bf16", DENSE, SEED]
    )


def test_one_panel_per_headline_key_one_bar_per_platform(outputs):
    found = _panels(outputs)
    assert sorted(found) == ["fp8", "moe"]
    assert [p.key for p in found["moe"]] == [DENSE, SEED] and len(found["fp8"]) == 1
    for p in found["moe"]:
        assert (p.bars, p.platforms) == (2, 2)  # a bar for each platform
        assert _ticks(p) == ["cpu", "h100"]  # one shape each: the platform names the bar
        impl = {DENSE: "dispatch_x", SEED: "dispatch_y"}[p.key]
        assert p.caption == [
            f"cpu: {impl} bfloat16 E=8,T=4096",
            f"h100: {impl} bfloat16 E=8,T=4096",
        ]
        assert p.figure._suptitle.get_text() == headline(p.key).title  # the declared title
        assert any(line.get_xdata()[0] == 1.0 for line in p.figure.axes[0].lines)  # line at 1
    fp8 = found["fp8"][0]
    assert (fp8.key, fp8.bars, fp8.platforms) == ("fp8.linear_vs_bf16", 1, 1)
    assert any("no FP8 units" in t.get_text() for t in fp8.figure.axes[0].texts)  # cpu: why


def test_a_ratio_is_coloured_by_its_verdict_a_ceiling_is_not(outputs):
    by_key = _by_key(outputs)
    rows, _ = _rows(outputs)
    seed, dense = rows[rows["key"] == SEED], rows[rows["key"] == DENSE]
    assert set(seed["kind"]) == {"ratio"} and list(seed["verdict"]) == ["slower", "faster"]
    assert _colours(by_key[SEED]) == [COLOURS["slower"], COLOURS["faster"]]  # cpu 0.8, h100 2
    assert set(dense["kind"]) == {"ceiling"} and set(dense["verdict"]) == {""}
    assert set(dense["against"]) == {"the dense GEMM pair of the same FLOPs"}
    assert _colours(by_key[DENSE]) == [CEILING_COLOUR] * 2  # 0.8 of it is no "slower"
    assert "fraction of the dense GEMM pair" in by_key[DENSE].figure.axes[0].get_xlabel()
    assert [figure_text(r) for _, r in dense.iterrows()] == [
        "0.80 [0.76, 0.84] of the dense GEMM pair of the same FLOPs",
        "2.00 [1.90, 2.10] of the dense GEMM pair of the same FLOPs",
    ]


def test_a_headline_measured_in_other_dtypes_across_platforms_is_one_panel(tmp_path, cpu_facts):
    root = tmp_path / "outputs"
    _report(root / "h100", cpu_facts, 2.0)
    _report(root / "cpu", cpu_facts, 0.8, dtype="float32")
    seed = _by_key(root)[SEED]
    assert (seed.bars, seed.platforms) == (2, 2) and _ticks(seed) == ["cpu", "h100"]
    assert seed.caption == [  # each bar's dtype, beside it
        "cpu: dispatch_y float32 E=8,T=4096",
        "h100: dispatch_y bfloat16 E=8,T=4096",
    ]
    text = build_gallery(root).read_text()
    # the table says it too, with the shape
    assert (
        "0.80x [0.76, 0.84] vs dense_gemm (slower)<br><small>dispatch_y float32 E=8,<wbr>T=4096"
        in text
    )
    assert "2.00x [1.90, 2.10] vs dense_gemm<br><small>dispatch_y bfloat16 E=8,<wbr>T=4096" in text


def test_a_headline_measured_at_other_shapes_across_platforms_is_one_panel(tmp_path, cpu_facts):
    root = tmp_path / "outputs"
    _report(root / "h100", cpu_facts, 2.0, tokens=(16384,))
    _report(root / "cpu", cpu_facts, 0.8)
    seed = _by_key(root)[SEED]
    assert (seed.bars, seed.platforms) == (2, 2)
    assert _ticks(seed) == ["cpu", "h100"]  # each platform's own size: the caption says which
    assert seed.caption == [
        "cpu: dispatch_y bfloat16 E=8,T=4096",
        "h100: dispatch_y bfloat16 E=8,T=16384",
    ]


def test_a_platform_with_several_shapes_of_a_headline_names_them_on_its_bars(tmp_path, cpu_facts):
    root = tmp_path / "outputs"
    _report(root / "h100", cpu_facts, 2.0, tokens=(4096, 16384))
    _report(root / "cpu", cpu_facts, 0.8)
    by_key = _by_key(root)
    for key in (SEED, DENSE):
        assert (by_key[key].bars, by_key[key].platforms) == (3, 2)
        # only what tells h100's two apart (T), not what they share (E)
        assert _ticks(by_key[key]) == ["cpu", "h100 T=4096", "h100 T=16384"]
    text = build_gallery(root).read_text()
    assert text.count('data-bars="3"') == 2 and text.count("data:image/png;base64,") == 3


def test_legacy_labels_of_an_old_report_read_back_as_keys(outputs):
    """A report written before keys (its results.json and results.csv hold label text) meets a
    new one in the same panels."""
    old = {
        DENSE: "MoE forward: dispatch chosen here vs dense GEMM, same FLOPs (T=4096, D=512)",
        SEED: "MoE forward: dispatch chosen here vs seed-style, both float32",
        "fp8.linear_vs_bf16": "FP8 linear (fp8_linear_tensorwise_dynamic) vs bf16 linear, n=1024",
    }
    for name in ("moe", "fp8"):
        path = outputs / "h100" / f"{name}.results.json"
        saved = json.loads(path.read_text())
        for row in saved:
            row["headline"] = old.get(row["headline"], row["headline"])
        assert any(row["headline"] in old.values() for row in saved)
        path.write_text(json.dumps(saved))
    assert set(report_records(outputs / "h100")["headline"].dropna()) == set(old)
    by_key = _by_key(outputs)
    assert set(by_key) == set(old)
    assert all(p.platforms == 2 for k, p in by_key.items() if k != "fp8.linear_vs_bf16")
    # a report that keeps only its results.csv (outputs/reference) reads its labels as keys too
    table = outputs / "h100" / "results.csv"
    frame = pd.read_csv(table).assign(headline=lambda f: f["headline"].map(old))
    assert set(frame["headline"].dropna()) == set(old.values())
    frame.to_csv(table, index=False)
    for path in (outputs / "h100").glob("*.results.json"):
        path.unlink()
    assert set(report_records(outputs / "h100")["headline"].dropna()) == set(old)
    assert all(p.platforms == 2 for k, p in _by_key(outputs).items() if k != "fp8.linear_vs_bf16")


def test_each_report_gets_its_plots_correctness_and_notebook_links(outputs):
    index = outputs / "h100" / "index.html"
    text = index.read_text()
    assert "<h2>Headlines</h2>" in text and "data:image/png;base64," in text
    assert "<summary>Correctness: checks per notebook</summary>" in text  # folded
    assert "checks passed" in text and "<h2>Correctness</h2>" not in text
    assert "<details><summary>Environment</summary>" in text
    for link in _links(index):
        assert (index.parent / link).exists(), link
    summary = correctness_summary(report_records(outputs / "cpu"))
    by_notebook = summary.set_index("notebook")
    assert by_notebook.loc["moe", "checks passed"] == 2
    assert by_notebook.loc["fp8", "skipped"] == 1
    assert 'class="scroll"' in text and "overflow-wrap:break-word" in text  # wide tables wrap


# A folder name (from `cloud collect`, an untarred archive) that runs a script where a page shows
# it unescaped; one that a link would read as a scheme; one that matplotlib would read as mathtext.
NAMES = (MARKUP, "javascript:alert(1)", "a$\\nope{$b #?")


def _named(root: Path, cpu_facts) -> Path:
    """Reports under `root` whose folders, platforms and an environment key are NAMES."""
    _report(root / "cpu", cpu_facts, 0.8)
    for name in NAMES:
        folder = _report(root / name, cpu_facts, 2.0, platform=name)
        run = json.loads((folder / "run.json").read_text())
        run["environment"][name] = name
        (folder / "run.json").write_text(json.dumps(run))
        build_report(folder)
    return root


def test_names_from_outside_are_text_in_every_page(tmp_path, cpu_facts):
    root = _named(tmp_path / "outputs", cpu_facts)
    gallery = build_gallery(root)
    shown = {gallery: NAMES, **{root / name / "index.html": (name,) for name in NAMES}}
    for page, names in shown.items():
        text = page.read_text()
        assert "<img src=x" not in text and 'href="javascript:' not in text, page
        assert all(html.escape(name) in text for name in names), page
        for link in _links(page):
            assert (page.parent / unquote(link)).exists(), (page, link)
    headline_table = gallery.read_text().split("<summary>Every headline as a table</summary>")[1]
    assert "<th>x&lt;img src=x" in headline_table  # the platform's column: the probe's finding


def test_the_findings_cell_shows_names_as_text(tmp_path, cpu_facts):
    folder = _named(tmp_path / "outputs", cpu_facts) / MARKUP
    cell = findings_markdown(report_records(folder), MARKUP)
    assert "<img src=x" not in cell and "x&lt;img src=x onerror" in cell


def test_summary_lists_the_headlines_one_per_line_by_notebook(outputs):
    summary = (outputs / "cpu" / "SUMMARY.md").read_text()
    headlines_md = summary.split("## Headlines\n\n", 1)[1].split("\n## ", 1)[0]
    sections = {
        block.split("\n", 1)[0]: block.split("\n\n", 1)[1].strip().splitlines()
        for block in headlines_md.split("### ")[1:]
    }  # one "### <notebook>" each, a line per headline
    assert sections == {
        "moe": [
            "- MoE forward: dispatch chosen here / dense GEMM: 0.80 [0.76, 0.84] of the dense "
            "GEMM pair of the same FLOPs (dispatch_x bfloat16 E=8,T=4096)",
            "- MoE forward: dispatch chosen here vs seed-style, both fp32: 0.80x [0.76, 0.84] vs "
            "dense_gemm (slower) (dispatch_y bfloat16 E=8,T=4096)",
        ],
        "fp8": ["- FP8 linear vs bf16 linear: skipped: no FP8 units"],
    }
    assert "| headlines" not in summary  # the notebooks table has no headlines column


def test_a_shape_stays_typed_from_record_to_bar_label(tmp_path, cpu_facts):
    """Records of several shapes load with gaps (a float column): the headline row's shape is the
    record's dict again, whole numbers as ints, and the bar and caption read them as saved."""
    root = tmp_path / "outputs"
    _report(root / "h100", cpu_facts, 2.0, tokens=(4096, 16384), fp8_runs=False)
    records = report_records(root / "h100")
    assert records["shape.T"].dtype == float  # the fp8 skip has no shape: a gap
    rows = headline_rows(records, "h100")
    shapes = list(rows.loc[rows["key"] == SEED, "shape"])
    assert shapes == [{"E": 8, "T": 4096}, {"E": 8, "T": 16384}]
    assert all(type(v) is int for shape in shapes for v in shape.values())
    assert _ticks(_by_key(root)[SEED]) == ["h100 T=4096", "h100 T=16384"]  # never T=4096.0


def _remember_runs(outputs: Path, folders: tuple[str, ...]) -> None:
    """Each folder's report added to the store as a run of its own, one day after another."""
    for day, folder in enumerate(folders, 1):
        run_file = outputs / folder / "run.json"
        run = json.loads(run_file.read_text())
        run.update(run_id=f"r{day}", started_utc=f"2026-01-0{day}T00:00:00+00:00")
        run["notebooks"] = [{**nb, "run_id": f"r{day}"} for nb in run["notebooks"]]
        run_file.write_text(json.dumps(run))
        store.remember(outputs / folder)


def test_the_check_run_at_ci_sizes_is_listed_apart_without_bars(outputs, cpu_facts):
    """outputs/reference (the ci platform file's tiny sizes, for nbval) is a check run: listed
    under its own heading, never a bar or a column beside the platforms, nor a trend line."""
    _report(outputs / "reference", cpu_facts, 0.5, platform=REFERENCE_PLATFORM)
    _remember_runs(outputs, ("cpu", "reference", "cpu", "reference"))  # two runs each
    text = build_gallery(outputs).read_text()
    platforms, rest = text.split("<h2>Check run at CI sizes</h2>", 1)
    checks, headlines = rest.split("<h2>Headlines</h2>", 1)
    assert 'href="reference/index.html"' in checks and "reference" not in platforms
    assert "reference" not in headlines and "0.50x" not in headlines  # no bar, no column
    assert sorted(re.findall(r'data-platforms="(\d)"', headlines)) == ["1", "2", "2"]
    trend_points = re.findall(r'data-key="moe[^"]*"[^>]*data-trend-points="(\d)"', headlines)
    assert trend_points == ["2", "2"]  # cpu's two runs alone
    trends, _ = store_trends(outputs)
    assert set(trends["platform"]) == {"cpu", REFERENCE_PLATFORM}  # the store keeps both


def test_a_users_runs_of_the_ci_file_are_a_platform_with_its_trend(outputs, cpu_facts):
    """`run --platform ci` twice into outputs/ci: its bars and a two-point trend, as any
    platform's; only the folder `make reference` writes is the check run."""
    _report(outputs / "ci", cpu_facts, 0.5, platform=REFERENCE_PLATFORM)
    _report(outputs / "reference", cpu_facts, 0.25, platform=REFERENCE_PLATFORM)
    _remember_runs(outputs, ("ci", "reference", "ci"))
    text = build_gallery(outputs).read_text()
    platforms, rest = text.split("<h2>Check run at CI sizes</h2>", 1)
    headlines = rest.split("<h2>Headlines</h2>", 1)[1]
    assert 'href="ci/index.html"' in platforms and "0.50x" in headlines
    assert "0.25x" not in headlines
    trend_points = re.findall(r'data-key="moe[^"]*"[^>]*data-trend-points="(\d)"', headlines)
    assert trend_points == ["2", "2"]  # outputs/ci's two runs, not the reference's


def reading(monkeypatch) -> list[Path]:
    """The results files read from now on (run.json files are read by the same function)."""
    read, real = [], result_files._read_json
    monkeypatch.setattr(
        result_files,
        "_read_json",
        lambda path: (
            (str(path).endswith(".results.json") and read.append(Path(path))) or real(path)
        ),
    )
    return read


def test_a_gallery_elsewhere_rebuilds_its_own_folders_reports(outputs, capsys):
    """`report --gallery DIR` without folders rebuilds the reports in DIR, never this checkout's
    outputs/."""
    assert cli.main(["report", "--gallery", str(outputs)]) == 0
    rebuilt = [line.split(" ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert sorted(rebuilt[:-1]) == sorted(str(f / "index.html") for f in report_folders(outputs))
    assert rebuilt[-1] == str(outputs / "index.html")


def test_each_results_file_is_read_once_for_the_reports_and_the_gallery(outputs, monkeypatch):
    read = reading(monkeypatch)
    assert cli.main(["report", str(outputs / "h100"), "--gallery", str(outputs)]) == 0
    files = sorted(outputs.glob("*/*.results.json"))
    assert sorted(read) == files and len(files) == 4  # h100's for its pages and the gallery


def test_a_runs_records_are_read_once_for_findings_report_and_gallery(
    tmp_path, monkeypatch, cpu_facts, one_notebook_plan
):
    """The runner reads a notebook's results once, for its findings cell; its report's pages,
    the results store and the gallery take those records, and the gallery's trends take the run
    as it was stored, not read back from outputs/history.sqlite."""
    plan = one_notebook_plan("x = 1")

    def execute(notebook, output, parameters, **options):  # a notebook that saved a headline
        nbformat.write(
            nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# t")]), output
        )
        base = measured("moe", "forward", "dense_gemm", T, facts=cpu_facts)
        ratio = Ratio(1.5, 1.4, 1.6, 0.95, 10)
        fast = with_ratio(measured("moe", "forward", "x", T, facts=cpu_facts), base, ratio)
        save_records([base, as_headline(fast, DENSE)], "timed", output.parent)
        return NotebookResult(notebook.stem, "ok", "", 0.0)

    read = reading(monkeypatch)
    monkeypatch.setattr("kernel_lib.run.runner.execute", execute)
    asked = []  # the run ids the gallery's trends asked the store for
    real = trends.store.records
    monkeypatch.setattr(
        trends.store, "records", lambda path, ids, *a: asked.append(ids) or real(path, ids, *a)
    )
    out = tmp_path / "outputs" / "p"
    run_repeated(plan, out, 1, progress=False)
    assert len(read) == 1 and read[0].parent != out  # once, in staging, before the swap
    assert "What this notebook found" in (out / "timed.ipynb").read_text()
    (stored,) = store.runs(out.parent / store.STORE_NAME)
    assert asked and stored["run_id"] not in {i for ids in asked for i in ids}
    assert list(pd.read_csv(out / "results.csv")["implementation"]) == ["dense_gemm", "x"]
    assert "p/index.html" in (out.parent / "index.html").read_text()  # and the gallery's


def test_the_gallery_takes_the_reports_as_read(outputs, monkeypatch):
    reports = [read_report(f) for f in report_folders(outputs)]
    monkeypatch.setattr("kernel_lib.report.gallery.read_report", None)  # never called
    assert "2.00x [1.90, 2.10]" in build_gallery(outputs, reports).read_text()


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
        rows = stamp([record], run_id=f"id{index}", platform="cpu")
        (run / "moe.results.json").write_text(
            json.dumps([dataclasses.asdict(r) for r in rows], default=list)
        )
        (run / "moe.html").write_text("<html></html>")
        (run / "moe.ipynb").write_text("{}")
        (run / "run.json").write_text(json.dumps(fakes.measured_run("cpu", cpu_facts, ["moe"])))
        build_report(run)
    base = {k: v for k, v in fakes.measured_run("cpu", cpu_facts, []).items() if k != "notebooks"}
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
    build_gallery(out.parent)
    assert "<td>2</td>" in (out.parent / "index.html").read_text()  # its runs


def test_a_repeated_reports_verdict_holds_only_if_it_held_in_every_run(tmp_path, cpu_facts):
    out = tmp_path / "cpu"
    for index, low in ((1, 1.1), (2, 0.9)):  # run 2's interval holds 1: the envelope does too
        run = out / f"run-{index}"
        run.mkdir(parents=True)
        base = measured("moe", "forward", "dense_gemm", T, facts=cpu_facts)
        fast = with_ratio(base, base, Ratio(1.2, low, 1.3, 0.95, 10))
        rows = stamp([dataclasses.replace(fast, implementation="x")], run_id="r", platform="cpu")
        (run / "moe.results.json").write_text(json.dumps(to_dicts(rows)))
        (run / "run.json").write_text(json.dumps(fakes.measured_run("cpu", cpu_facts, ["moe"])))
    (row,) = aggregate_records(out).to_dict("records")
    assert (row["ratio_low"], row["ratio_high"]) == (0.9, 1.3)
    assert row["verdict"] == "no clear difference"  # records.verdict of the envelope


COMMITTED = Path(__file__).resolve().parents[2] / "outputs"


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """outputs/cpu and outputs/h100 as committed, rebuilt (reports and gallery) in a copy."""
    root = tmp_path_factory.mktemp("committed") / "outputs"
    for platform in ("cpu", "h100"):
        shutil.copytree(COMMITTED / platform, root / platform)
    rebuild_reports(outputs=root)
    build_gallery(root)
    return root


@pytest.mark.slow
def test_committed_headlines_of_both_platforms_meet_in_one_panel(committed):
    rows, platforms = _rows(committed)
    assert platforms == ["cpu", "h100"]
    ok = rows[rows["status"] == "ok"]
    both = sorted(k for k, mine in ok.groupby("key") if set(mine["platform"]) == {"cpu", "h100"})
    assert len(both) >= 6 and {DENSE, SEED, "backend.bf16_gemm_vs_fp32"} <= set(both)
    found = [p for topic in panels(rows, platforms).values() for p in topic]
    gallery = (committed / "index.html").read_text()
    for key in both:
        (panel,) = [p for p in found if p.key == key]  # one panel, whatever each one's shape
        assert panel.platforms == 2 and panel.bars == (ok["key"] == key).sum() >= 2, key
        ticks = _ticks(panel)
        assert {t.split()[0] for t in ticks} == {"cpu", "h100"}, key  # a bar of each platform
        assert len(set(ticks)) == len(ticks), ticks  # bars told apart
        assert gallery.count(f'data-key="{key}"') == 1, key


def test_committed_headline_labels_all_map_to_declared_keys():
    """Every headline a committed report carries, as saved (a key, or a label of a report written
    before keys), is a declared key or maps to one."""
    found = set()
    for path in COMMITTED.glob("*/*.results.json"):
        found |= {r["headline"] for r in json.loads(path.read_text()) if r.get("headline")}
    for path in COMMITTED.glob("*/results.csv"):
        table = pd.read_csv(path, low_memory=False)
        if "headline" in table:
            found |= set(table["headline"].dropna())
    assert len(found) >= 10
    unmapped = sorted(label for label in found if headline(key_of(label)) is None)
    assert unmapped == []
