"""A report folder's files, under every reader and writer of them: `legacy` (old names read as
today's) → `files` (run.json and results files read back, checked) → `folders` (the layout:
RUN_FILE, `run-<k>/`, `run_folders`, `repeat_of`) → `writes` (what a command may write, written
whole) → `outdir` (a run's report folder: staged, swapped in, never lost) and `store` (every run
in one SQLite file: `remember`) → `rebuild` (the store read again from the report folders)."""
