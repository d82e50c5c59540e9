"""The expert-parallel section: torchrun's records at W = 2 (ci sizes, one run shared), a rank
killed mid-run, the launcher's process group, bad input, and where it cannot run."""

import dataclasses
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernel_lib import records as rec
from kernel_lib.__main__ import main
from kernel_lib.headlines import headline
from kernel_lib.moe import ep_bench
from kernel_lib.moe.config import MoEBenchConfig
from kernel_lib.moe.ep_bench import failure, run_ranks, section_expert_parallel, torchrun_command
from kernel_lib.moe.ep_run import HEADLINE, TEST_KILL_ENV
from kernel_lib.moe.ep_work import EP, PHASE_ORDER, RAW, SINGLE, phase_implementation
from kernel_lib.moe.suite import SUITE
from kernel_lib.params import load_plan, notebook_defaults
from kernel_lib.platform import DeviceFacts, device_facts
from kernel_lib.profiling.pending import PROFILE_ENV
from kernel_lib.records import RESULTS_DIR_ENV
from kernel_lib.suite import Context

CI = MoEBenchConfig.from_params(
    {**notebook_defaults("moe"), **load_plan("ci").parameters_for("moe")}
)
PHASES = [phase_implementation(p) for p in PHASE_ORDER]


def _left(folder: Path) -> list[str]:
    """The processes whose command line names `folder` (a run's ranks, its torchrun)."""
    out = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(folder).encode() in cmdline.read_bytes():
                out.append(cmdline.parent.name)
        except OSError:
            continue
    return out


@pytest.fixture(scope="module")
def ci_records(tmp_path_factory):
    """The section at ci sizes, W = 2, as the runner's notebook runs it (one torchrun for all
    tests): its headline profiled."""
    results = tmp_path_factory.mktemp("ep_results")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(RESULTS_DIR_ENV, str(results))
        mp.setenv(PROFILE_ENV, "headlines")
        records = SUITE.run("expert_parallel", Context(CI, device_facts()))
    return records, results


@pytest.mark.slow
def test_the_records_at_w2_are_checked_timed_and_against_one_rank(ci_records):
    records, results = ci_records
    assert CI.ep_world_sizes == (2,) and records and all(r.shape["W"] == 2 for r in records)
    rec.stamp(records, run_id="t", platform="ci")  # record ids unique
    cases = {(r.case, r.mode) for r in records}
    assert cases == {
        (c, m) for c in (EP, f"{EP}_preset_mixtral-8x7b") for m in ("forward", "forward_backward")
    }
    for case, mode in cases:
        by = {r.implementation: r for r in records if (r.case, r.mode) == (case, mode)}
        assert set(by) == {EP, SINGLE, RAW, *PHASES}, set(by)
        assert all(r.status == "ok" and r.check["pass"] is True for r in by.values())
        ep, raw = by[EP], by[RAW]
        assert ep.baseline == SINGLE and ep.ratio_low <= ep.ratio_vs_baseline <= ep.ratio_high
        assert ep.samples_ms and ep.round_medians_ms and by[SINGLE].samples_ms
        assert ep.metrics["bytes_sent_per_token"] > 0
        assert 0 < ep.metrics["all_to_all_fraction_of_transport"]
        assert raw.check["tolerance"] == 0 and raw.check["metric"] == "max_abs_error"
        for name in PHASES:
            assert by[name].check == ep.check and by[name].median_ms > 0
            assert by[name].metrics["fastest_rank_ms"] <= by[name].median_ms
        if mode == "forward_backward":
            assert "dL/dx" in ep.check["reference"] or "weight" in ep.check["reference"]
    (lead,) = [r for r in records if r.headline]
    assert (lead.headline, lead.case, lead.mode, lead.implementation) == (
        HEADLINE, EP, "forward", EP,
    )  # fmt: skip
    assert headline(HEADLINE) and lead.shape == CI.shapes[0].as_dict() | {"W": 2}
    # profiled on rank 0, the other rank serving, its trace beside the results; not again here
    assert set(PHASE_ORDER) <= set(lead.profile["phases"]) and lead.flags == ()
    assert [p.name for p in results.iterdir()] == [lead.profile["trace"]]
    assert _left(results) == []  # the run folder gone, no process of it left


@pytest.mark.slow
def test_a_rank_killed_mid_run_fails_the_records_naming_it(tmp_path, monkeypatch):
    cfg = dataclasses.replace(CI, ep_presets=(), backward=False, ep_timeout_s=120.0)
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(TEST_KILL_ENV, "1:4")  # rank 1 at its 4th command: the single rank's
    start = time.perf_counter()
    records = section_expert_parallel(cfg, device_facts())
    assert time.perf_counter() - start < 60  # torchrun saw it die: no timeout waited for
    assert {r.implementation for r in records} == {EP, SINGLE, RAW}
    assert all(r.status == "failed" for r in records)
    assert re.match(r"rank 1: killed by SIGKILL", records[0].reason), records[0].reason
    assert list(tmp_path.iterdir()) == [] and _left(tmp_path) == []


