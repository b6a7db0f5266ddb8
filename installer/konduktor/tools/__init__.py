"""The pinned tools (helm, kubectl, kwok, etcd, Kubernetes, Kueue, ...): use a fitting one on the host, else build
it from its Go module at the pinned version into the cache."""
