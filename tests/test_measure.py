"""Check, then time: the harness refuses to time unchecked or wrong candidates."""

import pytest
import torch

from kernel_lib.checks import Tolerance, Unsupported, against
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.records import skipped

TOL = Tolerance(1e-5, "fp32 GEMM, K=64")
A, B = torch.randn(64, 64), torch.randn(64, 64)
REF = A.double() @ B.double()
CASE = Case("t", "mm", {"N": 64}, "float32", "forward")


def _candidate(name, fn, **kw):
    return Candidate(
        name, fn, against(REF, reference="fp64 mm", tolerance=TOL), flops=2 * 64**3, **kw
    )


def test_a_candidate_needs_its_check():
    with pytest.raises(TypeError):
        Candidate("mm", lambda: A @ B)  # no check: cannot even be built
    with pytest.raises(TypeError, match="never timed without its check"):
        Candidate("mm", lambda: A @ B, check=None)


def test_wrong_output_is_never_timed(cpu_facts):
    calls = []
    broken = _candidate("broken", lambda: calls.append(1) or A @ B.t())
    (record,) = check_then_time(CASE, [broken], facts=cpu_facts, min_time_s=0.01)
    assert record.status == "wrong" and record.median_ms is None and calls == [1]
    assert record.check["pass"] is False and "vs fp64 mm" in record.reason


def test_ok_records_carry_check_samples_and_ratio_interval(cpu_facts):
    records = check_then_time(
        CASE,
        [_candidate("base", lambda: A @ B), _candidate("same", lambda: A @ B)],
        facts=cpu_facts,
        baseline="base",
        min_time_s=0.02,
        rounds=10,
    )
    base, same = records
    assert base.check["pass"] and same.check["pass"] and len(same.samples_ms) >= 10
    assert base.ratio_vs_baseline is None and same.baseline == "base"
    assert same.ratio_low <= same.ratio_vs_baseline <= same.ratio_high
    assert (same.mode, same.dtype, same.shape) == ("forward", "float32", {"N": 64})


def test_unsupported_and_out_of_memory_are_skipped(cpu_facts):
    def unsupported():
        raise Unsupported("needs a GPU")

    def oom():
        raise torch.OutOfMemoryError("tried to allocate 9 TiB")

    given = skipped("t", "mm", "given", "not built", facts=cpu_facts)
    records = check_then_time(
        CASE, [_candidate("u", unsupported), _candidate("o", oom), given], facts=cpu_facts
    )
    assert [r.status for r in records] == ["skipped"] * 3
    assert records[0].reason == "needs a GPU" and records[1].reason.startswith("out of memory")
    assert records[2] is given


def test_a_raising_candidate_costs_only_its_own_record(cpu_facts):
    def compile_error():
        raise RuntimeError("triton.compiler.errors.CompilationError: at 12:4\nmore lines")

    calls = []

    def raises_while_timed():  # passes its checked first call, then raises
        calls.append(1)
        if len(calls) > 1:
            raise ValueError("shape mismatch in round 2")
        return A @ B

    records = check_then_time(
        CASE,
        [
            _candidate("base", lambda: A @ B),
            _candidate("bug", compile_error),
            _candidate("later", raises_while_timed),
            _candidate("same", lambda: A @ B),
        ],
        facts=cpu_facts,
        baseline="base",
        min_time_s=0.01,
    )
    base, bug, later, same = records
    assert (bug.status, bug.reason) == (
        "failed",
        "RuntimeError: triton.compiler.errors.CompilationError: at 12:4",
    )
    assert (
        later.status == "failed"
        and later.reason == "while timed: ValueError: shape mismatch in round 2"
    )
    assert (later.mode, later.dtype, later.median_ms) == ("forward", "float32", None)
    assert base.status == same.status == "ok" and same.ratio_vs_baseline is not None


def test_baseline_must_be_a_candidate_and_a_wrong_baseline_gives_no_ratios(cpu_facts):
    with pytest.raises(ValueError, match="baseline"):
        check_then_time(
            CASE, [_candidate("a", lambda: A @ B)], facts=cpu_facts, baseline="zz", min_time_s=0.01
        )
    records = check_then_time(
        CASE,
        [_candidate("bad", lambda: -(A @ B)), _candidate("a", lambda: A @ B)],
        facts=cpu_facts,
        baseline="bad",
        min_time_s=0.01,
    )
    assert records[1].status == "ok" and records[1].ratio_vs_baseline is None
