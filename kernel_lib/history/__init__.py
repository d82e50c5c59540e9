"""Every run remembered: `store` (the SQLite results store, the runners' hook `remember`,
`rebuild`), `regressions` (the latest run against the earlier ones, with compare's rules), `cli`
(`python -m kernel_lib history` and `regressions`)."""
