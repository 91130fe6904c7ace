"""Errors shared across privfgl's layers (kept import-free so any module can raise them)."""
from __future__ import annotations


class ConfigError(ValueError):
    """A bad run setting; the message names the setting and what is valid."""
