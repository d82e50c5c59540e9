"""`python -m kernel_lib compare A... -- B...`: did report(s) B get slower than report(s) A?

Every verdict lives here: two folders, two revisions (`ab`'s folders, `ab_layout`), a store's
history. `runs` reads a report's runs back; `verdict` has the rules (its docstring, shown by
`--help`) and the statistics of one record; `comparison` compares two sides record by record;
`noise` is the A/A noise floor; `render` writes text, JSON and HTML; `command` is the command
line; `regressions` the latest run against the earlier ones in the results store, and `history`
the `history` and `regressions` commands.
"""

from kernel_lib.compare.command import cli, parse_args
from kernel_lib.compare.comparison import compare_folders, compare_runs
from kernel_lib.compare.noise import (
    NOISE_FLOOR_FILE,
    NOISE_FLOOR_KEYS,
    kept_noise_floor,
    noise_floor,
    read_noise_floor,
)
from kernel_lib.compare.render import to_html, to_json, to_text
from kernel_lib.compare.runs import CompareError, load_side, runs_with_records
from kernel_lib.compare.verdict import (
    ALPHA,
    DEFAULT_FACTOR,
    VERDICT_WORDS,
    apart,
    bootstrap_interval,
    chosen_factor,
    permutation_p,
    samples_verdict,
    timing_verdict,
)

__all__ = [
    "ALPHA",
    "DEFAULT_FACTOR",
    "NOISE_FLOOR_FILE",
    "NOISE_FLOOR_KEYS",
    "VERDICT_WORDS",
    "CompareError",
    "apart",
    "bootstrap_interval",
    "chosen_factor",
    "cli",
    "compare_folders",
    "compare_runs",
    "kept_noise_floor",
    "load_side",
    "noise_floor",
    "parse_args",
    "permutation_p",
    "read_noise_floor",
    "runs_with_records",
    "samples_verdict",
    "timing_verdict",
    "to_html",
    "to_json",
    "to_text",
]
