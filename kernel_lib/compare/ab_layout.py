"""What `ab` leaves for compare and history to read: its folders under CACHE
(`.cache/ab/<key>/`, with the noise floor an A/A kept, `noise-floor-<platform>.json`), each with
its state (STATE) and a report folder per side (SIDES)."""

from kernel_lib import ROOT

CACHE = ROOT / ".cache" / "ab"  # git-ignored
STATE = "ab.json"
SIDES = ("A", "B")
