"""Fast paths chosen by measurement on the machine that runs them, as Triton's autotuner and
Inductor's max-autotune do: the candidates of one kernel are checked and timed interleaved at the
case's shape (`measure.compare`), the fastest ok one is used, and the choice is cached per machine
fingerprint (device name, ISA, torch version) so later runs on the same machine reuse it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import torch

from kernel_lib import records as rec
from kernel_lib.measure import Candidate, Case, compare
from kernel_lib.platform import DeviceFacts

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
    from kernel_lib.params import ROOT

    folder = Path(os.environ.get(CACHE_ENV) or ROOT / ".cache" / "variants")
    return folder / f"{fingerprint_key(facts)}.json"


def cached_choice(kernel: str, case: Case, facts: DeviceFacts) -> str | None:
    """The variant chosen earlier on this machine for `kernel` at this case, if any."""
    path = _cache_file(facts)
    if not path.exists():
        return None
    return json.loads(path.read_text()).get("choices", {}).get(_key(kernel, case))


def _key(kernel: str, case: Case) -> str:
    shape = ",".join(f"{k}={case.shape[k]}" for k in sorted(case.shape))
    return f"{kernel}/{case.dtype}/{case.mode}/{shape}"


def _store(kernel: str, case: Case, facts: DeviceFacts, choice: str) -> None:
    path = _cache_file(facts)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {"fingerprint": fingerprint(facts)}
    data.setdefault("choices", {})[_key(kernel, case)] = choice
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
) -> tuple[str | None, list[rec.Record]]:
    """(chosen implementation, the candidates' records side by side). All candidates are checked
    and timed interleaved in this run (the records a notebook shows); the choice is the cached
    one where it is still among the ok records, else the fastest ok record, which is cached.
    Every record names the choice in `variant` (None when no candidate ran) and
    metrics.variant_source says whether it was cached or measured now."""
    records = compare(
        case,
        candidates,
        facts=facts,
        baseline=baseline,
        min_time_s=min_time_s,
        rounds=rounds,
        progress=progress,
    )
    ok = {r.implementation: r for r in records if r.status == "ok"}
    choice = cached_choice(kernel, case, facts)
    source = "cached"
    if choice not in ok:
        choice = min(ok, key=lambda name: ok[name].median_ms) if ok else None
        source = "measured"
        if choice is not None:
            _store(kernel, case, facts, choice)
    return choice, [
        dataclasses.replace(r, variant=choice, metrics={**r.metrics, "variant_source": source})
        for r in records
    ]
