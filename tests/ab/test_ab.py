"""`ab REV_A REV_B`: revisions as worktrees, interleaved runs, resume, refusals, the noise floor.

Most tests fake the runs (a report written in place of `python -m kernel_lib run`) in a tiny git
repository; one runs two real commits of a copy of this checkout that differ in their kernel_lib,
and checks that each side's notebook kernel imported its own."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kernel_lib.ab as ab
from kernel_lib import compare
from kernel_lib.__main__ import main
from kernel_lib.ab import checkout, rounds
from kernel_lib.compare import ab_layout
from kernel_lib.measure import TEST_SLOWDOWN_ENV, slowdowns
from kernel_lib.params import ROOT
from kernel_lib.profiling.pending import PROFILE_ENV
from kernel_lib.results import store

JITTER = (1.0, 1.02, 0.98, 1.01, 0.99)  # run-to-run noise of the fake runs, the same on both sides
MS = {"x": 1.0, "y": 2.0, "z": 3.0}  # the fake runs' records and their times, unslowed
IDENTITY = {**checkout.SNAPSHOT_IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull}


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **IDENTITY},
    )
    return out.stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A git repository with the files `ab` checks at each revision, as `ab`'s checkout; two
    commits (`a`, `b`) and one (`c`) with other requirements."""
    repo = tmp_path / "repo"
    (repo / "parameters").mkdir(parents=True)
    (repo / "notebooks").mkdir()
    (repo / ".gitignore").write_text("/.cache/\n")
    (repo / "requirements.txt").write_text("torch\n")
    (repo / "parameters" / "ci.yaml").write_text("workbook: {notebooks: [backend_nvidia]}\n")
    (repo / "notebooks" / "backend_nvidia.ipynb").write_text("{}\n")
    git(tmp_path, "init", "-q", str(repo))
    revs = {"a": commit(repo, "a")}
    (repo / "notebooks" / "backend_nvidia.ipynb").write_text('{"b": 1}\n')
    revs["b"] = commit(repo, "b")
    (repo / "requirements.txt").write_text("torch\nnumpy\n")
    revs["c"] = commit(repo, "c")
    git(repo, "checkout", "-q", revs["b"])
    monkeypatch.setattr(ab, "ROOT", repo)
    monkeypatch.setattr(ab_layout, "CACHE", repo / ".cache" / "ab")
    return repo, revs


