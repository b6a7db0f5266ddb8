"""Which GPU hosts the node checks run on, and how SSH reaches them.

The config's `preflight.nodes.ssh` names them, or, without `hosts`, every node of the config's GPU types that
the cluster lists is checked at its InternalIP, so an inventory of 1,000 nodes need not be typed. The command
line's --ssh flags go over the config's settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from konduktor.config.findings import ConfigError, error, with_lines
from konduktor.config.load import LoadedConfig
from konduktor.config.model import Config
from konduktor.preflight.cluster import ClusterFacts, NodeFacts, nodes_of
from konduktor.preflight.results import Check, Status, check

KEY_PATH = ("preflight", "nodes", "ssh", "key")


@dataclass(frozen=True)
class HostTarget:
    subject: str  # the name in the report: the node's name, or the host as listed
    url: str  # testinfra's host URL: ssh://[user@]address[:port], or local://


@dataclass(frozen=True)
class SshHosts:
    """The hosts to check over SSH and how to log in; the key is a file that exists."""

    hosts: tuple[str, ...] | None = None  # None: every node of the config's GPU types
    user: str | None = None
    key: Path | None = None
    port: int | None = None

    def targets(self, config: Config, nodes: Sequence[NodeFacts]) -> list[HostTarget]:
        if self.hosts is not None:
            return [HostTarget(host, ssh_url(host, self.user, self.port)) for host in self.hosts]
        return [HostTarget(name, ssh_url(address, self.user, self.port)) for name, address in gpu_hosts(config, nodes)]


def config_inventory(loaded: LoadedConfig) -> SshHosts | None:
    """The config's SSH inventory; None when it has none.

    The key is found from the config file's directory, and checked here rather than by `validate`: only the
    machine that runs the checks needs it, not every one that renders the config. ConfigError (exit 2, with
    the key's line) when it is not a file, before anything connects.
    """
    nodes = loaded.config.preflight.nodes
    if nodes is None:
        return None
    ssh = nodes.ssh
    key = None
    if ssh.key is not None:
        key = Path(ssh.key).expanduser()
        if not key.is_absolute():
            key = Path(loaded.filename).parent / key
        if not key.is_file():
            problem = error(
                "preflight",
                KEY_PATH,
                f"no such file: {key}",
                hint="a relative path is taken from the config file's directory; leave `key` out to use ssh's own",
            )
            raise ConfigError(loaded.filename, with_lines([problem], loaded.lines))
    return SshHosts(tuple(ssh.hosts) if ssh.hosts is not None else None, ssh.user, key, ssh.port)


def ssh_url(address: str, user: str | None, port: int | None) -> str:
    """`ssh://user@host:port`; an IPv6 address goes in brackets so its colons are not read as a port."""
    host = f"[{address}]" if address.count(":") > 1 else address
    return "ssh://" + (f"{user}@" if user else "") + host + (f":{port}" if port else "")


def gpu_hosts(config: Config, nodes: Sequence[NodeFacts]) -> list[tuple[str, str]]:
    """(node name, address) of every node a GPU type selects: its InternalIP, else its name."""
    found = {node.name: node.internal_ip or node.name for t in config.gpu_types.values() for node in nodes_of(t, nodes)}
    return sorted(found.items())


def no_hosts(facts: ClusterFacts) -> Check:
    """The inventory lists no hosts and the cluster showed no node of the config's GPU types to check."""
    if facts.unreachable is not None:
        why = "the API server did not answer"
    elif "nodes" in facts.problems:
        why = f"cannot list nodes: {facts.problems['nodes']}"
    else:
        why = "the cluster has no node of the config's GPU types"
    return check(
        "ssh-hosts",
        Status.SKIPPED,
        f"no GPU host to check over SSH: {why}",
        hint="list the hosts in preflight.nodes.ssh.hosts, or fix what the cluster checks report",
    )
