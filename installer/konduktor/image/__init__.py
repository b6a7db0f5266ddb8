"""The konduktor image that charts/konduktor-core runs: built from Debian's packages and the hash-locked wheels,
written as an OCI image archive (no container registry, no container runtime)."""
