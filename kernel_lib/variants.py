"""Fast paths chosen by measurement on the machine that runs them, as Triton's autotuner and
Inductor's max-autotune do: the candidates of one kernel are checked and timed interleaved at the
case's shape (`measure.check_then_time`), the fastest ok one is used, and the choice is cached per machine
fingerprint (device name, ISA, torch version) and the set of candidates that ran (checked ok), so
later runs on the same machine reuse it, and a new candidate, or one that could not run or failed
its check before, is measured against the others.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import torch

from kernel_lib import records as rec
from kernel_lib.measure import Candidate, Case, check_then_time
from kernel_lib.params import ROOT
from kernel_lib.platform import DeviceFacts
from kernel_lib.timing import ratio

CACHE_ENV = "KERNEL_WORKBOOK_VARIANT_CACHE"  # a folder; default .cache/variants in the repository


def fingerprint(facts: DeviceFacts) -> dict:
    """What decides which variant is fastest: the device and its ISA, torch and its backend."""
    return {
        "device": facts.name,
        "arch": facts.arch,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


def fingerprint_key(facts: DeviceFacts) -> str:
    text = json.dumps(fingerprint(facts), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cache_file(facts: DeviceFacts) -> Path:

    folder = Path(os.environ.get(CACHE_ENV) or ROOT / ".cache" / "variants")
    return folder / f"{fingerprint_key(facts)}.json"


def cached_choice(
    kernel: str, case: Case, facts: DeviceFacts, among: tuple[str, ...]
) -> str | None:
    """The variant chosen earlier on this machine for `kernel` at this case among these
    candidates (those that ran), if any."""
    path = _cache_file(facts)
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("choices", {}).get(_key(kernel, case, among))


def _key(kernel: str, case: Case, among: tuple[str, ...]) -> str:
    shape = rec.shape_key(case.shape)
    return f"{kernel}/{case.dtype}/{case.mode}/{shape}/{'|'.join(sorted(among))}"


def _store(
    kernel: str, case: Case, facts: DeviceFacts, among: tuple[str, ...], choice: str
) -> None:
    path = _cache_file(facts)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {"fingerprint": fingerprint(facts)}
    data.setdefault("choices", {})[_key(kernel, case, among)] = choice
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: concurrent runs never read half a file


def tune(
    kernel: str,
    case: Case,
    candidates: list[Candidate | rec.Record],
    *,
    facts: DeviceFacts,
    baseline: str | None = None,
    min_time_s: float = 0.2,
    rounds: int = 10,
    progress: str | None = None,
    among: tuple[str, ...] | None = None,
    comparator: str | None = None,
) -> tuple[str | None, list[rec.Record]]:
    """(chosen implementation, the candidates' records side by side): `compare`, then `choose`."""
    records = check_then_time(
        case,
        candidates,
        facts=facts,
        baseline=baseline,
        min_time_s=min_time_s,
        rounds=rounds,
        progress=progress,
    )
    eligible = among or tuple(r.implementation for r in records if r.implementation != baseline)
    return choose(kernel, case, records, facts=facts, among=eligible, comparator=comparator)


def choose(
    kernel: str,
    case: Case,
    records: list[rec.Record],
    *,
    facts: DeviceFacts,
    among: tuple[str, ...],
    comparator: str | None = None,
) -> tuple[str | None, list[rec.Record]]:
    """The variant of `kernel` to use, among the implementations `among` checked and timed
    interleaved in `records` (one `compare`): the one cached for this machine where it is still
    ok, else the fastest ok one, which is cached. The records of `among` name the choice in
    `variant` (None when none ran) and metrics.variant_source says "cached" or "measured". A
    tuned variant slower than the plain `comparator` (the whole 95 % interval of their ratio
    beyond 1) is flagged: its tuning does not pay on this machine."""
    # a user's kernel (kernel_lib.plugins) is timed beside the variants, never chosen among them
    ok = {
        r.implementation: r
        for r in records
        if r.status == "ok" and r.implementation in among and r.plugin is None
    }
    ran = tuple(ok)  # the cache key: a candidate that was skipped or wrong before is measured
    choice = cached_choice(kernel, case, facts, ran)
    source = "cached"
    if choice not in ok:
        choice = min(ok, key=lambda name: ok[name].median_ms) if ok else None
        source = "measured"
        if choice is not None:
            _store(kernel, case, facts, ran, choice)
    # the comparator need not be a variant itself (flex's plain attention is never chosen)
    plain = next((r for r in records if r.implementation == comparator and r.status == "ok"), None)

    def mark(r: rec.Record) -> rec.Record:
        if r.implementation not in among:
            return r
        flags = r.flags
        if plain is not None and r.implementation in ok and r is not plain:
            speedup = ratio(r.round_medians_ms, plain.round_medians_ms)
            if speedup.low > 1:
                flags += (
                    f"tuned {r.implementation} is slower than its plain comparator "
                    f"{comparator} here: {speedup.value:.2f}x [{speedup.low:.2f}, "
                    f"{speedup.high:.2f}]",
                )
        metrics = {**r.metrics, "variant_source": source}
        return dataclasses.replace(r, variant=choice, metrics=metrics, flags=flags)

    return choice, [mark(r) for r in records]
