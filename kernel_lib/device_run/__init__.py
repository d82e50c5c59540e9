"""A GPU report within one short command on a host whose image holds PyTorch and no package index
(`python -m kernel_lib.device_run`, or `python -m kernel_lib device-run` once papermill is
there): `wheels` (the carried wheels: offline install, kernel, environment, closure check),
`preflight` (one line per thing the notebooks rely on), `budget` (children held to time limits,
each notebook's share), `checks` (the input, before anything runs), `cli` (the steps,
the archive after every notebook)."""

from kernel_lib.device_run.cli import add_parser, main

__all__ = ["add_parser", "main"]
