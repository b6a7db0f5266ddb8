"""What a fleet's manager needs beyond its rendered objects, for an admin who applies a fleet by hand (`render
--output-dir` writes it into `<manager>/by-hand/`, docs/multicluster.md#applying-by-hand):

- `kueue-configuration.yaml`: the sections of Kueue's Configuration the manager runs with, from the same function
  `up` merges into Kueue's chart values (the MultiKueue dispatcher, the lost-worker timeout, the config's own Kueue
  settings);
- per worker, a template of each Secret `up` writes on the manager from the worker's live tokens: the kubeconfig the
  manager's Kueue reads (`multikueue-<worker>` in Kueue's namespace) and the fleet-events relay's
  (`konduktor-fleet-events-<worker>` in the platform's), each with placeholders for what only the worker knows.

Never a credential: the placeholders stay until the admin fills them in. Pure but for `write_by_hand`.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from konduktor.config.model import Config, WorkerCluster
from konduktor.quotas.manifests import serialize_one
from konduktor.quotas.multikueue import (
    EVENTS_TOKEN_SECRET,
    TOKEN_SECRET,
    fleet_events_kubeconfig_secret,
    kubeconfig_secret,
    manager_kueue_settings,
    worker_kubeconfig,
)
from konduktor.quotas.render import CONFIG_LABEL
from konduktor.vocabulary import (
    FLEET_EVENTS_SERVICE_ACCOUNT,
    KUBECONFIG_KEY,
    KUEUE_NAMESPACE,
    MULTIKUEUE_SERVICE_ACCOUNT,
)

BY_HAND_DIR = "by-hand"
KUEUE_CONFIGURATION_FILE = "kueue-configuration.yaml"
KUEUE_CONFIGURATION_API = "config.kueue.x-k8s.io/v1beta2"
# The placeholders of a Secret template, as envsubst fills them: `envsubst '$SERVER $CA_DATA $TOKEN'`.
SERVER, CA_DATA, TOKEN = "${SERVER}", "${CA_DATA}", "${TOKEN}"
PLACEHOLDERS = (SERVER, CA_DATA, TOKEN)
_TEMPLATE_FILE = re.compile(r"^secret-[a-z0-9.-]+\.yaml$")


def kueue_configuration(config: Config) -> dict[str, Any]:
    """Kueue's Configuration sections the manager needs (what `up` merges over Kueue's chart Configuration, section
    by section), as a Configuration document."""
    return {"apiVersion": KUEUE_CONFIGURATION_API, "kind": "Configuration", **manager_kueue_settings(config)}


def kueue_configuration_text(config: Config) -> str:
    manager = config.cluster.name
    header = f"""\
