"""GPU burn-in: running it, for the `burnin` command and the health controller's requalification alike.

The pure core:
- tiers: what each level (quick, standard, full) runs, in which image, for how long
- manifests: the per-node Job, the scripts ConfigMap, the node-pair Indexed Job and Service
- matmul, allreduce: our burn-in scripts, shipped to the Jobs (standard library and PyTorch only)
- parsers: tool output -> facts (DCGM, nccl-tests, nvidia-smi, gpu-burn, our scripts)
- thresholds: per GPU model peaks and goals; verdict: facts + goals -> PASS/WARN/FAIL/ERROR/SKIPPED
- isolation: which node pairs to test next and which node a failure implicates
- report: table, JSON and JUnit XML
- plan: which nodes to test, what a Job's and a pod's status say, the verdicts completed with it, the exit code

The edge, through `konduktor.kube`:
- jobs: waiting for the Jobs, their newest pods and their logs through the API
- runner: a run from start to verdicts: its objects, the wait, the judging, the node-pair rounds
"""
