"""Konduktor: multi-team GPU sharing, observability and self-healing on Kubernetes."""

__version__ = "0.1.0"
