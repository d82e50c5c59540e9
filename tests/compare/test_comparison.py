"""`compare A... -- B...` (compare.comparison, runs, command, render): report folders record by
record, exit codes, bad input in one line, text, JSON and HTML, the cross-platform mode. The
rules for one record: test_verdict.py."""

import dataclasses
import json
import re

import pandas as pd
import pytest

from kernel_lib import compare
from kernel_lib.records import RESULTS_SUFFIX, Record
from tests.fakes import MARKUP, RUN

VERDICT_RE = re.compile(r"\b(" + "|".join(compare.VERDICT_WORDS) + r")\b")
JITTER = (1.0, 1.02, 0.98, 1.01, 0.99)  # run-to-run noise of the fixture runs
N64 = {"n": 64}  # the shape of every record here


@pytest.fixture
def timed(make_record):
    """`timed(case, ms, *, device="Test CPU", **fields)`: gemm/<case>/torch_mm at n=64 timed at
    `ms`: p10 and p90 at 0.95 and 1.05 of it, three samples within 3 %; no check."""

    def timed(case: str, ms: float, *, device="Test CPU", **fields) -> Record:
        spread = {
            "p10_ms": ms * 0.95,
            "p90_ms": ms * 1.05,
            "min_ms": ms * 0.9,
            "samples": (ms * 0.97, ms, ms * 1.03),
            "tflops": None,
            "check": None,
            "metrics": {},
        }
        return make_record(case, ms, device=device, shape=N64, **{**spread, **fields})

    return timed


@pytest.fixture
def write_report(make_run):
    """`write_report(folder, records, *, platform="cpu", device="Test CPU", run_id="r",
    stale=False)`: a report of one run of the bench notebook on `device` (make_run); `stale`: its
    results left from an earlier run."""

    def write(folder, records, *, platform="cpu", device="Test CPU", run_id="r", stale=False):
        environment = {**RUN["environment"], "name": device}
        entry = {"stale_results": "old"} if stale else None
        return make_run(
            folder, records, platform=platform, run_id=run_id, environment=environment, entry=entry
        )

    return write


@pytest.fixture
def side(timed, write_report):
    """`side(root, name, runs=3, *, slow=1.0, platform="cpu", device="Test CPU", extra=None)`: a
    folder with `run-<k>/` subfolders: records a, b, c; record `b` scaled by `slow`."""

    def side(root, name, runs=3, *, slow=1.0, platform="cpu", device="Test CPU", extra=None):
        top = root / name
        for k in range(runs):
            j = JITTER[k]
            records = [
                timed("a", 1.0 * j, device=device),
                timed("b", 2.0 * j * slow, device=device),
                timed("c", 4.0 / j, device=device),
            ] + list(extra or [])
            write_report(top / f"run-{k + 1}", records, platform=platform, device=device, run_id=k)
        return top

    return side


def verdicts(c) -> dict:
    return dict(zip(c.table["key"].str.split("/").str[1], c.table["verdict"]))


# --------------------------------------------------------------------------------- verdicts


def test_same_data_nothing_slower_exit_0(tmp_path, capsys, side):
    a, b = side(tmp_path, "a"), side(tmp_path, "b")
    c = compare.compare_folders([a], [b])
    assert set(c.table["verdict"]) == {"same"} and c.exit_code == 0
    assert compare.cli([str(a), "--", str(b)]) == 0
    assert "nothing beyond the factor" in capsys.readouterr().out


