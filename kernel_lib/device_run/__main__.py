"""`python -m kernel_lib.device_run`: works before papermill is installed (kernel_lib's own
`__main__` imports it)."""

import sys

from kernel_lib.device_run.cli import main

sys.exit(main())
