"""`python -m kernel_lib ab REV_A REV_B`: two revisions compared with their runs interleaved.

Both revisions are checked out as git worktrees in .cache/ab/worktrees/ (WORKTREE: the working tree
as it is now, kernel_lib.ab.checkout), which share this venv: their requirements.txt must be the
same. The plan (`--platform`, `--only`, `-p`) runs `--runs` times a side, the sides in turn
(kernel_lib.ab.rounds), each run a fresh process running its own side's code; then `compare` of the
two sides: its table on stdout, compare.html and compare.json beside the runs, the exit code
compare's (1 as well when a run failed).

OUT (default .cache/ab/<A>-<B>-<platform>[-<hash of --only, -p, --slow-b>]) holds ab.json (what is
compared), A/run-<k>/ and B/run-<k>/ (full reports) and the comparison. An A/A (one commit on both
sides, no --slow-b) also writes noise-floor.json and keeps it as .cache/ab/noise-floor-<platform>.json:
the noise floor at hand, which later comparisons on the same device show with their verdicts and,
without --factor, take their factor from (compare.verdict.chosen_factor).
Ctrl-C keeps the finished runs and the worktrees, and `--resume` continues; the worktrees are
removed once the comparison is written (one with changes in it stays, and is named).
Each side's finished runs are added to the results store (kernel_lib.results.store: its default
place, $KERNEL_WORKBOOK_STORE or outputs/history.sqlite) as one report, `ab:<OUT name>/<side>`;
a side slowed by --slow-b is a test's, not a measurement, and is left out.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sys
from pathlib import Path

from kernel_lib.ab import rounds
from kernel_lib.ab.checkout import checked_out, read, remove, resolve
from kernel_lib.compare import (
    NOISE_FLOOR_FILE,
    CompareError,
    ab_layout,
    compare_runs,
    kept_noise_floor,
    load_side,
    noise_floor,
    to_html,
    to_json,
    to_text,
)  # fmt: skip
from kernel_lib.compare.command import check_factor
from kernel_lib.measure import slowdowns
from kernel_lib.params import ROOT, ParameterError, load_plan, parse_override
from kernel_lib.profiling.pending import notebook_params
from kernel_lib.results import store
from kernel_lib.results.outdir import locked
from kernel_lib.results.writes import refuse_checkout, report_holding, write_text

DEFAULT_RUNS = 5
MAX_RUNS = 50  # a side: more is a typo, not a measurement
IDENTITY = ("a", "b", "platform", "only", "params", "slow_b")  # what --resume must find the same
MAX_SLOWDOWN = 5.0


def _runs(value: str) -> int:
    runs = int(value) if str(value).strip().isdigit() else 0
    if not 1 <= runs <= MAX_RUNS:
        raise ParameterError(f"--runs must be an integer from 1 to {MAX_RUNS}, not {value!r}")
    return runs


def _slowdown(values: list[str] | tuple[str, ...]) -> str | None:
    """--slow-b IMPL=FRACTION, repeatable (TEST ONLY): the knob's value for side B's runs, sorted
    by implementation ("a=0.1,b=0.2"; one --slow-b gives "a=0.1")."""
    knobs = {}
    for text in values:
        name, _, fraction = (part.strip() for part in text.partition("="))
        try:
            ok = bool(name) and "," not in name and 0 < float(fraction) <= MAX_SLOWDOWN
        except ValueError:
            ok = False
        if not ok:
            raise ParameterError(
                f"--slow-b {text!r} must look like IMPLEMENTATION=FRACTION with 0 < FRACTION <= "
                f"{MAX_SLOWDOWN:g} (0.1: that implementation's timed calls take 10 % longer)"
            )
        if name in knobs:
            raise ParameterError(f"--slow-b {name!r} is given twice")
        knobs[name] = float(fraction)
    return ",".join(f"{name}={fraction:g}" for name, fraction in sorted(knobs.items())) or None


def _check_sides(commits: dict[str, str], platform: str, only: list[str] | None) -> None:
    """ParameterError unless both sides can share this venv and have the plan's files."""
    requirements = {s: read(ROOT, c, "requirements.txt") for s, c in commits.items()}
    if requirements["A"] != requirements["B"]:
        raise ParameterError(
            f"requirements.txt differs between REV_A ({commits['A'][:12]}) and REV_B "
            f"({commits['B'][:12]}): one venv cannot run both sides"
        )
    for side, commit in commits.items():
        for path in [f"parameters/{platform}.yaml", *(f"notebooks/{n}.ipynb" for n in only or ())]:
            if read(ROOT, commit, path) is None:
                raise ParameterError(f"REV_{side} ({commit[:12]}) has no {path}")
    mine = (
        (ROOT / "requirements.txt").read_text() if (ROOT / "requirements.txt").exists() else None
    )
    if requirements["A"] != mine:
        print("note: this venv was set up from another requirements.txt", file=sys.stderr)


