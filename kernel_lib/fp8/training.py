"""A small causal transformer trained on a seeded bigram language, with bf16 or FP8 linears.

Letters: B batch, S sequence, D model width, F ffn width, V vocabulary, H heads.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from kernel_lib.fp8.convert import ConversionReport, convert_to_fp8
from kernel_lib.fp8.linear import Fp8LinearConfig


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 60
    batch: int = 16  # B
    seq: int = 16  # S
    dim: int = 32  # D, a multiple of 16 so every block linear converts
    heads: int = 2  # H
    ffn: int = 64  # F
    layers: int = 1
    vocab: int = 40  # V: not a multiple of 16, so the output head stays high precision (and says so)
    lr: float = 3e-3
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch", "seq", "dim", "heads", "ffn", "layers", "vocab"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.dim % self.heads:
            raise ValueError(f"dim={self.dim} must be divisible by heads={self.heads}")


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, S, D)
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, s, 3, self.heads, d // self.heads).unbind(2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyTransformer(nn.Module):
    def __init__(self, cfg: TrainConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.pos = nn.Parameter(torch.zeros(cfg.seq, cfg.dim))
        self.blocks = nn.ModuleList(Block(cfg.dim, cfg.heads, cfg.ffn) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (B, S) -> logits (B, S, V)
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def bigram_batches(cfg: TrainConfig, *, device: str = "cpu") -> torch.Tensor:
    """(steps, B, S + 1) token sequences from a fixed random bigram table with peaked rows, so the
    achievable loss is well below log(V)."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    probs = torch.softmax(3.0 * torch.randn(cfg.vocab, cfg.vocab, generator=gen), dim=-1)
    tokens = torch.empty(cfg.steps * cfg.batch, cfg.seq + 1, dtype=torch.long)
    tokens[:, 0] = torch.randint(cfg.vocab, (tokens.shape[0],), generator=gen)
    for t in range(cfg.seq):
        tokens[:, t + 1] = torch.multinomial(probs[tokens[:, t]], 1, generator=gen).squeeze(1)
    return tokens.reshape(cfg.steps, cfg.batch, cfg.seq + 1).to(device)


def make_model(cfg: TrainConfig, *, fp8: Fp8LinearConfig | None = None,
               device: str = "cpu") -> tuple[TinyTransformer, ConversionReport | None]:
    """The seeded model (same initial weights for every run), its linears converted when `fp8`."""
    torch.manual_seed(cfg.seed)
    model = TinyTransformer(cfg).to(device)
    report = convert_to_fp8(model, config=fp8) if fp8 is not None else None
    return model, report


def train(model: nn.Module, cfg: TrainConfig, *, device: str = "cpu", progress: bool = False,
          desc: str = "train") -> list[float]:
    """AdamW on the bigram batches under bf16 autocast (fp32 master weights); the loss per step."""
    data = bigram_batches(cfg, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    device_type = torch.device(device).type
    losses = []
    for batch in tqdm(data, disable=not progress, desc=desc, mininterval=5):
        with torch.autocast(device_type, dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def training_runs(cfg: TrainConfig, *, recipes: list[str], fmt: str = "e4m3fn", grad_dtype: str = "e5m2",
                  device: str = "cpu", progress: bool = False) -> pd.DataFrame:
    """Loss per step for the bf16 run and one FP8 run per scaling recipe (forward operands in
    `fmt`, gradients in `grad_dtype`), all from the same initial weights and batches.
    Columns: step, run, loss."""
    runs = {"bf16": None} | {f"fp8_{name}": Fp8LinearConfig.from_recipe_name(name, fmt=fmt, grad_dtype=grad_dtype)
                             for name in recipes}
    rows = []
    for run, fp8 in runs.items():
        model, _ = make_model(cfg, fp8=fp8, device=device)
        losses = train(model, cfg, device=device, progress=progress, desc=run)
        rows += [{"step": i, "run": run, "loss": loss} for i, loss in enumerate(losses)]
    return pd.DataFrame(rows)