# Kueue's Configuration on the manager {manager}: the sections `konduktor-install up` merges over the Configuration
# Kueue runs with, section by section (a section you have, such as metrics, keeps its other keys). By hand, merge
# them into your Kueue's Configuration (Kueue's chart: managerConfig.controllerManagerConfigYaml; Konduktor's
# umbrella chart: kueue.managerConfig.controllerManagerConfigYaml; or the ConfigMap kueue-manager-config in
# {KUEUE_NAMESPACE}), then restart Kueue:
#   kubectl -n {KUEUE_NAMESPACE} rollout restart deployment kueue-controller-manager
"""
    return header + serialize_one(kueue_configuration(config), "yaml")


@dataclass(frozen=True)
class SecretTemplate:
    """One Secret `up` writes on the manager for a worker, as a template: its file name, the token Secret on the
    worker its values come from, and the text."""

    file: str
    token_secret: str
    text: str


def secret_templates(config: Config, worker: WorkerCluster) -> list[SecretTemplate]:
    """The two Secrets on the manager for `worker`, with `${SERVER}` (unless the config gives the worker's
    `server:`), `${CA_DATA}` and `${TOKEN}` to fill in: Kueue's kubeconfig, then the fleet-events relay's. Made by
    the functions `up` writes them with, the kubeconfig as text (stringData) instead of base64."""
    server = worker.server or SERVER
    templates = []
    for make, account, token_secret, reader in (
        (
            kubeconfig_secret,
            MULTIKUEUE_SERVICE_ACCOUNT,
            TOKEN_SECRET,
            f"the manager's Kueue reaches {worker.name} with",
        ),
        (
            fleet_events_kubeconfig_secret,
            FLEET_EVENTS_SERVICE_ACCOUNT,
            EVENTS_TOKEN_SECRET,
            f"the fleet-events relay reads {worker.name}'s Events with",
        ),
    ):
        kubeconfig = worker_kubeconfig(server, CA_DATA, TOKEN, worker.name, account)
        secret = make(config, worker.name, kubeconfig)
        del secret["data"]
        secret["stringData"] = {KUBECONFIG_KEY: _literal(kubeconfig)}
        meta = secret["metadata"]
        file = f"secret-{meta['name']}.yaml"
        header = _secret_header(config, worker, file, meta["namespace"], meta["name"], token_secret, reader)
        templates.append(SecretTemplate(file, token_secret, header + serialize_one(secret, "yaml")))
    return templates


def _literal(text: str) -> Any:
    # Imported here: `validate` reaches this module through the CLI but never writes YAML.
    from ruamel.yaml.scalarstring import LiteralScalarString

    return LiteralScalarString(text)


def _secret_header(
    config: Config, worker: WorkerCluster, file: str, namespace: str, name: str, token_secret: str, reader: str
) -> str:
    on_worker = _kubectl(worker.kubeconfig, worker.context or worker.name)
    manager = config.clusters.manager if config.clusters is not None else None
    on_manager = _kubectl(
        manager.kubeconfig if manager else None, (manager.context if manager else None) or config.cluster.name
    )
    jsonpath = f"{on_worker} -n {KUEUE_NAMESPACE} get secret {token_secret} -o jsonpath"
    prose = _comment(
        f"The Secret {namespace}/{name} on the manager {config.cluster.name}, as a template: the kubeconfig {reader} "
        f"(`konduktor-install up` writes it from the live token of {token_secret} on {worker.name}, which the "
        f"worker's token controller fills in once `kubectl apply -f <rendered>/{worker.name}/` made it). Fill in the "
        "placeholders, then apply it on the manager:"
    )
    server = (
        f"#   (SERVER is the config's clusters.workers[].server: {worker.server})\n"
        if worker.server
        else f"#   export SERVER=https://HOST:PORT   # {worker.name}'s API server as the manager reaches it\n"
    )
    notes = _comment(
        f"CA_DATA stays base64 (certificate-authority-data is base64, as the token Secret holds the CA); TOKEN is "
        f"plain text (decoded from the Secret's base64). stringData takes the kubeconfig as text: the API server "
        f"stores it base64-encoded under data.{KUBECONFIG_KEY}. `--server-side` keeps the token out of kubectl's "
        "last-applied annotation."
    )
    return f"""\
{prose}{server}#   export CA_DATA=$({jsonpath}='{{.data.ca\\.crt}}')
#   export TOKEN=$({jsonpath}='{{.data.token}}' | base64 -d)
#   envsubst '$SERVER $CA_DATA $TOKEN' < {file} | {on_manager} apply --server-side -f -
{notes}"""


def _comment(text: str) -> str:
    return "".join(f"# {line}\n" for line in textwrap.wrap(text, width=114, break_on_hyphens=False))


def _kubectl(kubeconfig: str | None, context: str) -> str:
    return "kubectl" + (f" --kubeconfig {kubeconfig}" if kubeconfig else "") + f" --context {context}"


def by_hand_files(config: Config) -> dict[str, str]:
    """File name -> text of the manager's by-hand directory: Kueue's Configuration, then each worker's Secret
    templates in dispatch order."""
    assert config.clusters is not None
    files = {KUEUE_CONFIGURATION_FILE: kueue_configuration_text(config)}
    for worker in config.clusters.workers:
        files.update((template.file, template.text) for template in secret_templates(config, worker))
    return files


def write_by_hand(config: Config, directory: Path) -> tuple[int, int]:
    """The by-hand files in `directory` (created), and the Secret templates an earlier render for this manager wrote
    that the config no longer has (a worker removed) removed; files anyone else put there stay. (written, removed)"""
    directory.mkdir(parents=True, exist_ok=True)
    files = by_hand_files(config)
    label = re.compile(rf"^\s*{re.escape(CONFIG_LABEL)}:\s*{re.escape(config.cluster.name)}\s*$", re.MULTILINE)
    stale = [
        path
        for path in sorted(directory.iterdir())
        if path.is_file()
        and path.name not in files
        and _TEMPLATE_FILE.match(path.name)
        and label.search(path.read_text(encoding="utf-8", errors="replace"))
    ]
    for path in stale:
        path.unlink()
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return len(files), len(stale)
