"""Variants chosen by measurement: the slow one never wins, the cache is per machine."""

import dataclasses
import time

import pytest
import torch

from kernel_lib import variants
from kernel_lib.checks import Tolerance, Unsupported, against
from kernel_lib.measure import Candidate, Case

X = torch.randn(64, 64)
CHECK = against(X * 2, reference="x * 2", tolerance=Tolerance(0.0, "exact", "max_abs_error"))
CASE = Case("t", "double", {"N": 64}, "float32", "forward")
ALL = ("slow", "fast", "wrong_but_fast")
RAN = ("slow", "fast")  # checked ok: the cache key


def _slow():
    time.sleep(0.002)
    return X * 2


def _cannot_run():
    raise Unsupported("not on this machine")


def _candidates():
    return [
        Candidate("slow", _slow, CHECK),
        Candidate("fast", lambda: X + X, CHECK),
        Candidate("wrong_but_fast", lambda: X, CHECK),
    ]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(variants.CACHE_ENV, str(tmp_path))
    return tmp_path


def test_the_fastest_checked_candidate_is_chosen_and_cached(cpu_facts):
    choice, records = variants.tune(
        "double", CASE, _candidates(), facts=cpu_facts, min_time_s=0.02
    )
    assert choice == "fast"  # the wrong one is never timed, the slow one never chosen
    assert [r.status for r in records] == ["ok", "ok", "wrong"]
    assert all(r.variant == "fast" for r in records)
    assert variants.cached_choice("double", CASE, cpu_facts, RAN) == "fast"
    again, records = variants.tune("double", CASE, _candidates(), facts=cpu_facts, min_time_s=0.02)
    assert again == "fast" and records[0].metrics["variant_source"] == "cached"


def test_the_cache_key_changes_with_the_machine(cpu_facts):
    other = dataclasses.replace(cpu_facts, arch="avx2 avx512f amx_bf16")
    assert variants.fingerprint_key(cpu_facts) != variants.fingerprint_key(other)
    variants.tune("double", CASE, _candidates(), facts=cpu_facts, min_time_s=0.02)
    assert variants.cached_choice("double", CASE, other, RAN) is None


def test_a_cached_choice_that_no_longer_passes_is_measured_again(cpu_facts, cache):
    variants._store("double", CASE, cpu_facts, ALL, "wrong_but_fast")
    choice, records = variants.tune(
        "double", CASE, _candidates(), facts=cpu_facts, min_time_s=0.02
    )
    assert choice == "fast" and records[1].metrics["variant_source"] == "measured"


def test_a_new_candidate_is_measured_against_the_cached_choice(cpu_facts):
    slow_only = [Candidate("slow", _slow, CHECK)]
    assert variants.tune("double", CASE, slow_only, facts=cpu_facts, min_time_s=0.02)[0] == "slow"
    choice, records = variants.tune(
        "double", CASE, _candidates(), facts=cpu_facts, min_time_s=0.02
    )
    assert choice == "fast" and records[0].metrics["variant_source"] == "measured"


def test_a_candidate_that_could_not_run_before_is_measured_when_it_can(cpu_facts):
    skipped = [Candidate("slow", _slow, CHECK), Candidate("fast", _cannot_run, CHECK)]
    assert variants.tune("double", CASE, skipped, facts=cpu_facts, min_time_s=0.02)[0] == "slow"
    choice, records = variants.tune(
        "double", CASE, _candidates()[:2], facts=cpu_facts, min_time_s=0.02
    )
    assert choice == "fast" and records[0].metrics["variant_source"] == "measured"


def test_a_tuned_variant_slower_than_its_plain_comparator_is_flagged(
    tmp_path, monkeypatch, cpu_facts
):
    monkeypatch.setenv(variants.CACHE_ENV, str(tmp_path))
    choice, records = variants.tune(
        "double",
        CASE,
        _candidates(),
        facts=cpu_facts,
        min_time_s=0.02,
        among=("slow", "fast"),
        comparator="fast",
    )
    by_name = {r.implementation: r for r in records}
    assert choice == "fast" and not by_name["fast"].flags
    assert any("slower than its plain comparator fast" in f for f in by_name["slow"].flags)
    assert by_name["wrong_but_fast"].variant is None  # not among the variants
