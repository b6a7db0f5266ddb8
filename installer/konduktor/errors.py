"""Errors a user can act on, and the exit codes of every command. The CLI prints errors without a traceback
and exits with their `exit_code`.

The exit codes are one table for every command, so that CI can tell an outcome from an outage: a command's
meaningful negative (changes pending, not installed, a node failed) is never the code of a cluster it could
not reach.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # success, or nothing to do
    NEGATIVE = 1  # the command's meaningful negative: changes pending, not installed, a node FAILed
    BAD_INPUT = 2  # usage, config or kubeconfig error; nothing was changed
    CHECK_FAILED = 3  # a check failed (preflight, or work in the way of a change); nothing was changed
    PARTIAL = 4  # some changes were made before a failure, or a wait timed out; re-running repairs
    UNREACHABLE = 5  # could not reach or authorise against the cluster (refused, timed out, 401, 403)
    FINISHED = 6  # `konduktor why`: the job has finished (succeeded or failed); nothing waits
    NEVER_FITS = 7  # `konduktor why`/`submit`: the job can never be admitted as written (no node or quota fits it)
    BUG = 101  # an unexpected error: a bug


class KonduktorError(Exception):
    """A failure explained to the user: what happened, optionally a hint and a log excerpt."""

    exit_code: int = ExitCode.NEGATIVE

    def __init__(self, message: str, *, hint: str | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail


class UsageError(KonduktorError):
    """Bad input: a config, a flag value, an unknown name, a kubeconfig that does not load. Nothing was changed."""

    exit_code = ExitCode.BAD_INPUT


class PreflightFailed(KonduktorError):
    """The cluster is not fit for the requested change. Nothing was changed."""

    exit_code = ExitCode.CHECK_FAILED


class ChangeRefused(KonduktorError):
    """A change was refused because something in the cluster is in its way (an object someone else owns, a team
    that still has work). Nothing was changed."""

    exit_code = ExitCode.CHECK_FAILED


class PartialApply(KonduktorError):
    """Some changes were made before a failure or timeout; re-running repairs the state."""

    exit_code = ExitCode.PARTIAL


class ClusterUnreachable(KonduktorError):
    """The API server did not answer, or refused who we are (401) or what the command needs (403)."""

    exit_code = ExitCode.UNREACHABLE


class NeverFits(KonduktorError):
    """The job can never be admitted as written: a pod bigger than every node, a GPU type no node has, more GPUs
    than the team may ever hold. Nothing was submitted."""

    exit_code = ExitCode.NEVER_FITS