def test_a_change_of_environment_is_marked(tmp_path, capsys, side):
    a, b = side(tmp_path, "a"), side(tmp_path, "b")
    assert compare.cli([str(a), "--", str(b)]) == 0
    assert "Environment changed" not in capsys.readouterr().out
    for path in b.glob("run-*/run.json"):
        run = json.loads(path.read_text())
        run["environment"]["lock"] = "cpu 0123456789ab, 2 packages differ from the lock"
        path.write_text(json.dumps(run))
    assert compare.cli([str(a), "--", str(b), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {r["lock"] for r in out["b"]} == {"cpu 0123456789ab, 2 packages differ from the lock"}
    assert compare.cli([str(a), "--", str(b)]) == 0
    assert "Environment changed: A ran under cpu " in capsys.readouterr().out


def test_one_record_2x_slower_in_3_runs_a_side_is_slower_exit_1(tmp_path, capsys, side):
    a, b = side(tmp_path, "a"), side(tmp_path, "b", slow=2.0)
    c = compare.compare_folders([a], [b])
    assert verdicts(c) == {"a": "same", "b": "slower", "c": "same"}
    row = c.table.set_index("verdict").loc["slower"]
    assert row["ratio"] == pytest.approx(2.0) and row["p"] == pytest.approx(0.05)
    assert (row["a_runs"], row["b_runs"]) == (3, 3)
    assert compare.cli([str(a), "--", str(b)]) == 1
    assert "slower" in capsys.readouterr().out
    # the reverse direction is `faster`, which is no failure
    assert verdicts(compare.compare_folders([b], [a]))["b"] == "faster"
    assert compare.cli([str(b), "--", str(a)]) == 0


def test_runs_given_as_several_folders_per_side(tmp_path, side):
    a = [str(p) for p in sorted(side(tmp_path, "a").glob("run-*"))]
    b = [str(p) for p in sorted(side(tmp_path, "b", slow=2.0).glob("run-*"))]
    c = compare.compare_folders(a, b)
    assert verdicts(c)["b"] == "slower" and len(c.a) == len(c.b) == 3


def test_a_repeated_report_counts_as_its_runs_not_its_aggregate(
    tmp_path, timed, write_report, side
):
    a, b = side(tmp_path, "a"), side(tmp_path, "b", slow=2.0)
    # the folder's own aggregate records (and a non-numbered folder) are not runs
    write_report(tmp_path / "agg", [timed("b", 100.0)]).rename(tmp_path / "x")
    (tmp_path / "x" / f"bench{RESULTS_SUFFIX}").rename(b / f"bench{RESULTS_SUFFIX}")
    (b / "run-old").mkdir()
    c = compare.compare_folders([a], [b])
    assert [r.folder.name for r in c.b] == ["run-1", "run-2", "run-3"]
    assert verdicts(c)["b"] == "slower"


def test_one_run_a_side_with_too_few_samples_is_unconfirmed_exit_0(tmp_path, side):
    a, b = side(tmp_path, "a", runs=1), side(tmp_path, "b", runs=1, slow=2.0)  # 3 samples each
    c = compare.compare_folders([a], [b])
    assert verdicts(c)["b"] == "unconfirmed" and c.exit_code == 0
    assert pd.isna(c.table.set_index("verdict").loc["unconfirmed", "p"])  # no test with 1 run


def test_ok_to_failed_is_lost_exit_1(tmp_path, timed, write_report, make_record):
    a = write_report(tmp_path / "a", [timed("a", 1.0), timed("b", 2.0)])
    b = write_report(
        tmp_path / "b", [timed("a", 1.0), make_record("b", status="failed", shape=N64)]
    )
    c = compare.compare_folders([a], [b])
    assert verdicts(c) == {"a": "same", "b": "lost"} and c.exit_code == 1
    for status in ("skipped", "wrong"):
        b2 = write_report(
            tmp_path / status, [timed("a", 1.0), make_record("b", status=status, shape=N64)]
        )
        assert verdicts(compare.compare_folders([a], [b2]))["b"] == "lost"
    back = compare.compare_folders([b], [a])
    assert verdicts(back)["b"] == "recovered" and back.exit_code == 0


def test_new_and_gone(tmp_path, timed, write_report):
    a = write_report(tmp_path / "a", [timed("a", 1.0), timed("old", 2.0)])
    b = write_report(tmp_path / "b", [timed("a", 1.0), timed("fresh", 2.0)])
    c = compare.compare_folders([a], [b])
    assert verdicts(c) == {"a": "same", "old": "gone", "fresh": "new"}
    assert c.exit_code == 0


def test_correctness_figures_that_changed_are_listed_apart(tmp_path, timed, write_report):
    def rec(rel_error, sqnr, dropped, tokens_per_s):
        return timed(
            "q",
            1.0,
            check={"rel_error": rel_error, "max_abs_error": 0.1, "tolerance": 0.03, "pass": True},
            metrics={"sqnr_db": sqnr, "dropped": dropped, "tokens_per_s": tokens_per_s},
        )

    a = write_report(tmp_path / "a", [rec(0.001, 40.0, 3, 1000.0)])
    b = write_report(tmp_path / "b", [rec(0.002, 40.0, 5, 2000.0)])
    c = compare.compare_folders([a], [b])
    changed = dict(zip(c.metrics["field"], zip(c.metrics["a"], c.metrics["b"])))
    # throughput is timing, not correctness: not listed; unchanged SQNR not listed
    assert changed == {"check.rel_error": (0.001, 0.002), "metrics.dropped": (3, 5)}
    assert verdicts(c) == {"q": "same"}


def test_stale_notebook_results_are_left_out(tmp_path, timed, write_report):
    a = write_report(tmp_path / "a", [timed("a", 1.0)])
    b = write_report(tmp_path / "b", [timed("a", 1.0)], stale=True)
    with pytest.raises(compare.CompareError, match="no record in common"):
        compare.compare_folders([a], [b])


# ------------------------------------------------------------------------------------ input


@pytest.mark.parametrize(
    "argv, message",
    [
        (["{a}", "{b}"], "needs `--`"),
        (["{a}", "--"], "both sides"),
        (["{a}", "--", "{missing}"], "no such folder"),
        (["{a}", "--", "{empty}"], "not a report folder"),
        (["{a}", "--", "{other}"], "no record in common"),
        (["{a}", "--", "{b}", "--factor", "0.9"], "--factor must be a number > 1"),
        (["{a}", "--", "{b}", "--factor", "11"], "must be a number > 1 and at most 10"),
        (["{a}", "--", "{b}", "--factor", "nan"], "must be a number > 1 and at most 10"),
        (["{a}", "--", "{b}", "--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path, capsys, argv, message, timed, write_report, side
):
    paths = {
        "a": side(tmp_path, "a", runs=1),
        "b": side(tmp_path, "b", runs=1),
        "missing": tmp_path / "missing",
        "empty": tmp_path / "empty",
        "other": write_report(tmp_path / "other", [timed("zzz", 1.0)]),
    }
    paths["empty"].mkdir()
    argv = [a.format(**{k: str(v) for k, v in paths.items()}) for a in argv]
    assert compare.cli(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert message in captured.err and captured.out == ""


def test_a_run_and_the_stores_name_for_it_are_refused_as_one_run(
    tmp_path, monkeypatch, capsys, timed, write_report
):
    from kernel_lib.results import store

    folder = write_report(tmp_path / "cpu", [timed("a", 1.0)], run_id="20260101T000000Z-1")
    monkeypatch.setenv(store.STORE_ENV, str(tmp_path / "history.sqlite"))
    store.add_report(folder, tmp_path / "history.sqlite")
    assert compare.cli(["cpu@latest", "--", str(folder)]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and f"both hold run 20260101T000000Z-1 of {folder.resolve()}:" in err
    )
    assert "a run compared with itself" in err


def test_options_on_either_side_of_the_separator():
    args = compare.parse_args(["--json", "a1", "a2", "--", "b1", "--factor", "1.5", "--html", "x"])
    assert (args.a, args.b, args.factor, args.json, args.html) == (
        ["a1", "a2"],
        ["b1"],
        1.5,
        True,
        "x",
    )
    assert compare.parse_args(["a", "--", "b"]).factor is None  # chosen when compared


def test_the_cli_routes_compare(tmp_path, capsys, side):
    from kernel_lib import __main__ as cli

    a, b = side(tmp_path, "a"), side(tmp_path, "b", slow=2.0)
    assert cli.main(["compare", str(a), "--", str(b)]) == 1
    assert cli.main(["compare", str(a)]) == 2


# ----------------------------------------------------------------------------------- output


def test_json_and_html_outputs(tmp_path, capsys, side):
    a, b = side(tmp_path, "a"), side(tmp_path, "b", slow=2.0)
    page = tmp_path / "cmp.html"
    assert compare.cli([str(a), "--", str(b), "--json", "--html", str(page)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "same-device" and data["exit_code"] == 1
    assert data["counts"] == {"same": 2, "slower": 1}
    slow = next(r for r in data["records"] if r["verdict"] == "slower")
    assert slow["key"] == "gemm/b/torch_mm/float32/-/n=64" and slow["a_runs"] == 3
    text = page.read_text()
    assert text.startswith("<!doctype html>") and "slower" in text and "<table" in text


@pytest.mark.parametrize("cross_platform", [False, True])
def test_the_html_page_shows_names_and_records_as_text(tmp_path, cross_platform, timed, side):
    """Folders, a platform, a device, a record's fields and a headline named with markup."""
    headline = dict(ratio_vs_baseline=1.8, ratio_low=1.7, ratio_high=1.9, baseline=MARKUP)

    def extra(error: float) -> list[Record]:  # a headline, and a correctness figure that changes
        metric = timed("m", 1.0, metrics={"err": error})
        return [
            timed("h", 3.0, headline=MARKUP, **headline),
            dataclasses.replace(metric, implementation=MARKUP),
        ]

    other = dict(platform="h100", device=MARKUP) if cross_platform else {}
    a = side(tmp_path / "a", MARKUP, runs=1, extra=extra(1.0))
    b = side(tmp_path / "b", MARKUP, runs=1, slow=2.0, extra=extra(2.0), **other)
    page = tmp_path / "cmp.html"
    compare.cli([str(a), "--", str(b), "--html", str(page)])
    text = page.read_text()
    assert "<img src=x" not in text and "&lt;img src=x onerror=" in text
    assert "<h2>Headlines</h2>" in text if cross_platform else "metrics.err" in text


# ---------------------------------------------------------------------------- cross-platform


def test_cross_platform_has_ratios_with_intervals_and_no_verdict_words(
    tmp_path, capsys, timed, side
):
    headline = dict(ratio_vs_baseline=1.8, ratio_low=1.7, ratio_high=1.9, baseline="naive")
    extra_a = [timed("h", 3.0, headline="GEMM vs naive", **headline)]
    extra_b = [timed("h", 1.0, device="Other GPU", headline="GEMM vs naive", **headline)]
    a = side(tmp_path, "a", runs=1, extra=extra_a)
    b = side(tmp_path, "b", runs=1, slow=2.0, platform="h100", device="Other GPU", extra=extra_b)
    c = compare.compare_folders([a], [b])
    assert c.cross_platform and "verdict" not in c.table and c.exit_code == 0
    row = c.table.set_index("key").loc["gemm/b/torch_mm/float32/-/n=64"]
    # spread interval: [B p10 / A p90, B p90 / A p10] = [2 * 0.95/1.05, 2 * 1.05/0.95]
    assert row["ratio"] == pytest.approx(2.0)
    assert (row["low"], row["high"]) == pytest.approx((2 * 0.95 / 1.05, 2 * 1.05 / 0.95))
    assert list(c.headlines["headline"]) == ["GEMM vs naive"]
    assert c.headlines.iloc[0]["a"] == c.headlines.iloc[0]["b"] == "1.80x [1.70, 1.90] vs naive"
    assert compare.cli([str(a), "--", str(b)]) == 0
    out = capsys.readouterr().out
    assert "GEMM vs naive" in out and "Different devices" in out
    assert not VERDICT_RE.search(out), VERDICT_RE.search(out)
    assert compare.cli([str(a), "--", str(b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mode"] == "cross-platform" and data["headlines"]
    assert all("verdict" not in r for r in data["records"])
