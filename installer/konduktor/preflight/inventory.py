"""Which GPU hosts the node checks run on, what each must have, and how SSH reaches them.

The config's `preflight.nodes.ssh` names them, or, without `hosts`, every node of the config's GPU types that
the cluster lists is checked at its InternalIP, so an inventory of 1,000 nodes need not be typed. The command
line's --ssh flags go over the config's settings. With `preflight.nodes.pod` every node of the GPU types is
checked from a pod on it (`konduktor.preflight.pods`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from konduktor.config.findings import ConfigError, error, with_lines
from konduktor.config.load import LoadedConfig
from konduktor.config.model import Config, ssh_host_problem
from konduktor.errors import UsageError
from konduktor.preflight.cluster import ClusterFacts, NodeFacts, nodes_of
from konduktor.preflight.node import NodeExpectations
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
        """UsageError (exit 2), before any host is contacted, when a host is not an address or a hostname."""
        if self.hosts is not None:
            for host in self.hosts:
                refuse_bad_host(host, "SSH host")
            return [HostTarget(host, ssh_url(host, self.user, self.port)) for host in self.hosts]
        found = gpu_hosts(config, nodes)
        for name, address in found:
            refuse_bad_host(address, f"node {name}'s address")
        return [HostTarget(name, ssh_url(address, self.user, self.port)) for name, address in found]


def refuse_bad_host(host: str, what: str) -> None:
    problem = ssh_host_problem(host)
    if problem is not None:
        raise UsageError(
            f"{what} {problem}",
            hint="nothing was contacted; list the hosts to check with --ssh or preflight.nodes.ssh.hosts",
        )


def config_inventory(loaded: LoadedConfig) -> SshHosts | None:
    """The config's SSH inventory; None when it has none.

    The key is found from the config file's directory, and checked here rather than by `validate`: only the
    machine that runs the checks needs it, not every one that renders the config. ConfigError (exit 2, with
    the key's line) when it is not a file, before anything connects.
    """
    nodes = loaded.config.preflight.nodes
    ssh = nodes.ssh if nodes is not None else None
    if ssh is None:
        return None
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
    return [(node.name, node.internal_ip or node.name) for node in gpu_nodes(config, nodes)]


def gpu_nodes(config: Config, nodes: Sequence[NodeFacts]) -> list[NodeFacts]:
    """Every node a GPU type of the config selects, by name."""
    found = {node.name: node for t in config.gpu_types.values() for node in nodes_of(t, nodes)}
    return [found[name] for name in sorted(found)]


def expectations_of(config: Config, node: NodeFacts) -> NodeExpectations:
    """What the node's GPU type and its Node object say it must have."""
    gpus = next((t.gpus_per_node for t in config.gpu_types.values() if nodes_of(t, [node])), None)
    return NodeExpectations(gpus=gpus, rdma=bool(node.rdma))


def no_hosts(
    facts: ClusterFacts,
    name: str = "ssh-hosts",
    how: str = "over SSH",
    hint: str = "list the hosts in preflight.nodes.ssh.hosts, or fix what the cluster checks report",
) -> Check:
    """No host is listed and the cluster showed no node of the config's GPU types to check `how`."""
    if facts.unreachable is not None:
        why = "the API server did not answer"
    elif "nodes" in facts.problems:
        why = f"cannot list nodes: {facts.problems['nodes']}"
    else:
        why = "the cluster has no node of the config's GPU types"
    return check(name, Status.SKIPPED, f"no GPU host to check {how}: {why}", hint=hint)
