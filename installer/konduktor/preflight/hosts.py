"""The testinfra hosts the node checks (`konduktor.preflight.node`) run on: this machine, or a GPU host over SSH.

testinfra is imported in `konduktor.preflight` only (installer/tests/test_layering.py); `konduktor.ops.preflight`
and the CLI's `preflight-node` open their hosts here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import testinfra

from konduktor.preflight.ssh import ssh_host

LOCAL = "local://"
SSH_OPTIONS = "-o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=15 -o ServerAliveCountMax=2"


def local_host() -> Any:
    """This machine, through testinfra's local backend."""
    return testinfra.get_host(LOCAL)


def open_host(url: str, key: Path | None) -> Any:
    """A testinfra host. BatchMode: a host that wants a password or a host-key answer fails instead of prompting;
    the timeouts make an unreachable or vanished host fail instead of hanging."""
    if url == LOCAL:
        return local_host()
    return ssh_host(url, str(key) if key else None, SSH_OPTIONS)
