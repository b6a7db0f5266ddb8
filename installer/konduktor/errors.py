"""Errors a user can act on. The CLI prints them without a traceback and exits with `exit_code`."""

from __future__ import annotations


class KonduktorError(Exception):
    """A failure explained to the user: what happened, optionally a hint and a log excerpt."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail


class UsageError(KonduktorError):
    """Bad input: a config, a flag value, an unknown name. Nothing was changed."""

    exit_code = 2


class PreflightFailed(KonduktorError):
    """The cluster is not fit for the requested change. Nothing was changed."""

    exit_code = 3


class PartialApply(KonduktorError):
    """Some changes were made before a failure or timeout; re-running repairs the state."""

    exit_code = 4