def _default_out(identity: dict) -> Path:
    name = f"{identity['a'][:10]}-{identity['b'][:10]}-{identity['platform']}"
    extra = [identity[k] for k in ("only", "params", "slow_b")]
    if any(extra):
        name += "-" + hashlib.sha1(json.dumps(extra).encode()).hexdigest()[:6]
    return ab_layout.CACHE / name


def _previous(out: Path, identity: dict, resume: bool) -> dict | None:
    """The state of the ab run in `out` that --resume continues (None: a new one); ParameterError
    when `out` is not ours to fill or does not match."""
    refuse_checkout(out, "--out")
    if out.exists() and not out.is_dir():
        raise ParameterError(f"--out {out} is a file")
    if report_holding(out) is not None:
        raise ParameterError(f"--out {out} is in the report {report_holding(out)}")
    state = None
    if (out / ab_layout.STATE).exists():
        try:
            state = json.loads((out / ab_layout.STATE).read_text())
        except ValueError:
            raise ParameterError(f"--out {out}: {ab_layout.STATE} is damaged") from None
    if state is None and out.is_dir() and any(out.iterdir()):
        raise ParameterError(f"--out {out} holds files that are not an ab run: choose a new one")
    if resume and state is None:
        raise ParameterError(f"--resume: {out} holds no ab run to continue")
    if state is not None and not resume:
        raise ParameterError(
            f"--out {out} holds an ab run: --resume continues it (delete it to start over)"
        )
    for key in IDENTITY if state else ():
        if state.get(key) != identity[key]:
            raise ParameterError(
                f"--resume: {out} is an ab run of another {key} ({state.get(key)} there, "
                f"{identity[key]} now)"
            )
    return state


def _floor_at_hand(platform: str, device: str | None) -> dict | None:
    """The noise floor an A/A on this platform stored, when it was measured on `device`."""
    return kept_noise_floor(ab_layout.CACHE, platform, device)


def _compare(out: Path, state: dict, failed: list[str]) -> int:
    """`compare` of the finished runs: printed, written beside them; an A/A's noise floor kept."""
    runs = {
        s: [
            rounds.folder(out, s, k) for k in range(1, state["runs"] + 1) if rounds.done(out, s, k)
        ]
        for s in ab_layout.SIDES
    }
    try:
        a, b = load_side(runs["A"]), load_side(runs["B"])
        floor = _floor_at_hand(state["platform"], a[0].device)
        comparison = compare_runs(a, b, factor=state["factor"], noise_floor=floor)
    except CompareError as err:  # no finished run on a side, or no record in common
        print(f"error: compare: {err}", file=sys.stderr)
        return 1
    sys.stdout.write(_header(state) + to_text(comparison))
    write_text(out / "compare.json", json.dumps(to_json(comparison), indent=1) + "\n")
    write_text(out / "compare.html", to_html(comparison))
    print(f"html: {out / 'compare.html'}\njson: {out / 'compare.json'}")
    named = {part for key in comparison.table["key"] for part in key.split("/")[2:3]}
    for impl in sorted(slowdowns(state["slow_b"] or "").keys() - named):
        print(f"note: --slow-b: no record names implementation {impl!r}", file=sys.stderr)
    if state["a"] == state["b"] and not state["slow_b"]:
        _keep_noise_floor(out, state, comparison)
    for why in failed:
        print(f"error: {why}", file=sys.stderr)
    return max(comparison.exit_code, 1 if failed else 0)


def _keep_noise_floor(out: Path, state: dict, comparison) -> None:
    try:
        floor = noise_floor(comparison)
    except CompareError as err:
        print(f"note: no noise floor: {err}", file=sys.stderr)
        return
    floor.update(
        notebooks=state["only"] or "all",
        measured_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        out=str(out),
    )
    text = json.dumps(floor, indent=1) + "\n"
    write_text(out / NOISE_FLOOR_FILE, text)
    kept = ab_layout.CACHE / f"noise-floor-{state['platform']}.json"
    held = _floor_at_hand(state["platform"], floor["device"])
    if held and held["runs_a_side"] > floor["runs_a_side"]:  # fewer runs do not replace it
        print(f"noise floor of this A/A: {out / NOISE_FLOOR_FILE} ({kept} has more runs a side)")
        return
    write_text(kept, text)
    print(f"noise floor of this A/A: {kept}")


