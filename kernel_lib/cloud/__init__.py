"""Cloud fan-out on SkyPilot: `tasks` (one task per platform, plain YAML), `jobs` (managed jobs:
launch, status, cancel; the only module that imports `sky`), `collect` (reports from the bucket into
outputs/ and the gallery), `cli` (`python -m kernel_lib cloud ...`)."""
