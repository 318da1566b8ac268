"""The package version, apart so that cards and the CLI can read it without importing the whole package."""

__version__ = "0.1.0"
