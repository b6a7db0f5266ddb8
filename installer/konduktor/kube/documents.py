"""Reading Kubernetes manifests: multi-document YAML as plain dicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml as pyyaml
from ruamel.yaml import YAML
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.nodes import ScalarNode


def _plain_value(constructor: SafeConstructor, node: ScalarNode) -> Any:
    # YAML 1.1 reads a bare `=` as the "value" type; CRDs (e.g. the Prometheus operator's) use it as text.
    return constructor.construct_scalar(node)


try:
    from yaml import CSafeLoader as _Libyaml
except ImportError:  # a PyYAML built without libyaml: the same reading, slower
    from yaml import SafeLoader as _Libyaml  # type: ignore[assignment]


class _GeneratedLoader(_Libyaml):
    pass


def _generated_plain_value(loader: _GeneratedLoader, node: pyyaml.ScalarNode) -> Any:
    return loader.construct_scalar(node)  # a bare `=` is text, as in `load_documents`


_GeneratedLoader.add_constructor("tag:yaml.org,2002:value", _generated_plain_value)


def load_documents(source: str | Path) -> list[dict[str, Any]]:
    text = source.read_text() if isinstance(source, Path) else source
    yaml = YAML(typ="safe")
    yaml.constructor.add_constructor("tag:yaml.org,2002:value", _plain_value)
    return [doc for doc in yaml.load_all(text) if doc]


def load_generated(source: str | Path) -> list[dict[str, Any]]:
    """Manifests a program wrote (helm's and kustomize's output, the generated files of the pinned Kueue module), read
    with libyaml in a tenth of `load_documents`' CPU: Kueue's CRDs are 1.6 MB of YAML, 2-3 CPU s for the pure-Python
    parser. A person's YAML still goes through `load_documents` (YAML 1.2; libyaml reads YAML 1.1 and refuses `[a:b]`
    in a flow sequence, for one). Tests check that both read the pinned Kueue module's files and the charts' renders
    alike."""
    text = source.read_text() if isinstance(source, Path) else source
    return [doc for doc in pyyaml.load_all(text, Loader=_GeneratedLoader) if doc]
