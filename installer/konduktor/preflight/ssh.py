"""testinfra hosts reached over ssh, with `--` before the host in ssh's argv.

testinfra's ssh backend puts the host straight after the options; a host that starts with `-` would then be
read as one more option. Hosts are validated before they get here (`konduktor.config.model.ssh_host_problem`);
the `--` makes ssh itself refuse to read the host as an option, whatever a caller passes.
"""

from __future__ import annotations

from testinfra.backend.ssh import SshBackend
from testinfra.host import Host

# testinfra's last argv template: the host and the remote command, each filled in shell-quoted.
_HOST_AND_COMMAND = "%s %s"


class SshBackendEndingOptions(SshBackend):  # type: ignore[misc]  # testinfra ships no type information
    def _build_ssh_command(self, command: str) -> tuple[list[str], list[str]]:
        argv, values = super()._build_ssh_command(command)
        if argv[-1] != _HOST_AND_COMMAND:
            raise RuntimeError(f"testinfra's ssh command changed shape: {argv!r}")
        return [*argv[:-1], "--", _HOST_AND_COMMAND], values


def ssh_host(url: str, identity_file: str | None, extra_args: str) -> Host:
    """A testinfra host for `ssh://[user@]host[:port]`."""
    backend = SshBackendEndingOptions(
        url.removeprefix("ssh://"), ssh_identity_file=identity_file, ssh_extra_args=extra_args
    )
    host = Host(backend)
    backend.set_host(host)
    return host
