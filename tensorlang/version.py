"""The package version (one place: the CLI, tuning records and ``tensorlang.__version__``)."""

__version__ = "0.1.0"
