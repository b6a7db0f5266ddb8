"""Burn-in verdicts: parsed facts and thresholds in, PASS/WARN/FAIL/ERROR/SKIPPED out.

Pure functions. Each check states its reasons and evidence (measured value, goal, fraction of
peak); a node's verdict is the worst of its checks. Missing or truncated output is ERROR, never
PASS; an unknown GPU model makes performance checks SKIPPED, while correctness checks (ECC,
digests, NCCL `#wrong`) need no model and are still judged.
"""

from konduktor.burnin.verdict.pairs import apply_isolation, judge_pair, pair_outcomes
from konduktor.burnin.verdict.run import NodeEvidence, judge_node, judge_run

__all__ = ["NodeEvidence", "apply_isolation", "judge_node", "judge_pair", "judge_run", "pair_outcomes"]
