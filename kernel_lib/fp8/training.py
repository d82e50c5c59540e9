"""Teacher-student regression trained with bf16 or FP8 linears: the check that FP8 training learns.

The student is a stack of MLP blocks (Linear D->F, GELU, Linear F->D) with no skip path, so every
bit of signal passes through its linears; the teacher is the same architecture with other seeded
weights, frozen. Letters: R rows per step (batch x seq), D model width, F ffn width.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from kernel_lib.fp8.checks import TOLERANCES
from kernel_lib.fp8.convert import ConversionReport, convert_to_fp8
from kernel_lib.fp8.linear import Fp8LinearConfig


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 60
    rows: int = 256  # R: samples per optimiser step
    dim: int = 32  # D, a multiple of 16 so every linear converts
    ffn: int = 64  # F, a multiple of 16
    layers: int = 1  # MLP blocks
    lr: float = 1e-2  # AdamW: the loss must fall within a few dozen steps (CI runs 20)
    seed: int = 0  # student initialisation and data; the teacher uses seed + 1000

    def __post_init__(self):
        for name in ("steps", "rows", "dim", "ffn", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")


class Mlp(nn.Module):
    """x (R, D) -> (R, D) through `layers` blocks of Linear(D, F), GELU, Linear(F, D)."""

    def __init__(self, dim: int, ffn: int, layers: int):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Linear(ffn, dim))
            for _ in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def make_model(
    cfg: TrainConfig,
    *,
    fp8: Fp8LinearConfig | None = None,
    seed: int | None = None,
    device: str = "cpu",
) -> tuple[Mlp, ConversionReport | None]:
    """The seeded student (same initial weights for every run of a seed), its linears converted
    to Fp8Linear when `fp8`."""
    torch.manual_seed(cfg.seed if seed is None else seed)
    model = Mlp(cfg.dim, cfg.ffn, cfg.layers).to(device)
    report = convert_to_fp8(model, config=fp8) if fp8 is not None else None
    return model, report


@torch.no_grad()
def regression_data(cfg: TrainConfig, *, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets), each (steps, R, D): N(0, 1) inputs and the teacher's outputs on them,
    scaled to unit variance so every run starts near loss 1. Drawn on `device` from a generator
    seeded there (at GPU sizes the inputs are GiBs: no host draw and copy per run)."""
    teacher, _ = make_model(cfg, seed=cfg.seed + 1000, device=device)
    gen = torch.Generator(device).manual_seed(cfg.seed)
    x = torch.randn(cfg.steps, cfg.rows, cfg.dim, generator=gen, device=device)
    y = torch.empty_like(x)
    for step, batch in enumerate(x):  # one step at a time: not (steps, R, F) activations at once
        y[step] = teacher(batch)
    return x, y.div_(y.std())


def train(
    model: nn.Module,
    cfg: TrainConfig,
    *,
    device: str = "cpu",
    progress: bool = False,
    desc: str = "train",
) -> list[float]:
    """AdamW on the regression batches under bf16 autocast (fp32 master weights); MSE per step."""
    inputs, targets = regression_data(cfg, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    losses = []
    for x, y in tqdm(
        zip(inputs, targets), total=cfg.steps, disable=not progress, desc=desc, mininterval=5
    ):
        with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
            out = model(x)
        loss = F.mse_loss(out.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run_names(recipes: list[str]) -> list[str]:
    """The run of each training: 'bf16', then 'fp8_<recipe>' per recipe."""
    return ["bf16", *(f"fp8_{name}" for name in recipes)]


def training_runs(
    cfg: TrainConfig,
    *,
    recipes: list[str],
    seeds: list[int],
    fmt: str = "e4m3fn",
    grad_dtype: str = "e5m2",
    device: str = "cpu",
    progress: bool = False,
) -> pd.DataFrame:
    """Loss per step of the bf16 run and one FP8 run per scaling recipe (forward operands in
    `fmt`, gradients in `grad_dtype`) per seed, each seed's runs from the same initial weights
    and batches. Columns: seed, run, step, loss."""
    fp8 = [Fp8LinearConfig.from_recipe_name(n, fmt=fmt, grad_dtype=grad_dtype) for n in recipes]
    runs = dict(zip(run_names(recipes), [None, *fp8]))
    rows = []
    for seed in seeds:
        seeded = TrainConfig(**{**cfg.__dict__, "seed": seed})
        for run, fp8 in runs.items():
            model, _ = make_model(seeded, fp8=fp8, device=device)
            losses = train(
                model, seeded, device=device, progress=progress, desc=f"{run} seed {seed}"
            )
            rows += [
                {"seed": seed, "run": run, "step": i, "loss": loss}
                for i, loss in enumerate(losses)
            ]
    return pd.DataFrame(rows)


def loss_checks(losses: pd.DataFrame) -> pd.DataFrame:
    """Per (seed, run): first loss, final loss (mean of the last tenth of the steps), and the
    two checks with their figures: `learned` (final / first <= TOLERANCES['learned']) and
    `tracks_bf16` (|final - bf16's final| / bf16's first <= TOLERANCES['tracks_bf16'])."""
    learned, tracks = TOLERANCES["learned"].value, TOLERANCES["tracks_bf16"].value
    rows = []
    for seed, runs in losses.groupby("seed", sort=False):
        per_run = {run: group["loss"].to_numpy() for run, group in runs.groupby("run", sort=False)}
        tail = max(1, len(per_run["bf16"]) // 10)
        bf16_first, bf16_final = per_run["bf16"][0], per_run["bf16"][-tail:].mean()
        for run, loss in per_run.items():
            first, final = float(loss[0]), float(loss[-tail:].mean())
            fraction, gap = final / first, abs(final - bf16_final) / bf16_first
            rows.append(
                {
                    "seed": seed,
                    "run": run,
                    "first_loss": first,
                    "final_loss": final,
                    "final_over_first": fraction,
                    "bf16_final_loss": float(bf16_final),
                    "gap_vs_bf16": gap,
                    "check": "PASS" if fraction <= learned and gap <= tracks else "FAIL",
                }
            )
    return pd.DataFrame(rows)
