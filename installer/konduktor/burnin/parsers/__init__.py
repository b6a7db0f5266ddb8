"""Parsers for what the burn-in tools print. They turn text into facts and judge nothing.

Exit codes are recorded but never decide alone: gpu-burn exits 0 on FAULTY GPUs, `dcgmi diag`
exits 226/205 with a readable report, nccl-tests exits non-zero only for wrong data or an opt-in
bandwidth floor (docs/design/burnin.md#tool-output-and-exit-codes). Unparseable or truncated output raises
`OutputError`, which the verdict turns into ERROR, never into PASS.
"""
