"""The C kernels' argument property tests: one persistent worker subprocess per test module runs
its cases in turn (torch imported once, not once a case) and says which case it starts before
running it, so a case that kills it by a signal fails the test naming the case, and the next case
starts a new worker. A case is a dict of plain values with "damage": [(argument, kind), ...];
the test module's `prepare(case)` builds the operands and returns (call, check). Each case must
come back correct (check gives None), or, if damaged, raise one clear one-line exception that
names a damaged argument; never die, never hang. Beside hypothesis's cases, `alone` gives each
damage once by itself."""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch

from kernel_lib.checks import relative_error

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120  # one case, the worker's start (a torch import) included
CLEAR = ("ValueError", "TypeError", "MemoryError")  # what a wrapper raises for a bad argument
KINDS = ("meta", "strided", "expanded", "list", "flat")  # damaged()'s for any tensor, or a dtype


def _send(stream, message) -> None:
    data = pickle.dumps(message)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _read(fd: int, size: int) -> bytes | None:
    """`size` bytes from fd, None at end of file; TimeoutError after TIMEOUT_S without any."""
    data = b""
    while len(data) < size:
        if not select.select([fd], [], [], TIMEOUT_S)[0]:
            raise TimeoutError(f"no answer in {TIMEOUT_S} s")
        if not (chunk := os.read(fd, size - len(data))):
            return None
        data += chunk
    return data


def _receive(fd: int):
    header = _read(fd, 8)
    body = header and _read(fd, struct.unpack("<Q", header)[0])
    return None if body is None else pickle.loads(body)


def outcome(prepare, case) -> tuple:
    """("returned", check's verdict), ("raised", exception type, message) or ("broken", the
    traceback of a case that could not be built)."""
    try:
        call, check = prepare(case)
    except Exception:
        return ("broken", traceback.format_exc())
    try:
        out = call()
    except Exception as err:
        return ("raised", type(err).__name__, str(err))
    try:
        return ("returned", check(out))
    except Exception as err:  # the reference refused what the kernel accepted
        return ("returned", f"its check raised {type(err).__name__}: {err}")


def serve(module: str) -> None:
    """The worker: cases from stdin, ("running", case) then ("done", outcome) to stdout (a
    private copy of it; prints go to stderr)."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    prepare = importlib.import_module(module).prepare
    while (case := _receive(0)) is not None:
        _send(replies, ("running", case))
        _send(replies, ("done", outcome(prepare, case)))


class Worker:
    """The worker of the test module `module` (a dotted name importable from the repository)."""

    def __init__(self, module: str):
        self.module, self.proc = module, None

    def _start(self) -> None:
        command = [sys.executable, "-c", "import sys, tests.c_worker as w; w.serve(sys.argv[1])"]
        self.proc = subprocess.Popen(
            [*command, self.module], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(TIMEOUT_S)
            self.proc = None

    def _died(self, case, running) -> str:
        """Why the worker stopped answering (killed if it hangs); the next case starts anew."""
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        self.proc = None
        how = f"by {signal.Signals(-code).name}" if code < 0 else f"with exit status {code}"
        where = f"running case {running!r}" if running else f"before it started case {case!r}"
        return f"the worker died {how} {where}"

    def run(self, case) -> tuple:
        """The case's outcome, or ("died", why)."""
        if self.proc is None:
            self._start()
        running = None
        try:
            _send(self.proc.stdin, case)
            running = _receive(self.proc.stdout.fileno())
            reply = running and _receive(self.proc.stdout.fileno())
        except (BrokenPipeError, TimeoutError):
            reply = None
        if reply is None:
            return ("died", self._died(case, running and running[1]))
        return reply[1]

    def check(self, case) -> None:
        """Assert the property of the module docstring for `case`."""
        result, damaged = self.run(case), [name for name, _ in case["damage"]]
        if result[0] == "raised":
            kind, message = result[1:]
            assert damaged, f"a valid case raised {kind}: {message}\n{case}"
            assert kind in CLEAR, f"{kind} is not one of {CLEAR}: {message}\n{case}"
            assert message and "\n" not in message, f"not one line: {message!r}\n{case}"
            named = any(name in message for name in damaged)
            assert named, f"names none of {damaged}: {message}\n{case}"
        else:
            assert result[0] == "returned" and result[1] is None, f"{result}\n{case}"


def compare(out, ref: torch.Tensor, dtype: torch.dtype, tolerance: float) -> str | None:
    """None where out is a CPU tensor of ref's shape and `dtype`, NaN exactly where ref has
    NaN and elsewhere within `tolerance` of it (relative error); else what differs."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != dtype:
        got = f"{getattr(out, 'dtype', type(out).__name__)} {tuple(getattr(out, 'shape', ()))}"
        return f"{got} for a {dtype} {tuple(ref.shape)} reference"
    if out.device.type != "cpu" or not torch.equal(out.isnan(), ref.isnan()):
        return f"NaN where the reference has none, or none where it has ({out.device})"
    finite = ~ref.isnan()
    error = relative_error(out[finite].double(), ref[finite])
    return None if error <= tolerance else f"relative error {error:.3g} > {tolerance:.3g}"


def damaged(t: torch.Tensor, kind: str):
    """t broken one way, `kind`: on meta, strided or expanded (the same shape, not contiguous
    where its sizes allow), a list, flattened, or converted to the dtype of that name."""
    if kind == "meta":
        return t.to("meta")
    if kind in ("strided", "expanded") and not (t.dim() and len(t)):
        return t  # no such view of a scalar or of no rows
    if kind == "strided":  # every other element of a buffer twice as wide
        wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
        wide[..., ::2] = t
        return wide[..., ::2]
    if kind == "expanded":
        return t[:1].expand(t.shape)
    if kind == "list":
        return t.float().tolist()
    if kind == "flat":
        return t.reshape(-1)
    return t.to(getattr(torch, kind))


def alone(base: dict, damages: dict, prefix: str = "") -> list:
    """pytest params: `base` with each damage of `damages` {argument: kinds} alone, so that each
    check meets its case whatever hypothesis draws; named prefix + argument=kind."""
    return [
        pytest.param(dict(base, damage=[(name, kind)]), id=f"{prefix}{name}={kind}")
        for name, kinds in damages.items()
        for kind in kinds
    ]


def module_worker(module: str):
    """A module-scoped fixture: the Worker of `module`, closed after its tests."""

    @pytest.fixture(scope="module")
    def worker():
        running = Worker(module)
        yield running
        running.close()

    return worker
