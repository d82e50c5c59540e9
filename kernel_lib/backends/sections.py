"""The five backend notebooks' common sections, one call each: device facts, capability probes,
roofline, costs, MLP modes and the summary. Each returns a `Section`: its records and the table
the notebook shows; `check_table` is what nbval compares (PASS/FAIL only)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kernel_lib.backends import allocation, amd, costs, nvidia, probes, roofline, xla, xpu
from kernel_lib.backends.config import BackendConfig
from kernel_lib.backends.target import Target, cpu_facts, facts_record, facts_table, find_target
from kernel_lib.records import Record, as_headline, summary_table, to_frame, to_frame_with_verdict
from kernel_lib.report.findings import headlines

# The headlines every backend notebook declares (records.as_headline), never the largest number:
COMPILED_MLP = (
    "backend.compiled_mlp_vs_eager"  # torch.compile's ratio over eager, with its interval
)
BF16_GEMM = "backend.bf16_gemm_vs_fp32"  # needs both dtypes in gemm_dtypes


@dataclass(frozen=True)
class Section:
    """A notebook section's records and the table it shows."""

    records: list[Record]
    table: pd.DataFrame


def setup(backend: str, params: dict) -> tuple[Target, BackendConfig]:
    """The notebook's device (find_target) and its validated parameters (a notebook's globals())."""
    pd.set_option("display.max_colwidth", 120)
    return find_target(backend), BackendConfig.from_params(params)


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


def show(records: list[Record]) -> Section:
    """A backend-specific section's records with the common table."""
    return Section(records, table(records))


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


def facts(target: Target) -> Section:
    """Section 1: the facts record and its one-column table."""
    record = backend_facts(target)
    return Section([record], facts_table(record).to_frame())


def capabilities(target: Target, cfg: BackendConfig) -> Section:
    """Section 2: every capability probe and its yes/no/detail table."""
    records = probes.probe(target, compile=cfg.probe_compile)
    return Section(records, probes.probe_table(records))


def roof(target: Target, cfg: BackendConfig, *, progress: bool = False) -> Section:
    """Section 3: the GEMM sweep and copy/triad bandwidth, with their measured and datasheet
    ceilings."""
    records = roofline.gemm_sweep(target, cfg, progress=progress)
    records += roofline.bandwidth(target, cfg, progress=progress)
    return show(roofline.with_ceilings(records, target.facts))


def overheads(target: Target, cfg: BackendConfig, *, progress: bool = False) -> Section:
    """Section 4a: launch and sync latency, host<->device transfers."""
    records = costs.launch_latency(target, cfg)
    return show(records + costs.transfer(target, cfg, progress=progress))


def mlp(target: Target, cfg: BackendConfig) -> Section:
    """Section 4b: the small MLP eager vs compiled vs CUDA graph, and the cold first call."""
    return show(costs.mlp_modes(target, cfg))


def allocators(target: Target, cfg: BackendConfig) -> Section:
    """Section 5 on a CPU: a small workload with fresh outputs under each host allocator, one
    process per allocator and round, ratios against glibc's malloc as it comes."""
    return show(allocation.allocator_effect(target, cfg))


def check_table(*sections: Section) -> pd.DataFrame:
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


def error_table(*sections: Section) -> pd.DataFrame:
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


def declare_headlines(records: list[Record], cfg: BackendConfig) -> list[Record]:
    """The records with the notebook's headlines declared: the compiled MLP against eager, and
    the bf16 GEMM against fp32 at the largest swept n (whatever its status)."""
    largest = {"M": max(cfg.gemm_sizes), "N": max(cfg.gemm_sizes), "K": max(cfg.gemm_sizes)}
    both = {"float32", "bfloat16"} <= set(cfg.gemm_dtypes)

    def label(r: Record) -> str | None:
        if r.case == "mlp" and r.implementation.startswith("torch_compile"):
            return COMPILED_MLP
        if both and r.case == "gemm" and r.dtype == "bfloat16" and r.shape == largest:
            return BF16_GEMM
        return None

    def showable(r: Record) -> bool:  # a skip shows its reason; an ok record needs a figure
        return r.status != "ok" or r.ratio_vs_baseline is not None

    return [as_headline(r, label(r)) if label(r) and showable(r) else r for r in records]


def summary(cfg: BackendConfig, *sections: Section) -> Section:
    """Every section's records, headlines declared, and the run's summary table (every skipped
    case with its reason)."""
    records = declare_headlines([r for s in sections for r in s.records], cfg)
    return Section(records, summary_table(records))


def headline_lines(section: Section) -> list[str]:
    """The declared headlines as the report shows them."""
    return headlines(to_frame_with_verdict(section.records))
