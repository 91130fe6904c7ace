"""Errors raised by the data layer."""

from __future__ import annotations


class DataError(ValueError):
    """A bad data input; the message names the input and lists what is valid."""


class DatasetUnavailable(DataError):
    """A dataset's raw files are missing and could not be downloaded."""
