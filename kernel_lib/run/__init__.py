"""Running a platform's notebooks: each executed by papermill in a fresh kernel (`execute`) that
runs this checkout's code under the plan's allocator (`environment`), timed on a machine whose load
is sampled around it (`machine`), written out with its findings first and as HTML (`render`), and
the whole plan staged into its report folder (`runner`, the entry point: `run_plan`, `run_repeated`);
a report's notebooks re-executed under nbval (`nbval`, `python -m kernel_lib check`).
"""
