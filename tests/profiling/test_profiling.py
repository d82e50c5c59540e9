"""Where the time goes: phases free when nothing profiles (and invisible to torch.compile), the
profiled pass after a section's timing (a headline's profile, its trace a Chrome trace), the check
of phase coverage failing on a misspelt or dropped phase, the `profile` command, the report's
section, and the committed cpu report's headlines profiled."""

import contextlib
import gzip
import json
import os
import shutil

import pandas as pd
import pytest
import torch

from kernel_lib import records as rec
from kernel_lib.__main__ import main
from kernel_lib.measure import Case, check_then_time
from kernel_lib.moe import dispatch
from kernel_lib.moe.candidates import DENSE, dense_candidate, strategy_candidate
from kernel_lib.moe.cases import make_case
from kernel_lib.moe.shapes import MoEShape
from kernel_lib.params import ROOT, parse_override
from kernel_lib.platform import DeviceFacts
from kernel_lib.profiling import phases
from kernel_lib.profiling.capture import profiled
from kernel_lib.profiling.pending import PROFILE_ENV, forget, mode_override, put, take
from kernel_lib.report.lead import findings_markdown
from kernel_lib.report.phases import NONE, findings_phases, report_phases_html
from kernel_lib.results.files import notebook_records
from kernel_lib.suite import Context, Section, Suite

SHAPE = MoEShape(tokens=300, hidden=64, ffn=128, experts=4, top_k=2)
IMPLEMENTATION = "dispatch_packed_segments"


def test_a_phase_costs_nothing_unless_a_profiler_runs():
    assert phases.phase("combine") is phases._NOTHING
    with torch.profiler.profile() as prof:
        with phases.phase("combine"):
            torch.ones(3).sum()
    assert phases.PREFIX + "combine" in {e.key for e in prof.key_averages()}


def test_torch_compile_traces_through_a_phase():
    def f(x):
        with phases.phase("GEMM 1"):
            return (x @ x).relu()

    explained = torch._dynamo.explain(f)(torch.ones(4, 4))
    assert explained.graph_break_count == 0


def _section(ctx):
    """dispatch_packed_segments against the dense pair on a small case, declared a headline."""
    case = make_case(SHAPE, dtype="float32")
    candidates = [dense_candidate(case), strategy_candidate("packed_segments", case)]
    out = check_then_time(
        Case("moe", "forward", SHAPE.as_dict(), "float32", "forward"),
        candidates,
        facts=ctx.facts,
        baseline=DENSE,
        rounds=6,
        min_time_s=0.001,
    )
    return [rec.as_headline(r, "moe.forward_vs_dense") if r is out[1] else r for r in out]


