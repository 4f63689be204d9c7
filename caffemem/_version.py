"""The package version: one place, read by the CLI, the baseline files and packaging."""

__version__ = "0.1.0"
