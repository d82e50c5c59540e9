"""A real cold compile of flex: a fresh process with an empty Inductor cache compiles and runs one
case and reports the time of that first call as JSON. (A first call in a process that has
compiled before, or with a warm TORCHINDUCTOR_CACHE_DIR, is mostly a cache load.)

Legend: B batch, H heads, S sequence length, D head dim.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from kernel_lib import ROOT
from kernel_lib.attention.flex import FlexVariant, first_call, flex_attention_compiled
from kernel_lib.attention.patterns import PatternConfig
from kernel_lib.attention.shapes import AttentionShape, make_qkv
from kernel_lib.checks import Unsupported
from kernel_lib.timing import Timing

TIMEOUT_S = 600  # a cold flex compile takes 20-40 s on a 2-core CPU


class ColdCompile(NamedTuple):
    timing: (
        Timing  # the first call in the fresh process: Dynamo + Inductor + C++/Triton build + run
    )
    new_graphs: int
    output: Tensor  # that call's output, for the caller's check


def cold_compile(
    config: PatternConfig, shape: AttentionShape, *, variant: FlexVariant, device
) -> ColdCompile:
    """Compile and run flex_attention_compiled on make_qkv(shape, seed=0) in a fresh Python
    process whose TORCHINDUCTOR_CACHE_DIR (and TRITON_CACHE_DIR) is a new empty folder.
    Raises Unsupported where flex cannot compile the case, RuntimeError when the process fails."""
    request = {
        "config": dataclasses.asdict(config),
        "shape": dataclasses.asdict(shape),
        "variant": variant._asdict(),
        "device": str(device),
    }
    with tempfile.TemporaryDirectory(prefix="cold_compile_") as tmp:
        env = {
            **os.environ,
            "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp, "inductor")),
            "TRITON_CACHE_DIR": str(Path(tmp, "triton")),
        }
        out_path = Path(tmp, "out.pt")
        proc = _run([sys.executable, "-m", __name__, json.dumps(request), str(out_path)], env)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
            raise RuntimeError(f"cold compile process exited {proc.returncode}: {tail}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        if "unsupported" in result:
            raise Unsupported(result["unsupported"])
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in result["timing"].items()}
        output = torch.load(out_path).to(device)
    return ColdCompile(Timing(**fields), result["new_graphs"], output)


def _run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    """The fresh process (from the repository root, so `kernel_lib` imports)."""
    return subprocess.run(
        argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S
    )


def _main(request: dict, out_path: str) -> dict:
    """In the fresh process: one compiled flex call, its output saved to `out_path`."""
    config = PatternConfig(
        **{**request["config"], "doc_lengths": tuple(request["config"]["doc_lengths"])}
    )
    variant = FlexVariant(**request["variant"])
    q, k, v = make_qkv(AttentionShape(**request["shape"]), device=request["device"], seed=0)
    try:
        out = flex_attention_compiled(q, k, v, config, **variant._asdict())
    except Unsupported as why:
        return {"unsupported": str(why)}
    torch.save(out.cpu(), out_path)
    call = first_call(config, q, **variant._asdict())
    return {"timing": dataclasses.asdict(call.timing), "new_graphs": call.new_graphs}


if __name__ == "__main__":
    print(json.dumps(_main(json.loads(sys.argv[1]), sys.argv[2])))
