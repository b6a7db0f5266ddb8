"""GPU burn-in: the pure core. Nothing here talks to Kubernetes; `konduktor.kube` runs the Jobs.

- tiers: what each level (quick, standard, full) runs, in which image, for how long
- manifests: the per-node Job, the scripts ConfigMap, the node-pair Indexed Job and Service
- matmul, allreduce: our burn-in scripts, shipped to the Jobs (standard library and PyTorch only)
- parsers: tool output -> facts (DCGM, nccl-tests, nvidia-smi, gpu-burn, our scripts)
- thresholds: per GPU model peaks and goals; verdict: facts + goals -> PASS/WARN/FAIL/ERROR/SKIPPED
- isolation: which node pairs to test next and which node a failure implicates
- report: table, JSON and JUnit XML
"""
