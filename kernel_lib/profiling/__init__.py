"""Where the time goes: named phases inside the kernels (`phases`), a profiled pass over a
section's headline records after they were timed (`capture`), and the `profile` command
(`command`)."""
