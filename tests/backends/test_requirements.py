"""requirements-tpu.txt keeps the notebook stack of requirements.txt, with its own torch pair."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWN_TORCH = {"torch", "triton", "torch-xla"}  # torch_xla pins its own torch (and torch its triton)
NOT_NEEDED = {
    "jupyterlab",
    "ruff",
    "pytest-xdist",
    "uv",
}  # headless notebooks, no lint, tests one at a time, the locks made from .venv


def _pins(name: str) -> dict:
    lines = (ROOT / name).read_text().splitlines()
    pins = [
        re.split(r"\s+#", line)[0].strip()
        for line in lines
        if line.strip() and not line.startswith("#")
    ]
    return {re.split(r"[=<>\[]", pin)[0].lower(): pin for pin in pins}


def test_xla_requirements_pin_torch_and_torch_xla_to_the_same_minor_release():
    pins = _pins("requirements-tpu.txt")
    torch_minor = re.search(r"==(\d+\.\d+)", pins["torch"]).group(1)
    assert pins["torch-xla"].startswith(f"torch-xla=={torch_minor}.")


def test_xla_requirements_carry_the_notebook_stack_of_requirements_txt():
    core, xla = _pins("requirements.txt"), _pins("requirements-tpu.txt")
    wanted = {name: pin for name, pin in core.items() if name not in OWN_TORCH | NOT_NEEDED}
    assert {name: xla.get(name) for name in wanted} == wanted
