"""DCGM diagnostics: each test's status, its errors' severity, and what dcgmi's exit code says."""

from __future__ import annotations

from collections.abc import Sequence

from konduktor.burnin.parsers.dcgm import DcgmDiag, DcgmWarning
from konduktor.burnin.results import CheckResult, Evidence, Verdict, worst
from konduktor.burnin.tiers import Step
from konduktor.burnin.verdict.common import DCGM_DIAG, check_result

# dcgmErrorSeverity_t values that mean "usable, watch it" or "a setting": a failed test whose every
# error has one of these is a WARN (DCGM dcgm_errors.h: 1 monitor, 5 config).
_DCGM_SOFT_SEVERITIES = frozenset({0, 1, 5})
# dcgmi exit codes: DCGM_ST_NVVS_ERROR (-30) and DCGM_ST_NVVS_ISOLATE_ERROR (-51) (docs/design/burnin.md#dcgmi-diag).
_DCGM_EXIT_MEANING = {226: "a test failed", 205: "a failure that needs the GPU isolated"}


def judge_dcgm(diag: DcgmDiag, exit_code: int | None, ignored_tests: frozenset[str] = frozenset()) -> CheckResult:
    step = Step.DCGM.value
    if diag.runtime_error:
        return check_result(DCGM_DIAG, step, Verdict.ERROR, "did not run", [f"DCGM: {diag.runtime_error}"])
    if not diag.tests:
        return check_result(DCGM_DIAG, step, Verdict.ERROR, "no tests", ["dcgmi reported no test results"])
    verdicts: list[Verdict] = []
    reasons: list[str] = []
    evidence: list[Evidence] = []
    failed = unanswered_tests = 0
    for test in diag.tests:
        statuses = {test.status, *(r.status for r in test.results)}
        if not statuses & {"Fail", "Warn"}:
            unanswered = [(r.entity, r.status, r.warnings) for r in test.results if r.status not in _DCGM_OUTCOMES]
            if test.status not in _DCGM_OUTCOMES and not unanswered:
                unanswered = [("", test.status, test.warnings)]
            if unanswered and test.name in ignored_tests:
                reasons.append(f"{test.name} gave no result, ignored for this GPU model")
            elif unanswered:
                # Error rows, "Not Run", statuses this parser does not know: the test gave no answer.
                where = "; ".join(
                    f"{entity or 'all'} {status or 'no status'}" + (f" ({said[0].message})" if said else "")
                    for entity, status, said in unanswered
                )
                unanswered_tests += 1
                verdicts.append(Verdict.ERROR)
                reasons.append(f"{test.name} ({test.category}) has no result: {where}")
                evidence += [Evidence(f"dcgm.{test.name}", s, gpu=_entity_index(e)) for e, s, _ in unanswered]
                continue
            verdicts.append(Verdict.PASS if "Pass" in statuses else Verdict.SKIPPED)
            continue
        failing = [r for r in test.results if r.status in {"Fail", "Warn"}]
        # The test summary repeats every entity's errors; keep each message once.
        warnings = list({w.message: w for w in [*(w for r in failing for w in r.warnings), *test.warnings]}.values())
        where = ", ".join(r.entity for r in failing) or "all"
        messages = "; ".join(w.message for w in warnings[:3]) or "no message"
        if test.name in ignored_tests:
            reasons.append(f"{test.name} {test.status} on {where} ignored for this GPU model: {messages}")
            continue
        failed += 1
        verdict = _dcgm_test_verdict(test.status, warnings)
        verdicts.append(verdict)
        reasons.append(f"{test.name} ({test.category}) {test.status} on {where}: {messages}")
        evidence += [Evidence(f"dcgm.{test.name}", r.status, gpu=_entity_index(r.entity)) for r in failing] or [
            Evidence(f"dcgm.{test.name}", test.status)
        ]
    verdict = worst(verdicts)
    if exit_code not in (None, 0) and verdict in {Verdict.PASS, Verdict.SKIPPED}:
        meaning = _DCGM_EXIT_MEANING.get(exit_code, "an error")
        return check_result(
            DCGM_DIAG,
            step,
            Verdict.ERROR,
            f"exit {exit_code}",
            [f"dcgmi exited {exit_code} ({meaning}) but its report shows no failing test", *reasons],
            evidence,
        )
    if exit_code in _DCGM_EXIT_MEANING and verdict is not Verdict.PASS:
        reasons.append(f"dcgmi exited {exit_code}: {_DCGM_EXIT_MEANING[exit_code]}")
    if failed:
        summary = f"{failed}/{len(diag.tests)} tests failed"
    elif unanswered_tests:
        summary = f"{unanswered_tests}/{len(diag.tests)} tests without a result"
    else:
        summary = f"{len(diag.tests)} tests passed"
    return check_result(DCGM_DIAG, step, verdict, summary, reasons, evidence)


# The statuses that are an answer; Fail and Warn are judged above, Pass and Skip may pass or skip.
_DCGM_OUTCOMES = frozenset({"Pass", "Skip", "Fail", "Warn"})


def _dcgm_test_verdict(status: str, warnings: Sequence[DcgmWarning]) -> Verdict:
    if status == "Warn":
        return Verdict.WARN
    # dcgmi prints per-GPU Warn as Fail; the error severity tells a monitor/config finding from a
    # GPU that should be isolated or reset.
    severities = [w.severity for w in warnings]
    if severities and all(s is not None and s in _DCGM_SOFT_SEVERITIES for s in severities):
        return Verdict.WARN
    return Verdict.FAIL


def _entity_index(entity: str) -> int | None:
    digits = "".join(ch for ch in entity if ch.isdigit())
    return int(digits) if digits else None
