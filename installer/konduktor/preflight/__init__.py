"""Preflight: is a cluster, and are its GPU hosts, fit for a config? Nothing here changes anything.

- results: PASS/WARN/FAIL/SKIPPED per check, with evidence and a hint; the report as a table, JSON or YAML
- cluster: pure judges over what the API showed (version, GPU nodes, taints, RDMA, capacity, CRDs)
- node: checks of one GPU host through a testinfra host (over SSH, or on the machine itself)
- inventory: which GPU hosts to check over SSH and how to log in (the config's `preflight.nodes.ssh`)

`konduktor.cli.preflight` reads the cluster through `konduktor.kube` and runs both.
"""
