"""What one run executes (`Plan`): a platform's notebooks and the values each is given."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernel_lib.allocator import DEFAULT as ALLOCATOR_DEFAULT
from kernel_lib.params.notebooks import NOTEBOOKS_DIR, notebook_parameters

# Notebook parameters for runs by hand (`papermill ... -p results_dir DIR`), never set by a platform
# file or the runner's -p: the runner writes every notebook's results into its report folder.
HAND_RUN_ONLY = ("results_dir",)
# Parameters every notebook declares alike and no topic's config holds (kernel_lib.plugins)
SHARED = ("plugins",)


@dataclass(frozen=True)
class Plan:
    """What one run executes: which notebooks, with which parameters, under which limits."""

    platform: str
    source: str  # the parameter file, for messages and the report
    notebooks: tuple[str, ...]
    values: dict = field(default_factory=dict)  # flat parameter values from the file and overrides
    cell_timeout_s: int | None = None
    description: str = ""
    notebooks_dir: Path = NOTEBOOKS_DIR
    allocator: str = ALLOCATOR_DEFAULT  # notebook kernels' host malloc (kernel_lib.allocator)
    # notebook -> its expected wall seconds on the platform's machine (report flags an overrun)
    budget_s: dict = field(default_factory=dict)

    def parameters_for(self, notebook: str) -> dict:
        """The values this notebook declares (papermill injects only these)."""
        declared = notebook_parameters(notebook, self.notebooks_dir)
        return {k: v for k, v in self.values.items() if k in declared and k not in HAND_RUN_ONLY}
