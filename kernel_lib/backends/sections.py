"""The five backend notebooks' common sections, one call each of (target, cfg): device facts,
capability probes, roofline, costs and MLP modes (kernel_lib.backends.suite declares them, and each
backend's own, in the notebooks' order). Each returns a `suite.Table`: the table the notebook shows
and its records, headlines declared in the section that makes them; `check_table` is what nbval
compares (PASS/FAIL only)."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from kernel_lib.backends import amd, costs, nvidia, probes, roofline, xla, xpu
from kernel_lib.backends.config import BackendBenchConfig
from kernel_lib.backends.target import Target, cpu_facts, facts_record, facts_table
from kernel_lib.records import Record, as_headline, summary_table, to_frame, to_frame_with_verdict
from kernel_lib.report.findings import headlines
from kernel_lib.suite import HasRecords, Table

# The headlines every backend notebook declares (records.as_headline), never the largest number,
# each by the section that makes its record:
COMPILED_MLP = (
    "backend.compiled_mlp_vs_eager"  # mlp: torch.compile's ratio over eager, with its interval
)
BF16_GEMM = "backend.bf16_gemm_vs_fp32"  # roof: needs both dtypes in gemm_dtypes


def measuring(target: Target) -> str:
    """What this run measures: the device and its arch (ISA flags on a CPU), or why nothing."""
    if not target.present:
        return f"measuring nothing: {target.reason}"
    return f"measuring {target.facts.name} ({target.facts.arch})"


def table(records: list[Record]) -> pd.DataFrame:
    """summary_table plus the topic's metrics and, where known, the fraction of the datasheet."""
    frame = to_frame(records)
    extra = frame.filter(like="metrics.")
    if "fraction_of_datasheet" in frame and frame["fraction_of_datasheet"].notna().any():
        extra = extra.join(frame[["fraction_of_datasheet", "datasheet_basis"]])
    return summary_table(records).join(extra)


def show(records: list[Record]) -> Table:
    """A section's records with the common table."""
    return Table(table(records), records)


def _declared(records: list[Record], key: str, subject: Callable[[Record], bool]) -> list[Record]:
    """The records with the headline `key` declared on its `subject` where it has something to
    show: a skip its reason, an ok record its ratio."""

    def showable(r: Record) -> bool:
        return r.status != "ok" or r.ratio_vs_baseline is not None

    return [as_headline(r, key) if subject(r) and showable(r) else r for r in records]


def backend_facts(target: Target) -> Record:
    """The device-facts record, with the backend's own facts where it is present (on a CPU: the
    model and its ISA flags, so two CPU reports are never confused)."""
    if not target.present:
        return facts_record(target)
    extra = {
        "nvidia": nvidia.nvidia_facts,
        "amd": amd.amd_facts,
        "tpu": xla.xla_facts,
        "xpu": xpu.xpu_facts,
        "cpu": lambda: cpu_facts(target.facts),
    }[target.backend]
    return facts_record(target, extra())


def facts(target: Target) -> Table:
    """Section 1: the facts record and its one-column table."""
    record = backend_facts(target)
    return Table(facts_table(record).to_frame(), [record])


def capabilities(target: Target, cfg: BackendBenchConfig) -> Table:
    """Section 2: every capability probe and its yes/no/detail table."""
    records = probes.probe(target, compile=cfg.probe_compile)
    return Table(probes.probe_table(records), records)


def roof(target: Target, cfg: BackendBenchConfig, *, progress: bool = False) -> Table:
    """Section 3: the GEMM sweep (the `backend.matmul` plug-ins in it) and copy/triad
    bandwidth, with their measured and datasheet ceilings; the headline BF16_GEMM is our bf16
    GEMM against fp32 at the largest swept n (whatever its status), where both dtypes are
    swept."""
    records = roofline.gemm_sweep(target, cfg, progress=progress)
    records += roofline.bandwidth(target, cfg, progress=progress)
    records = roofline.with_ceilings(records, target.facts)
    if {"float32", "bfloat16"} <= set(cfg.gemm_dtypes):
        largest = dict.fromkeys(("M", "N", "K"), max(cfg.gemm_sizes))
        records = _declared(
            records,
            BF16_GEMM,
            lambda r: (
                r.case == "gemm"
                and r.dtype == "bfloat16"
                and r.shape == largest
                and r.plugin is None
            ),
        )
    return show(records)


def overheads(target: Target, cfg: BackendBenchConfig, *, progress: bool = False) -> Table:
    """Section 4a: launch and sync latency, host<->device transfers."""
    records = costs.launch_latency(target, cfg)
    return show(records + costs.transfer(target, cfg, progress=progress))


def mlp(target: Target, cfg: BackendBenchConfig) -> Table:
    """Section 4b: the small MLP eager vs compiled vs CUDA graph, and the cold first call; the
    headline COMPILED_MLP is the compiled MLP against eager."""
    records = _declared(
        costs.mlp_modes(target, cfg),
        COMPILED_MLP,
        lambda r: r.case == "mlp" and r.implementation.startswith("torch_compile"),
    )
    return show(records)


def check_table(*sections: HasRecords) -> pd.DataFrame:
    """One row per checked or skipped record: PASS, FAIL or skipped (no digits: nbval compares
    it across machines). AssertionError naming every failed check."""
    records = [r for s in sections for r in s.records if r.check or r.status == "skipped"]
    wrong = [
        f"{r.case}/{r.implementation}/{r.dtype}: {r.reason}"
        for r in records
        if r.status == "wrong"
    ]
    if wrong:
        raise AssertionError("checks failed: " + "; ".join(wrong))
    rows = [
        {
            "case": r.case,
            "implementation": r.implementation,
            "dtype": r.dtype,
            "shape": ",".join(f"{k}={v}" for k, v in r.shape.items()),
            "check": "PASS" if r.status == "ok" else r.status,
        }
        for r in records
    ]
    return pd.DataFrame(rows, columns=["case", "implementation", "dtype", "shape", "check"])


def error_table(*sections: HasRecords) -> pd.DataFrame:
    """Each checked record's error against its reference and the bound it met (the digits that
    check_table leaves out)."""
    rows = [
        {
            "case": r.case,
            "implementation": r.implementation,
            "dtype": r.dtype,
            **{k: r.shape[k] for k in sorted(r.shape)},
            **r.check,
        }
        for s in sections
        for r in s.records
        if r.check
    ]
    return pd.DataFrame(rows)


def headline_lines(records: list[Record]) -> list[str]:
    """The declared headlines among `records` as the report shows them."""
    return headlines(to_frame_with_verdict(records))
