"""Record ids of reports written before one name per quantity (up to revision ba6a088), in today's
names, so that `compare` matches old reports with new ones. The MoE sweeps wrote their swept
count twice (`E=4,...,experts=4`: now only E, T or K), and the FP8 grouped GEMM check named its
shape `experts`/`tokens` where the timed case says E/T. Applied when a report is read
(`results.files`), as old headline labels are mapped to keys (`headlines.key_of`)."""

from __future__ import annotations

# sweep case -> the duplicate name it wrote beside the shape's own letter
SWEEP_DUPLICATES = {"sweep_experts": "experts", "sweep_tokens": "tokens", "sweep_top_k": "top_k"}
RENAMED = {"grouped_gemm_check": {"experts": "E", "tokens": "T"}}


def shape_of(case: str, shape: dict) -> dict:
    """A saved record's shape in today's names."""
    duplicate = SWEEP_DUPLICATES.get(case)
    names = RENAMED.get(case, {})
    return {names.get(k, k): v for k, v in shape.items() if k != duplicate}


def record_id_of(record_id: str) -> str:
    """`record_id` (platform/topic/case/implementation/dtype/mode/shape) in today's names."""
    parts = record_id.split("/")
    if len(parts) != 7 or (parts[2] not in SWEEP_DUPLICATES and parts[2] not in RENAMED):
        return record_id
    shape = dict(part.split("=", 1) for part in parts[6].split(",") if "=" in part)
    shape = shape_of(parts[2], shape)
    return "/".join([*parts[:6], ",".join(f"{k}={shape[k]}" for k in sorted(shape))])