@pytest.fixture
def fake_runs(monkeypatch, make_record, make_run):
    """Runs that write a report at once: records `x`, `y` and `z` (t/c at n=8, one sample each),
    each slowed as the knob says. Each checks that it runs its side's commit, with that checkout
    first on PYTHONPATH."""
    calls = []

    def timed(implementation: str, ms: float):
        spread = {"p10_ms": ms * 0.95, "p90_ms": ms * 1.05, "samples": (ms,)}
        return make_record(
            "c", ms, topic="t", implementation=implementation, shape={"n": 8}, **spread
        )

    def run_once(side, into, arguments):
        calls.append((side.name, int(into.name.split("-")[1])))
        assert git(side.checkout, "rev-parse", "HEAD") == side.commit
        assert side.env["PYTHONPATH"].split(os.pathsep)[0] == str(side.checkout)
        assert arguments[:2] == ["--platform", "ci"]
        knobs = slowdowns(side.env.get(TEST_SLOWDOWN_ENV, ""))
        j = JITTER[(len(calls) - 1) // 2 % len(JITTER)]
        records = [timed(name, ms * j * (1 + knobs.get(name, 0.0))) for name, ms in MS.items()]
        run = {"run_id": f"{side.name}-{into.name}", "platform": "ci", "git": side.commit[:7]}
        make_run(into, records, environment={"name": "Test CPU"}, notebooks=[], **run)
        return 0, "ok"

    monkeypatch.setattr(rounds, "run_once", run_once)
    return calls


def run_ab(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["ab", *args, "--platform", "ci"])
    out, err = capsys.readouterr()
    return code, out, err


def worktrees(repo: Path) -> list[str]:
    return git(repo, "worktree", "list").splitlines()[1:]


def test_runs_alternate_each_side_its_own_commit_and_the_verdict_says_what_it_rests_on(
    tiny, fake_runs, capsys
):
    repo, revs = tiny
    code, out, err = run_ab(capsys, revs["a"], revs["b"], "--runs", "3", "--out", "o")
    assert code == 0, err
    assert fake_runs == rounds.schedule(3) == [
        ("A", 1), ("B", 1), ("B", 2), ("A", 2), ("A", 3), ("B", 3),
    ]  # fmt: skip
    assert "ab: run 1 of 6: side A" in err and "time left: known after the first run" in err
    assert "ab: run 6 of 6: side B" in err and " left" in err.splitlines()[-1]
    assert (
        "Rests on: 3 run(s) of A, 3 of B; factor 1.1 (the default: no noise floor at hand); "
        "noise floor: none at hand" in out
    )
    result = json.loads((Path("o") / "compare.json").read_text())
    assert result["rests_on"] == {
        "runs_a": 3, "runs_b": 3, "factor": 1.1, "factor_from": "the default: no noise floor at hand"
    }  # fmt: skip
    x = next(r for r in result["records"] if "/x/" in r["key"])
    assert x["a_run_ms"] == [1.0, 1.02, 0.98] and x["b_run_ms"] == [1.0, 1.02, 0.98]
    assert (Path("o") / "compare.html").exists() and worktrees(repo) == []  # removed when done
    # each side's runs kept in the results store, one report a side
    rows = store.runs(repo / "outputs" / store.STORE_NAME)
    assert sorted((r["report"], r["run_id"]) for r in rows) == [
        (f"ab:o/{side}", f"{side}-run-{k}") for side in "AB" for k in (1, 2, 3)
    ]
    assert "results store: the runs of A and B added to" in out


def test_an_a_a_keeps_its_noise_floor_and_a_slowed_side_is_slower_beside_it(
    tiny, fake_runs, capsys
):
    repo, revs = tiny
    code, out, err = run_ab(capsys, "HEAD", revs["b"])
    assert code == 0, err
    assert not {"slower", "faster", "unconfirmed"} & set(out.split())
    floor = json.loads((ab_layout.CACHE / "noise-floor-ci.json").read_text())
    assert floor["runs_a_side"] == 5 and floor["ratio_low"] == floor["ratio_high"] == 1.0
    assert floor["device"] == "Test CPU" and floor["git"] == revs["b"][:7]

    # the A/A's ratios all 1.0: the factor taken from it is the lowest, 1.05, and a 10 % slowdown
    # is called (at the factor 1.1 it sits on the factor itself, --factor 1.1: `same`)
    for fraction, factor, slowed in (("0.1", None, "slower"), ("0.2", None, "slower"),
                                     ("0.1", "1.1", "same")):  # fmt: skip
        given = ["--factor", factor] if factor else []
        code, out, err = run_ab(capsys, "HEAD", "HEAD", "--slow-b", f"y={fraction}", *given)
        table = json.loads(next(ab_layout.CACHE.glob("*-ci-*/compare.json")).read_text())
        shutil.rmtree(next(ab_layout.CACHE.glob("*-ci-*")))
        verdicts = {r["key"].split("/")[2]: r["verdict"] for r in table["records"]}
        assert verdicts == {"x": "same", "y": slowed, "z": "same"}
        assert code == (1 if slowed == "slower" else 0)
        assert table["factor"] == float(factor or 1.05)
        assert table["rests_on"]["factor_from"].startswith("given" if factor else "from the noise")
        assert table["noise_floor"]["ratio_high"] == 1.0  # the A/A's, at hand
        assert "noise floor: an A/A of git" in out and "TEST ONLY: B slowed by y=" in out
    # only A/As without the knob store a noise floor, and fewer runs a side do not replace it
    assert run_ab(capsys, "HEAD", "HEAD", "--runs", "3", "--out", "o3")[0] == 0
    assert json.loads((Path("o3") / "noise-floor.json").read_text())["runs_a_side"] == 3
    assert json.loads((ab_layout.CACHE / "noise-floor-ci.json").read_text()) == floor


def test_slow_b_is_repeatable_each_implementation_slowed_by_its_own_fraction(
    tiny, fake_runs, capsys
):
    knobs = ["--slow-b", "y=0.2", "--slow-b", "x=0.30", "--slow-b", "nosuch=0.1"]
    code, out, err = run_ab(capsys, "HEAD", "HEAD", *knobs)
    assert code == 1, err
    (folder,) = ab_layout.CACHE.glob("*-ci-*")
    state = json.loads((folder / ab_layout.STATE).read_text())
    assert state["slow_b"] == "nosuch=0.1,x=0.3,y=0.2"  # canonical: sorted, normalised
    assert "TEST ONLY: B slowed by nosuch=0.1,x=0.3,y=0.2" in out
    assert err.count("no record names implementation") == 1 and "'nosuch'" in err
    table = json.loads((folder / "compare.json").read_text())["records"]
    ratios = {r["key"].split("/")[2]: (r["verdict"], round(r["ratio"], 3)) for r in table}
    assert ratios == {"x": ("slower", 1.3), "y": ("slower", 1.2), "z": ("same", 1.0)}
    assert not (folder / compare.NOISE_FLOOR_FILE).exists()
    # the slowed side is a test's, not a measurement: only A's runs are kept in the store
    rows = store.runs(tiny[0] / "outputs" / store.STORE_NAME)
    assert len(rows) == 5 and {r["report"] for r in rows} == {f"ab:{folder.name}/A"}

    # the same knobs in another order: the same default folder, so --resume takes them
    again = ["--slow-b", "nosuch=.1", "--slow-b", "x=0.3", "--slow-b", "y=0.2", "--resume"]
    code, _, err = run_ab(capsys, "HEAD", "HEAD", *again)
    assert code == 1 and list(ab_layout.CACHE.glob("*-ci-*")) == [folder], err
    # one --slow-b: stored as before, one `impl=fraction`, so older runs resume
    assert ab._slowdown(["y=0.20"]) == "y=0.2" and ab._slowdown([]) is None


def test_ctrl_c_keeps_the_runs_and_resume_continues_with_a_clean_worktree(
    tiny, fake_runs, capsys, monkeypatch
):
    repo, revs = tiny
    fake = rounds.run_once

    once = [KeyboardInterrupt]

    def interrupted(side, into, arguments):
        if len(fake_runs) == 2 and once:
            raise once.pop()
        return fake(side, into, arguments)

    monkeypatch.setattr(rounds, "run_once", interrupted)
    args = (revs["a"], revs["b"], "--runs", "2", "--out", "o")
    code, out, err = run_ab(capsys, *args)
    assert code == 130
    assert err.splitlines()[-1].startswith("interrupted: 2 of 4 runs are kept in ")
    assert "--resume continues" in err and len(worktrees(repo)) == 2

    code, _, err = run_ab(capsys, *args)  # not without --resume: the runs would be lost
    assert code == 2 and "holds an ab run: --resume continues it" in err
    kept = Path(worktrees(repo)[0].split()[0])
    (kept / "notebooks" / "backend_nvidia.ipynb").write_text("edited by someone\n")
    code, _, err = run_ab(capsys, *args, "--resume")  # a dirty worktree: refused, nothing run
    assert code == 2 and len(err.strip().splitlines()) == 1 and "has changes" in err
    assert len(fake_runs) == 2
    git(kept, "checkout", "--", ".")

    code, out, err = run_ab(capsys, *args, "--resume")
    assert code == 0, err
    assert fake_runs == [("A", 1), ("B", 1), ("B", 2), ("A", 2)]  # the third run again, then on
    assert "ab: run 1 of 2: side B" in err and worktrees(repo) == []
    code, _, err = run_ab(capsys, revs["b"], revs["b"], "--runs", "2", "--out", "o", "--resume")
    assert code == 2 and "--resume: " in err and "of another a" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["nosuch", "HEAD"], "REV_A 'nosuch': not a revision of"),
        (["HEAD", "HEAD^{{tree}}"], "REV_B 'HEAD^{tree}': not a revision"),
        (["{a}", "{c}"], "requirements.txt differs between REV_A"),
        (["HEAD", "HEAD", "--runs", "2.5"], "--runs must be an integer from 1 to 50"),
        (["HEAD", "HEAD", "--runs", "51"], "--runs must be an integer from 1 to 50, not '51'"),
        (["HEAD", "HEAD", "--factor", "0.9"], "--factor must be a number > 1"),
        (["HEAD", "HEAD", "--factor", "11"], "--factor must be a number > 1 and at most 10"),
        (["HEAD", "HEAD", "--factor", "inf"], "--factor must be a number > 1 and at most 10"),
        (["HEAD", "HEAD", "-p", "profile=sometimes"], "-p profile='sometimes' must be one of"),
        (["HEAD", "HEAD", "--slow-b", "y"], "--slow-b 'y' must look like IMPLEMENTATION="),
        (["HEAD", "HEAD", "--slow-b", "x=0.1", "--slow-b", "y=0"], "--slow-b 'y=0' must look"),
        (["HEAD", "HEAD", "--slow-b", "x=0.1,y=0.2"], "--slow-b 'x=0.1,y=0.2' must look"),
        (["HEAD", "HEAD", "--slow-b", "x,y=0.2"], "--slow-b 'x,y=0.2' must look"),
        (["HEAD", "HEAD", "--slow-b", "y=0.1", "--slow-b", " y=0.2"], "'y' is given twice"),
        (["HEAD", "HEAD", "--only", "nope"], "--only"),
        (["HEAD", "HEAD", "--only", "fp8"], "has no notebooks/fp8.ipynb"),
        (["HEAD", "HEAD", "-p", "nope"], "-p"),
        (["HEAD", "HEAD", "--resume"], "holds no ab run to continue"),
        (["HEAD", "HEAD", "--out", "file"], "is a file"),
        (["HEAD", "HEAD", "--out", "folder"], "holds files that are not an ab run"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_made_or_run(
    tiny, fake_runs, capsys, args, message
):
    repo, revs = tiny
    Path("file").write_text("x")
    Path("folder").mkdir()
    (Path("folder") / "notes.txt").write_text("mine")
    code, out, err = run_ab(capsys, *[a.format(**revs) for a in args])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert fake_runs == [] and worktrees(repo) == [] and not ab_layout.CACHE.exists()
    assert (Path("folder") / "notes.txt").read_text() == "mine"


def test_profile_is_taken_as_run_takes_it_and_the_runs_get_it(
    tiny, fake_runs, capsys, monkeypatch
):
    monkeypatch.setenv(PROFILE_ENV, "off")  # restored after the test
    code, _, err = run_ab(capsys, "HEAD", "HEAD", "--runs", "1", "-p", "profile=all")
    assert code == 0, err
    assert os.environ[PROFILE_ENV] == "all"  # what each run's environment starts from


def test_worktree_is_a_deterministic_snapshot_and_leaves_the_index_alone(tiny):
    repo, revs = tiny
    assert checkout.resolve(repo, "WORKTREE", "REV_B") == revs["b"]  # clean: HEAD itself
    (repo / "requirements.txt").write_text("torch\nchanged\n")
    (repo / "new.py").write_text("print('new')\n")
    (repo / ".cache").mkdir()
    (repo / ".cache" / "ignored").write_text("x")
    status = git(repo, "status", "--porcelain")
    first = checkout.resolve(repo, "WORKTREE", "REV_B")
    assert first != revs["b"] and checkout.resolve(repo, "WORKTREE", "REV_B") == first
    assert git(repo, "status", "--porcelain") == status  # the user's index is as it was
    assert git(repo, "show", f"{first}:new.py") == "print('new')"
    assert "torch\nchanged" in git(repo, "show", f"{first}:requirements.txt")
    assert ".cache/ignored" not in git(repo, "ls-tree", "-r", "--name-only", first)
    assert git(repo, "rev-parse", f"{first}^") == revs["b"]


def test_compare_reads_a_noise_floor_and_refuses_a_damaged_one(tmp_path, capsys):
    floor = {k: 1 for k in compare.NOISE_FLOOR_KEYS} | {"verdicts": {"slower": 0}}
    (tmp_path / compare.NOISE_FLOOR_FILE).write_text(json.dumps(floor))
    assert compare.read_noise_floor(tmp_path) == floor
    (tmp_path / "bad.json").write_text('{"device": "x"}')
    assert main(["compare", "a", "--", "b", "--noise-floor", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "not a noise floor" in err


def test_make_compare_is_a_thin_wrapper():
    dry = subprocess.run(
        ["make", "-n", "compare", "A=v1", "B=WORKTREE", "ONLY=fp8", "RUNS=3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert '-m kernel_lib ab "v1" "WORKTREE" --runs 3 --only fp8' in dry.stdout, dry.stderr
    missing = subprocess.run(["make", "compare"], cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode != 0 and "make compare A=REV B=REV" in missing.stderr


# ----------------------------------------------------------- real runs: each side its own code

MARK = "print('ab-side-marker {side}', __file__)\n"


@pytest.fixture(scope="module")
def two_commits(tmp_path_factory):
    """A copy of this checkout (its working tree, outputs/ left out) as a new repository with two
    commits whose kernel_lib differ: each prints which it is when imported."""
    repo = tmp_path_factory.mktemp("ab") / "repo"
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in listed:
        if name and not name.startswith("outputs/") and (ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    git(repo.parent, "init", "-q", str(repo))
    init = repo / "kernel_lib" / "__init__.py"
    source = init.read_text()
    commits = {}
    for side in ("A", "B"):
        init.write_text(source + MARK.format(side=side))
        commits[side] = commit(repo, side)
    return repo, commits


@pytest.mark.slow
def test_each_side_runs_its_own_kernel_lib(two_commits, tmp_path):
    repo, commits = two_commits
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [sys.executable, "-m", "kernel_lib", "ab", commits["A"], commits["B"], "--runs", "1"]
    command += ["--platform", "ci", "--only", "backend_nvidia", "--out", str(tmp_path / "o")]
    proc = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ab: run 2 of 2: side B" in proc.stderr and "Rests on: 1 run(s) of A" in proc.stdout
    for side, other in (("A", "B"), ("B", "A")):
        run = tmp_path / "o" / side / "run-1"
        notebook = (run / "backend_nvidia.ipynb").read_text()
        assert f"ab-side-marker {side}" in notebook and f"ab-side-marker {other}" not in notebook
        assert ".cache/ab/worktrees/" in notebook  # its worktree, not this checkout or the copy
        assert json.loads((run / "run.json").read_text())["git"] == commits[side][:7]
    assert (tmp_path / "o" / "compare.html").exists()
    assert git(repo, "worktree", "list").count("\n") == 0  # removed once compared
