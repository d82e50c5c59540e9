"""How busy the machine was while a notebook ran: load averages and CPU steal sampled around it."""

from __future__ import annotations

import os
from pathlib import Path

# A notebook measured while the 1-min load exceeded the core count, or while the hypervisor took
# this share of the CPU time (steal), is flagged: its timings shared the machine.
BUSY_STEAL_FRACTION = 0.05


def _cpu_jiffies() -> tuple[int, int] | None:
    """(steal, total) CPU time from the first line of /proc/stat; None where there is none."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already counted in user]
    values = [int(v) for v in fields[1:9]]
    return (values[7] if len(values) > 7 else 0), sum(values)


def machine_sample() -> dict:
    """The load averages and CPU counters now (before or after a notebook)."""
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:  # not available on this OS
        load = None
    return {"loadavg": load, "jiffies": _cpu_jiffies()}


def busy_reason(machine: dict) -> str:
    """Why a notebook's timings shared a busy machine ('' when they did not)."""
    cores, reasons = machine.get("cores") or 1, []
    loads = {
        when: machine.get(f"load_{when}")
        for when in ("start", "end")
        if machine.get(f"load_{when}")
    }
    high = {when: load[0] for when, load in loads.items() if load[0] > cores}
    if high:
        at = ", ".join(f"{v:.2f} at its {when}" for when, v in high.items())
        reasons.append(f"1-min load {at} > {cores} cores")
    steal = machine.get("steal_fraction")
    if steal is not None and steal > BUSY_STEAL_FRACTION:
        reasons.append(f"CPU steal {steal:.0%} of its time")
    return "; ".join(reasons)


def machine_load(start: dict, end: dict) -> dict:
    """How busy the machine was over one notebook: the load averages (1, 5, 15 min) at its start
    and end, the share of CPU time stolen by the hypervisor over it (Linux), the core count, and
    `busy`, the reason to distrust its timings ('' if none)."""
    steal = None
    if start.get("jiffies") and end.get("jiffies"):
        total = end["jiffies"][1] - start["jiffies"][1]
        steal = round((end["jiffies"][0] - start["jiffies"][0]) / total, 4) if total > 0 else 0.0
    machine = {
        "cores": os.cpu_count(),
        "load_start": start.get("loadavg"),
        "load_end": end.get("loadavg"),
        "steal_fraction": steal,
    }
    return {**machine, "busy": busy_reason(machine)}