def _remember(out: Path, state: dict) -> None:
    """Each side's finished runs into the results store, one report a side (a side slowed by
    --slow-b left out); a store that fails says so and fails nothing (store.remember)."""
    path = store.store_path(report=ROOT / "outputs" / "ab")  # $KERNEL_WORKBOOK_STORE, else ours
    for side in ab_layout.SIDES:
        if side == "B" and state["slow_b"]:
            continue
        if any(rounds.done(out, side, k) for k in range(1, state["runs"] + 1)):
            store.remember(out / side, path=path, report=f"ab:{out.name}/{side}")
    print(f"results store: the runs of {'A' if state['slow_b'] else 'A and B'} added to {path}")


def _header(state: dict) -> str:
    """The line that says what was compared, above compare's table."""
    slow = f"; TEST ONLY: B slowed by {state['slow_b']}" if state["slow_b"] else ""
    return (
        f"ab: A = {state['revisions']['A']} ({state['a'][:12]}), B = {state['revisions']['B']} "
        f"({state['b'][:12]}); platform {state['platform']}, notebooks "
        f"{','.join(state['only'] or ['all'])}; runs a side: {state['runs']}, in rounds A B, B A, "
        f"...{slow}\n"
    )


def ab(
    rev_a: str,
    rev_b: str,
    *,
    platform: str,
    runs: str = str(DEFAULT_RUNS),
    only: str | None = None,
    params: list[str] | tuple[str, ...] = (),
    factor: str | None = None,
    out: str | None = None,
    slow_b: list[str] | tuple[str, ...] = (),
    resume: bool = False,
) -> int:
    """The `ab` command (see the module docstring); its exit code. Bad input raises ParameterError
    before anything is made or run."""
    state = {"runs": _runs(runs), "factor": check_factor(factor), "slow_b": _slowdown(slow_b)}
    names = [n.strip() for n in only.split(",") if n.strip()] if only is not None else None
    overrides = dict(parse_override(p) for p in notebook_params(params))  # runs get its profile
    plan = load_plan(platform, overrides=overrides, only=names, here=True)
    commits = {"A": resolve(ROOT, rev_a, "REV_A"), "B": resolve(ROOT, rev_b, "REV_B")}
    _check_sides(commits, plan.platform, names)
    identity = {"a": commits["A"], "b": commits["B"], "platform": plan.platform}
    identity.update(only=names, params=list(params), slow_b=state["slow_b"])
    out = Path(out).resolve() if out else _default_out(identity)
    previous = _previous(out, identity, resume) or {}
    out.parent.mkdir(parents=True, exist_ok=True)
    with locked(out):
        key = hashlib.sha1(str(out).encode()).hexdigest()[:8]
        paths = {
            c: ab_layout.CACHE / "worktrees" / f"{key}-{c[:12]}" for c in set(commits.values())
        }
        checkouts = {s: checked_out(ROOT, c, paths[c]) for s, c in commits.items()}
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        state.update(identity, revisions={"A": rev_a, "B": rev_b})
        state["started_utc"] = previous.get("started_utc", started)
        out.mkdir(exist_ok=True)
        write_text(out / ab_layout.STATE, json.dumps(state, indent=1) + "\n")
        sides = {
            s: rounds.Side(
                s,
                state["revisions"][s],
                commits[s],
                checkouts[s],
                rounds.environment(checkouts[s], ROOT, state["slow_b"] if s == "B" else None),
            )
            for s in ab_layout.SIDES
        }
        arguments = ["--platform", plan.platform, *(["--only", ",".join(names)] if names else [])]
        arguments += [arg for p in params for arg in ("-p", p)]
        sys.stderr.write(_header(state) + f"ab: into {out}\n")
        failed = rounds.run_all(out, sides, state["runs"], arguments)
        _remember(out, state)
        code = _compare(out, state, failed)
        for path in set(paths.values()):
            if why := remove(ROOT, path):
                print(f"note: worktree {path} kept: {why}", file=sys.stderr)
    return code
