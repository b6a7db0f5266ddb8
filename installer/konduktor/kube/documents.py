"""Reading Kubernetes manifests: multi-document YAML as plain dicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.nodes import ScalarNode


def _plain_value(constructor: SafeConstructor, node: ScalarNode) -> Any:
    # YAML 1.1 reads a bare `=` as the "value" type; CRDs (e.g. the Prometheus operator's) use it as text.
    return constructor.construct_scalar(node)


def load_documents(source: str | Path) -> list[dict[str, Any]]:
    text = source.read_text() if isinstance(source, Path) else source
    yaml = YAML(typ="safe")
    yaml.constructor.add_constructor("tag:yaml.org,2002:value", _plain_value)
    return [doc for doc in yaml.load_all(text) if doc]
