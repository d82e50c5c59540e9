"""Headlines keyed by what they mean. A topic declares a record a headline under a stable key
(`moe.forward_vs_dense`, `flex.causal_vs_sdpa.bfloat16`, ...); the shape, dtype and implementation
it was measured at are the record's data, shown beside its value, so the same headline measured at
each platform's own size meets in one gallery panel. A headline is either a ratio against a
baseline (faster or slower) or a fraction of a ceiling the subject can at best reach (a dense GEMM
of the same FLOPs, a copy of its input): `ceiling` names it.

Reports written before the keys declared the headline by its label text; `key_of` maps those
labels to their keys (LEGACY), so old reports compare with new ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Headline:
    title: str  # what the figure means; never its shape (that is data)
    ceiling: str | None = None  # a fraction of this ceiling (0-1), not a ratio vs a baseline


DENSE = "the dense GEMM pair of the same FLOPs"
# Key templates: `{name}` stands for one dot-free word (a preset, a dtype).
HEADLINES = {
    "moe.forward_vs_dense": Headline("MoE forward: dispatch chosen here / dense GEMM", DENSE),
    "moe.forward_backward_vs_dense": Headline(
        "MoE forward+backward: dispatch chosen here / dense GEMM", DENSE
    ),
    "moe.seed_same_dtype": Headline("MoE forward: dispatch chosen here vs seed-style, both fp32"),
    "moe.seed_config": Headline(
        "MoE forward: dispatch chosen here vs seed-style as it ran (fp32, training mode)"
    ),
    "moe.preset.{preset}": Headline("MoE {preset}: dispatch chosen here / dense GEMM", DENSE),
    "moe.expert_parallel_vs_single": Headline(
        "MoE expert parallel (W ranks) vs one rank with all the cores"
    ),
    "moe.fp8_decode_vs_bf16": Headline("FP8 MoE decode (C kernel) vs the same on bf16 experts"),
    "flex.causal_vs_sdpa.{dtype}": Headline("flex causal forward vs best SDPA backend, {dtype}"),
    "flex.gqa_decode_vs_sdpa": Headline("flex GQA decode vs best SDPA backend"),
    "flex.paged_vs_contiguous": Headline(
        "flex paged KV cache / flex on a contiguous cache", "flex on a contiguous cache"
    ),
    "fp8.quantize_vs_copy": Headline(
        "FP8 quantise (fastest variant here) / fp32 copy of its input", "an fp32 copy of its input"
    ),
    "fp8.linear_vs_bf16": Headline("FP8 linear vs bf16 linear"),
    "fp8.block_linear_vs_bf16": Headline("block-scaled FP8 linear vs bf16 linear"),
    "fp8.grouped_gemm_vs_bf16": Headline("FP8 grouped GEMM vs bf16 torch._grouped_mm"),
    "fp8.weight_only_decode_vs_bf16": Headline(
        "weight-only FP8 linear (W8A16, variant chosen here) vs bf16 linear, decode"
    ),
    "fp8.weight_only_decode_vs_read": Headline(
        "weight-only FP8 linear (W8A16, variant chosen here), decode: its weight's bytes per "
        "second / a read of the same bytes",
        "a read of the FP8 weight's bytes",
    ),
    "backend.bf16_gemm_vs_fp32": Headline("bf16 GEMM vs fp32, largest swept size"),
    "backend.compiled_mlp_vs_eager": Headline("compiled MLP vs eager"),
}

# The labels reports carried before keys (up to revision ba6a088), each to its key template.
LEGACY = (
    (
        r"MoE forward: dispatch chosen here vs dense GEMM, same FLOPs \(.*\)",
        "moe.forward_vs_dense",
    ),
    (
        r"MoE forward_backward: dispatch chosen here vs dense GEMM, same FLOPs \(.*\)",
        "moe.forward_backward_vs_dense",
    ),
    (r"MoE forward: dispatch chosen here vs seed-style, both float32", "moe.seed_same_dtype"),
    (r"MoE forward: dispatch chosen here \(\w+\) vs seed-style as it ran .*", "moe.seed_config"),
    (r"MoE (?P<preset>[\w.-]+) routing \(.*\): dispatch chosen here .*", "moe.preset.{preset}"),
    (
        r"flex causal forward vs best SDPA backend \((?P<dtype>\w+)\)",
        "flex.causal_vs_sdpa.{dtype}",
    ),
    (r"flex GQA decode vs best SDPA backend", "flex.gqa_decode_vs_sdpa"),
    (r"flex paged KV vs flex on a contiguous cache", "flex.paged_vs_contiguous"),
    (r"FP8 quantise \(fastest variant here\) vs fp32 copy .*", "fp8.quantize_vs_copy"),
    (r"FP8 linear \(.*\) vs bf16 linear, n=\d+", "fp8.linear_vs_bf16"),
    (r"block-scaled FP8 linear \(.*\) vs bf16 linear, n=\d+", "fp8.block_linear_vs_bf16"),
    (
        r"FP8 grouped GEMM \(.*\) vs bf16 torch\._grouped_mm, \d+ experts",
        "fp8.grouped_gemm_vs_bf16",
    ),
    (r"bf16 GEMM vs fp32 at the largest swept n", "backend.bf16_gemm_vs_fp32"),
    (r"compiled MLP vs eager", "backend.compiled_mlp_vs_eager"),
)


def _pattern(template: str) -> re.Pattern:
    return re.compile(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[\\w-]+)", re.escape(template)))


_TEMPLATES = [(_pattern(t), t) for t in HEADLINES]


def key(template: str, **fields: str) -> str:
    """The key `template` names with `fields` filled in; ValueError for an undeclared one."""
    if template not in HEADLINES:
        raise ValueError(f"headline {template!r} is not declared in kernel_lib.headlines")
    return template.format(**fields)


def headline(key: str) -> Headline | None:
    """The declared headline `key` is (its title filled in), or None."""
    for pattern, template in _TEMPLATES:
        if match := pattern.fullmatch(key):
            h = HEADLINES[template]
            return Headline(h.title.format(**match.groupdict()), h.ceiling)
    return None


def key_of(label: str) -> str:
    """The key of a headline as a report stored it: a key as it is, a label of a report written
    before keys (LEGACY) as its key, anything else unchanged (a row of its own)."""
    if headline(label):
        return label
    for pattern, template in LEGACY:
        if match := re.fullmatch(pattern, label):
            return template.format(**match.groupdict())
    return label
