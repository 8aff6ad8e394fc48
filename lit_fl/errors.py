"""The error types that mean *bad input* (torch-free: the command line catches them before a run starts).

A :class:`ConfigError` or :class:`DatasetNotFoundError` is printed by the CLI as one line
(``lit-fl: error: <key>: <what is allowed>``) with exit status 2. Anything else raised during a run is a bug or a
runtime failure and keeps its full traceback.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config key, command-line argument or input file that lit-fl refuses; the message names the key."""


class DatasetNotFoundError(RuntimeError):
    """A dataset's files are not under its root and were not (or could not be) downloaded."""