ORPHAN = """\
import pathlib, subprocess, sys, time
run_dir = pathlib.Path(sys.argv[1])
rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run_dir)],
                        start_new_session=True)  # as torchrun starts its ranks
(run_dir / "rank0.pid").write_text(str(rank.pid))
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_run_past_its_timeout_is_killed_with_every_rank_of_its_own(tmp_path):
    command = [sys.executable, "-c", ORPHAN, str(tmp_path)]
    start = time.perf_counter()
    proc = subprocess.Popen(["sleep", "60"])  # no pid file names it: never touched
    try:
        assert run_ranks(command, 1.5, tmp_path) is None
        assert time.perf_counter() - start < 1.5 + ep_bench.GRACE_S + 5
        rank = int((tmp_path / "rank0.pid").read_text())
        for _ in range(50):
            if not _alive(rank):
                break
            time.sleep(0.1)
        assert not _alive(rank) and proc.poll() is None
    finally:
        proc.kill()


LOG = """\
[rank0]: RuntimeError: [pair.cc:537] Read error: Connection reset by peer
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 11)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12)  (SIGKILL)
"""


def test_the_failure_line_names_the_root_cause_first_then_each_ranks_error(tmp_path):
    (tmp_path / ep_bench.LOG).write_text(LOG)
    (tmp_path / "rank0.error").write_text("RuntimeError: Read error: Connection reset by peer")
    assert failure(1, tmp_path, 300) == (
        "rank 1: killed by SIGKILL; rank 0: RuntimeError: Read error: Connection reset by peer"
    )
    (tmp_path / "rank1.error").write_text("ValueError: bad")
    assert failure(None, tmp_path, 30).startswith(
        "timed out after 30 s (moe_ep_timeout_s), every rank killed; rank 1: ValueError: bad"
    )
    (tmp_path / ep_bench.LOG).write_text("something\nlast words\n")
    for p in tmp_path.glob("*.error"):
        p.unlink()
    assert failure(2, tmp_path, 30) == "torchrun exit code 2: last words"


def test_torchrun_gets_a_rendezvous_of_its_own_or_node_0s(tmp_path):
    command = torchrun_command(2, tmp_path, env={})
    assert command[:3] == [sys.executable, "-m", "torch.distributed.run"]
    text = " ".join(command[3:])
    assert "--standalone --nnodes 1 --nproc-per-node 2 --max-restarts 0" in text
    assert text.endswith(f"-m kernel_lib.moe.ep_run {tmp_path}") and "--rdzv-endpoint" not in text
    env = {ep_bench.NODES_ENV: "2", ep_bench.NODE_RANK_ENV: "1"}
    env[ep_bench.RENDEZVOUS_ENV] = "10.0.0.1:29500"
    text = " ".join(torchrun_command(8, tmp_path, env=env))
    assert "--nnodes 2 --node-rank 1 --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29500" in text
    assert "--standalone" not in text and "--nproc-per-node 8" in text


GPU = DeviceFacts(backend="nvidia", device="cuda:0", name="NVIDIA H100 80GB HBM3")


def test_one_gpu_skips_naming_the_command_that_runs_it_on_more(monkeypatch, tmp_path):
    monkeypatch.setattr(ep_bench.torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(ep_bench, "run_ranks", lambda *a, **k: pytest.fail("nothing runs"))
    monkeypatch.setenv(rec.PLATFORM_ENV, "h100")
    records = section_expert_parallel(dataclasses.replace(CI, ep_world_sizes=(0,)), GPU)
    assert records and all(r.status == "skipped" and r.shape["W"] == 1 for r in records)
    assert records[0].reason.startswith("one device: ")
    assert (
        "python -m kernel_lib run --platform h100 -p moe_ep_world_sizes=[8]" in records[0].reason
    )
    monkeypatch.setattr(ep_bench.torch.cuda, "device_count", lambda: 8)
    assert ep_bench.world_size(0, GPU) == (8, None)
    assert "needs 16 GPUs, this host has 8" in ep_bench.world_size(16, GPU)[1]
    assert ep_bench.world_size(0, dataclasses.replace(GPU, backend="tpu"))[1].endswith("not tpu")
    cpu = device_facts()
    assert ep_bench.world_size(0, cpu) == (len(os.sched_getaffinity(0)), None)


def test_experts_not_divisible_by_w_is_one_line_naming_both_and_nothing_runs(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["run", "--platform", "cpu", "--out", str(out), "-p", "moe_ep_world_sizes=[3]"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "moe_experts=8" in err and "moe_ep_world_sizes=[3]" in err, err
    assert not out.exists()
    with pytest.raises(ValueError, match="moe_ep_presets.*deepseek-v3 has 256"):
        MoEBenchConfig(experts=12, ep_world_sizes=(3,), ep_presets=("deepseek-v3",))
    with pytest.raises(ValueError, match="moe_ep_world_sizes=\\[1\\] must be whole numbers >= 2"):
        MoEBenchConfig(ep_world_sizes=(1,))
