"""Platform parameter files: load safely, layer over notebook defaults, validate before anything runs.

A file `parameters/<platform>.yaml` is flat, so plain `papermill NB out -f parameters/<platform>.yaml`
works: a reserved `workbook:` mapping holds runner settings (which notebooks, per-cell timeout), and
every other key is a parameter of at least one of those notebooks, with a compatible type (except
`results_dir`, which only runs by hand take: HAND_RUN_ONLY).

One module per job, imported downward only: `errors` (`ParameterError`); `safe_yaml` (the YAML
reader and its refusals); `notebooks` (the parameters cells, each notebook's config class) →
`docs` (the parameter tables); `notebooks` → `plan` (`Plan`) → `meaning` (configs built, sizes
against the device's memory) → `platform_files` (`load_plan`: a platform file checked).
Every public name is here: `from kernel_lib.params import X`.
"""

from kernel_lib import ROOT
from kernel_lib.params.docs import documented_notebooks, parameter_rows, parameters_doc
from kernel_lib.params.errors import ParameterError
from kernel_lib.params.notebooks import (
    CONFIGS,
    NOTEBOOKS_DIR,
    config_class,
    list_notebooks,
    notebook_defaults,
    notebook_parameters,
)
from kernel_lib.params.plan import HAND_RUN_ONLY, SHARED, Plan
from kernel_lib.params.platform_files import (
    OTHER_DEVICE,
    PARAMETERS_DIR,
    RESERVED,
    WORKBOOK_KEYS,
    _type_ok,  # the runner's type rule, which device_run's checks share
    check_platform,
    list_platforms,
    load_plan,
)
from kernel_lib.params.safe_yaml import parse_override

__all__ = [
    "CONFIGS", "HAND_RUN_ONLY", "NOTEBOOKS_DIR", "OTHER_DEVICE", "PARAMETERS_DIR", "RESERVED",
    "ROOT", "SHARED", "WORKBOOK_KEYS", "ParameterError", "Plan", "_type_ok", "check_platform",
    "config_class", "documented_notebooks", "list_notebooks", "list_platforms", "load_plan",
    "notebook_defaults", "notebook_parameters", "parameter_rows", "parameters_doc",
    "parse_override",
]  # fmt: skip
