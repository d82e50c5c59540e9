"""The environment a notebook kernel (or `bench`'s child process) starts with: the plan's host
allocator and this checkout's code (ROOT first on PYTHONPATH, its compile cache); and what run.json
records of it."""

from __future__ import annotations

import contextlib
import os

from kernel_lib import allocator
from kernel_lib.locks import lock_state
from kernel_lib.params import ROOT, ParameterError, Plan
from kernel_lib.platform import device_facts
from kernel_lib.records import NOTEBOOK_ENV

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"  # compiled kernels (flex_attention, torch.compile) persist


@contextlib.contextmanager
def _environment(variables: dict, cleared: tuple = ()):
    """os.environ, which the notebook kernels inherit, with `cleared` removed and `variables` set
    for the block."""
    saved = {k: os.environ.get(k) for k in (*cleared, *variables)}
    for key in cleared:
        os.environ.pop(key, None)
    os.environ.update(variables)
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def notebook_environment(name: str):
    """os.environ naming the notebook `name` to its kernel, for the block: its sections' records
    are saved as each ends (`records.save_sections`)."""
    return _environment({NOTEBOOK_ENV: name})


def code_environment(environ=os.environ) -> dict:
    """The variables that make a notebook kernel run this checkout's code: ROOT first on
    PYTHONPATH (ahead of the .pth that whichever checkout made the venv wrote into it) and ROOT's
    compile cache, unless `environ` names a cache."""
    others = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(ROOT)]
    return {
        "PYTHONPATH": os.pathsep.join([str(ROOT), *others]),
        CACHE_ENV: environ.get(CACHE_ENV) or str(ROOT / ".cache" / "inductor"),
    }


def kernel_environment(kernel_env: dict, variables: dict | None = None):
    """os.environ as each notebook kernel (or `bench`'s own process) starts with it, for the
    block: the plan's allocator (`kernel_env`, from kernel_allocator) instead of any set before,
    this checkout's code (code_environment), and `variables`."""
    return _environment(
        {**(variables or {}), **kernel_env, **code_environment()}, allocator.VARIABLES
    )


def kernel_allocator(plan: Plan) -> dict:
    """The variables that give the notebook kernels the plan's allocator (kernel_lib.allocator);
    ParameterError (exit 2, nothing run) when its library is not installed."""
    try:
        return allocator.environment(plan.allocator, base={})
    except allocator.Missing as err:
        raise ParameterError(f"{plan.source}: {err}") from None


def environment(plan: Plan) -> dict:
    """run.json's `environment`: the device facts, the notebook kernels' allocator and the lock
    their Python's environment was installed from, with each package that differs from it."""
    state = lock_state()
    return {
        **device_facts().as_dict(),
        "allocator": allocator.describe(plan.allocator),
        "lock": state.label,
        **({"lock_differs": list(state.differs)} if state.differs else {}),
    }
