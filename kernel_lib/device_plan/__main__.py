"""`python -m kernel_lib.device_plan`: works before papermill is installed (kernel_lib's own
`__main__` imports it)."""

import sys

from kernel_lib.device_plan.cli import main

sys.exit(main())
