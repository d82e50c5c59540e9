"""The one error of bad input to a run: a platform, file, key or value."""


class ParameterError(ValueError):
    """Bad platform, file, key or value: the CLI prints the one-line message and exits 2."""
