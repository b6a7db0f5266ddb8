"""Preflight: is a cluster, and are its GPU hosts, fit for a config? Nothing here changes anything.

- results: PASS/WARN/FAIL/SKIPPED per check, with evidence and a hint; the report as a table, JSON or YAML
- cluster: pure judges over what the API showed (version, GPU nodes, taints, RDMA, capacity, CRDs)
- node: checks of one GPU host through a testinfra host (over SSH, or on the machine itself)
- hosts: the testinfra hosts those checks run on, this machine or a GPU host over SSH (`ssh`)
- host_namespaces: that host from a privileged hostPID pod, every command run in the node's namespaces (nsenter)
- inventory: which GPU hosts to check, what each must have, and how SSH logs in (`preflight.nodes.ssh`)
- pods: the Job that checks a node from a pod on it (`preflight.nodes.pod`), and reading the report it prints

`konduktor.ops.preflight` reads the cluster through `konduktor.kube` and runs them; `konduktor.ops.preflight_pods`
runs the pods.
"""
