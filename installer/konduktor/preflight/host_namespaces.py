"""Run the node checks in the namespaces of another process: from a preflight pod, those of its node.

A preflight pod on a GPU node runs privileged with hostPID, so PID 1 is the node's init and its namespaces
may be entered. Every command of the checks then runs as
`nsenter --target 1 --mount --uts --ipc --net --pid -- /bin/sh -c COMMAND` through testinfra's local backend:
with the host's file system and tools (nvidia-smi, timedatectl), its network devices and its processes, as
node-debug pods run host commands. The checks read files with commands (`cat /proc/modules`), so file reads
go through nsenter too. `konduktor.preflight.node` takes this host as it takes an SSH one.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from konduktor.preflight.hosts import local_host
from konduktor.preflight.node import CommandOutput, Host

HOST_INIT_PID = 1  # with hostPID, the node's init
# What to do when the namespaces cannot be entered: the pod lost its privileges or its host PID namespace.
UNREACHABLE_HINT = (
    "the preflight pod must run as root, privileged and with hostPID to enter the node's namespaces (nsenter "
    "into PID 1); a PodSecurity level below privileged on its namespace, or a policy that strips privileges, "
    "prevents that"
)


@dataclass(frozen=True)
class HostNamespaces:
    """A testinfra host whose every command runs in the namespaces of `pid` (the node's init by default)."""

    pid: int = HOST_INIT_PID
    local: Host = field(default_factory=local_host)

    def run(self, command: str) -> CommandOutput:
        inner = shlex.join(["/bin/sh", "-c", command])
        return self.local.run(f"nsenter --target {self.pid} --mount --uts --ipc --net --pid -- {inner}")
