"""Team quotas: a checked config rendered to Kueue objects, namespaces and RBAC (pure functions)."""
