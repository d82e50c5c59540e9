"""The records of a run, one module per job, imported downward only:
`schema` (`Record`, `verdict`) → `make` (constructors, ratios, peaks, headlines) and `ids`
(shape text, record_id, stamping) → `tables` (dicts, DataFrames) → `io` (the results files).
Every public name is here: `from kernel_lib.records import X`."""

from kernel_lib.records.ids import (
    PLATFORM_ENV,
    RUN_ID_ENV,
    record_id,
    record_shape,
    run_context,
    shape_key,
    shape_text,
    stamp,
)
from kernel_lib.records.io import (
    LOCAL_RESULTS_DIR,
    NOTEBOOK_ENV,
    RESULTS_DIR_ENV,
    RESULTS_SUFFIX,
    load_records,
    resolve_results_dir,
    save_notebook_records,
    save_records,
    save_sections,
)
from kernel_lib.records.make import (
    as_headline,
    failed,
    info,
    measured,
    skipped,
    with_datasheet,
    with_peak,
    with_ratio,
    wrong,
)
from kernel_lib.records.schema import RATIO_COLUMNS, STATUSES, Record, verdict
from kernel_lib.records.tables import (
    SUMMARY_COLUMNS,
    summary_table,
    to_dicts,
    to_frame,
    to_frame_with_verdict,
)

__all__ = [
    "LOCAL_RESULTS_DIR", "NOTEBOOK_ENV", "PLATFORM_ENV", "RATIO_COLUMNS", "RESULTS_DIR_ENV",
    "RESULTS_SUFFIX", "RUN_ID_ENV", "STATUSES", "SUMMARY_COLUMNS", "Record", "as_headline",
    "failed", "info", "load_records", "measured", "record_id", "resolve_results_dir", "run_context",
    "save_notebook_records", "save_records", "save_sections", "record_shape", "shape_key", "shape_text", "skipped",
    "stamp", "summary_table", "to_dicts", "to_frame", "to_frame_with_verdict", "verdict",
    "with_datasheet", "with_peak", "with_ratio", "wrong",
]  # fmt: skip