def _run(monkeypatch, folder, facts, mode="headlines") -> list[rec.Record]:
    """The one-section plan run with profiling `mode`, its results folder `folder`."""
    monkeypatch.setenv(PROFILE_ENV, mode)
    monkeypatch.setenv(rec.RESULTS_DIR_ENV, str(folder))
    ctx = Context(config=None, facts=facts)
    Suite("moe", [Section("speed", _section, "the headline")]).run("speed", ctx)
    return ctx.records


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(folder, records): the plan run once with headlines profiled, its records saved there."""
    folder = tmp_path_factory.mktemp("report")
    facts = DeviceFacts(backend="cpu", device="cpu", name="Test CPU")
    with pytest.MonkeyPatch.context() as mp:
        records = _run(mp, folder, facts)
    rec.save_records(records, "moe", folder)
    return folder, records


def test_a_headline_gets_its_profile_after_timing(report):
    folder, (dense, headline) = report
    assert dense.profile is None  # not a headline
    profile = headline.profile
    assert profile and not headline.flags
    events = json.loads(gzip.decompress((folder / profile["trace"]).read_bytes()))
    assert events["traceEvents"]
    assert set(phases.expected(IMPLEMENTATION)) <= set(profile["phases"])
    profiled_ms = profile["overhead"] * headline.median_ms  # a profiled call: the phases in it
    assert 0 < sum(profile["phases"].values()) <= profiled_ms
    assert 0 < len(profile["top"]) <= 10 and profile["overhead"] > 0
    assert {"name", "calls", "self_ms", "share"} == set(profile["top"][0])
    assert notebook_records(folder)["profile.trace"].notna().sum() == 1  # the schema takes it


def test_profile_all_and_off(monkeypatch, tmp_path, cpu_facts, report):
    assert all(r.profile for r in _run(monkeypatch, tmp_path, cpu_facts, "all"))
    monkeypatch.setenv(PROFILE_ENV, "off")
    put(report[1][1], lambda: None, "cpu")  # nothing kept, nothing profiled
    assert take(report[1][1]) is None and profiled(report[1]) == report[1]


def test_a_call_is_profiled_in_the_autograd_mode_it_was_timed_in(monkeypatch, report):
    monkeypatch.setenv(PROFILE_ENV, "headlines")
    with torch.no_grad():  # a section timing under no_grad (the compiled MLP)
        put(report[1][1], torch.is_grad_enabled, "cpu")
    assert take(report[1][1])[0]() is False
    forget()


def test_a_bad_profile_mode_is_one_line_and_runs_nothing(capsys):
    assert (
        main(["run", "--platform", "cpu", "-p", "profile=sometimes", "--out", "/nonexistent"]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: command line: -p profile='sometimes' must be one of off, headlines, all"
    ]


def test_phase_coverage_fails_on_a_misspelt_or_dropped_phase(monkeypatch, tmp_path, cpu_facts):
    real = dispatch.phase

    def phase(name):  # `combine` misspelt, `expert GEMM 2` dropped
        if name == "expert GEMM 2":
            return contextlib.nullcontext()
        return real("combin" if name == "combine" else name)

    monkeypatch.setattr(dispatch, "phase", phase)
    _, headline = _run(monkeypatch, tmp_path, cpu_facts)
    problems = phases.coverage(IMPLEMENTATION, headline.profile["phases"])
    assert problems == [
        "phase 'combin' is not declared in PHASES",
        f"{IMPLEMENTATION} ran no phase 'expert GEMM 2'",
        f"{IMPLEMENTATION} ran no phase 'combine'",
    ]
    assert [f for f in headline.flags if f.startswith("profile: ")] == [
        f"profile: {p}" for p in problems
    ]


def test_profile_command(tmp_path, capsys, report):
    folder, (dense, headline) = report
    trace = tmp_path / "trace.json"
    ids = [rec.record_id(r, rec.run_context()[1]) for r in (dense, headline)]
    assert main(["profile", ids[1], "--report", str(folder), "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "self_ms" in out and "phases per call: sort/gather" in out
    assert json.loads(trace.read_text())["traceEvents"]
    assert main(["profile", ids[0], "--report", str(folder), "--trace", str(trace)]) == 1
    assert main(["profile", "cpu/no/such/id", "--report", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: profile: no record 'cpu/no/such/id'")


OUTSIDE_FILE = "../../../../etc/hostname"  # a probe's trace: read outside the report


def _bad_profile(folder, tmp_path, edit) -> tuple[str, object]:
    """A copy of the report whose headline record's profile is `edit(profile)`: (its record id,
    the copy)."""
    copy = tmp_path / "report"
    shutil.copytree(folder, copy)
    results = copy / "moe.results.json"
    rows = json.loads(results.read_text())
    headline = next(r for r in rows if r.get("profile"))
    edit(headline)
    results.write_text(json.dumps(rows))
    return headline["record_id"], copy


@pytest.mark.parametrize(
    "edit, field",
    [  # {id}: the record's id; [1]: the headline's place in its results file
        (lambda r: r["profile"].update(trace=OUTSIDE_FILE), "{id}: profile.trace '../../../"),
        (lambda r: r["profile"].update(trace="/etc/hostname"), "{id}: profile.trace '/etc/"),
        (lambda r: r["profile"].update(trace=""), "{id}: profile.trace '' is not a file in"),
        (lambda r: r["profile"].update(trace=5), "[1].profile.trace must be a string, not 5"),
        (lambda r: r["profile"].update(top="nope"), "[1].profile.top must be a list, not 'nope'"),
        (lambda r: r["profile"]["top"][0].pop("share"), "[1].profile.top[0] has no share"),
        (lambda r: r["profile"].update(phases=[1]), "[1].profile.phases must be an object"),
        (lambda r: r["profile"].update(overhead="1"), "[1].profile.overhead must be a number"),
        (lambda r: r.update(median_ms=None), "{id}: has a profile but no median_ms"),
    ],
)
def test_a_bad_profile_field_is_one_line_naming_the_record_and_field(
    tmp_path, capsys, report, edit, field
):
    record_id, copy = _bad_profile(report[0], tmp_path, edit)
    before = {p: p.read_bytes() for p in copy.iterdir()}
    trace = tmp_path / "trace.json"
    assert main(["profile", record_id, "--report", str(copy), "--trace", str(trace)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("error: "), err
    assert field.format(id=record_id) in err, err
    assert not trace.exists() and {p: p.read_bytes() for p in copy.iterdir()} == before


@pytest.mark.parametrize("target", ["/etc/hostname", "inside"])
def test_a_trace_that_is_a_link_is_never_read(tmp_path, capsys, report, target):
    """A trace linked out of the report (resolved: outside), or to a file inside it (a link all
    the same): refused in one line, nothing read."""
    record_id, copy = _bad_profile(report[0], tmp_path, lambda r: None)
    trace = copy / json.loads((copy / "moe.results.json").read_text())[1]["profile"]["trace"]
    inside = trace.with_name("inside.json.gz")
    trace.rename(inside)
    trace.symlink_to(inside if target == "inside" else target)
    assert main(["profile", record_id, "--report", str(copy), "--trace", "-"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    if target == "inside":
        assert f"{trace}: a symbolic link" in err, err
    else:
        assert f"{record_id}: profile.trace '{trace.name}' is not a file in" in err, err


def test_a_report_without_profiles_says_so(report):
    assert NONE in report_phases_html(notebook_records(ROOT / "outputs" / "h100"))
    shown = report_phases_html(notebook_records(report[0]))
    assert NONE not in shown and report[1][1].profile["trace"] in shown
    cell = findings_markdown(notebook_records(report[0]), "test")  # the notebook's findings
    assert f"[trace]({report[1][1].profile['trace']})" in cell


CPU = ROOT / "outputs" / "cpu"
SEED_HEADLINES = ("moe.seed_same_dtype", "moe.seed_config")


def test_every_ok_headline_of_the_cpu_report_has_its_profile():
    rows = [
        r
        for path in sorted(CPU.glob("*.results.json"))
        for r in json.loads(path.read_text())
        if r["headline"] and r["status"] == "ok"
    ]
    assert rows
    for r in rows:
        assert r.get("profile"), r["record_id"]
        trace = json.loads(gzip.decompress((CPU / r["profile"]["trace"]).read_bytes()))
        assert trace["traceEvents"], r["record_id"]
        assert not phases.coverage(r["implementation"], r["profile"]["phases"]), r["record_id"]
        if r["headline"] in SEED_HEADLINES:  # the phases account for its time: within 15 % of a
            # profiled call (the timed median times the overhead: a shared CPU's load moves both)
            summed = sum(r["profile"]["phases"].values())
            profiled_ms = r["median_ms"] * r["profile"]["overhead"]
            assert summed == pytest.approx(profiled_ms, rel=0.15), r["record_id"]


@pytest.mark.parametrize("mode", ["off", "headlines", "all"])
def test_each_profile_mode_is_taken_from_the_command_line(monkeypatch, mode):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    overrides = {"profile": parse_override(f"profile={mode}")[1], "moe_tokens": 8}
    mode_override(overrides)
    assert os.environ[PROFILE_ENV] == mode and overrides == {"moe_tokens": 8}


def test_a_profiles_names_and_trace_path_are_text_and_a_relative_link():
    rows = pd.DataFrame(
        [
            {
                "headline": "moe.forward_vs_dense",
                "implementation": "<img src=x onerror=alert(1)>|[a](b)",
                "median_ms": 1.0,
                "profile.overhead": 1.1,
                "profile.trace": "javascript:alert(1)",
                "profile.phases.dispatch": 0.5,
            }
        ]
    )
    page, cell = report_phases_html(rows), findings_phases(rows)
    assert "<img src=x" not in page and "<img src=x" not in cell
    assert 'href="javascript%3Aalert%281%29"' in page and "](javascript%3Aalert%281%29)" in cell
    assert "[a](b)" not in cell
