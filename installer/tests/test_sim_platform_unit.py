"""How the simulated cluster runs konduktor-core's Deployments: the command lines it makes of what the chart renders,
and the supervisor that restarts a process that exits, as a kubelet restarts a container."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from ruamel.yaml import YAML
from support import CORE, render

from konduktor.health.settings import parse_settings
from konduktor.sim.platform import SUPERVISOR, Running, SimPlatform, local_argv, program_of, with_kernel_logs
from konduktor.sim.processes import EPHEMERAL_RANGE, alive, free_port, gone, stop_process
from konduktor.waiting import wait_until


def rendered() -> dict[str, object]:
    objects = render(CORE / "values-sim.yaml")
    deployments = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}
    config_maps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
    return {"deployments": deployments, "config_maps": config_maps}


def test_the_chart_s_commands_become_local_command_lines_with_its_settings(tmp_path: Path) -> None:
    chart = rendered()
    deployments, config_maps = chart["deployments"], chart["config_maps"]
    assert isinstance(deployments, dict) and isinstance(config_maps, dict)
    health = program_of(deployments["konduktor-konduktor-core-health"], config_maps)
    assert health.component == "health-controller"
    assert health.service_account == "konduktor-konduktor-core-health"
    assert health.argv[:2] == ("konduktor-health", "run") and health.port == 8080
    settings = parse_settings(health.mounts["/etc/konduktor"]["health.yaml"], "health.yaml")
    assert settings.dry_run is False  # the sim's controller acts
    assert health.env == {"POD_NAME": "konduktor-konduktor-core-health-sim"}
    argv = local_argv(health, {"/etc/konduktor": tmp_path}, tmp_path / "kubeconfig.yaml", 41234)
    assert argv[:3] == [sys.executable, "-m", "konduktor.cli.health"]
    assert f"--config={tmp_path}/health.yaml" in argv and "--port=41234" in argv
    assert argv[-2:] == ["--kubeconfig", str(tmp_path / "kubeconfig.yaml")]

    publisher = program_of(deployments["konduktor-konduktor-core-capacity-publisher"], config_maps)
    assert publisher.service_account == "konduktor-capacity-publisher" and publisher.port is None
    assert local_argv(publisher, {}, tmp_path / "k.yaml", None)[3:] == [
        "publish-capacity",
        "--watch",
        "--heartbeat",
        "60",
        "--settle",
        "30",
        "--kubeconfig",
        str(tmp_path / "k.yaml"),
    ]
    # A settings change is a new fingerprint, so `ensure` restarts the controller; the same settings are not.
    assert health.fingerprint() == program_of(deployments["konduktor-konduktor-core-health"], config_maps).fingerprint()
    changed = json.loads(json.dumps(config_maps))
    changed["konduktor-konduktor-core-health"]["data"]["health.yaml"] += "cooldown_seconds: 1\n"
    assert program_of(deployments["konduktor-konduktor-core-health"], changed).fingerprint() != health.fingerprint()


def test_the_sim_adds_its_kernel_logs_unless_the_settings_name_a_directory(tmp_path: Path) -> None:
    added = parse_settings(with_kernel_logs("dry_run: false\n", tmp_path), "health.yaml")
    assert added.kernel_log_files is not None and added.kernel_log_files.directory == str(tmp_path)
    given = "kernel_log_files: {directory: /var/log/remote}\n"
    kept = parse_settings(with_kernel_logs(given, tmp_path), "health.yaml")
    assert kept.kernel_log_files is not None and kept.kernel_log_files.directory == "/var/log/remote"
    assert YAML(typ="safe").load(with_kernel_logs("", tmp_path)) == {"kernel_log_files": {"directory": str(tmp_path)}}


def test_a_token_is_renewed_past_half_its_life() -> None:
    running = Running("f", issued=1000.0, expires=3000.0)
    assert not running.due(1999.0) and running.due(2000.0)


def test_the_supervisor_restarts_what_exits_and_stops_it_on_sigterm(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    child = f"open({str(starts)!r}, 'a').write('started\\n'); import sys, time; sys.exit(3)"
    with (tmp_path / "log").open("ab") as log:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR, "--", sys.executable, "-c", child], stdout=log, stderr=log
        )
    try:
        wait_until("the child to be started twice", lambda: starts.exists() and starts.read_text().count("\n") >= 2)
        assert "exited with 3; restarting in 1 s" in (tmp_path / "log").read_text()
    finally:
        stop_process(supervisor.pid)
    assert gone(supervisor.pid, 10) and not alive(supervisor.pid)


def test_the_supervisor_imports_nothing_but_the_standard_library() -> None:
    """One supervisor starts with each platform process at every `up`: it loads no client, parser or model."""
    loaded = subprocess.run(
        [sys.executable, "-c", f"import sys, {SUPERVISOR}; print(' '.join(sys.modules))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    third_party = {"requests", "urllib3", "kubernetes", "ruamel", "pydantic", "yaml", "typer", "rich"}
    assert not third_party & {name.split(".")[0] for name in loaded}
    assert [name for name in loaded if name.startswith("konduktor")] == ["konduktor", "konduktor.sim", SUPERVISOR]


def test_the_processes_it_owns_are_its_supervisors_and_programs(tmp_path: Path) -> None:
    platform = SimPlatform(tmp_path, tmp_path / "kubeconfig.yaml")
    kubeconfig = f"{tmp_path}/platform/health-controller/kubeconfig.yaml"
    assert platform.owns(["python", "-m", "konduktor.cli.health", "run", "--kubeconfig", kubeconfig])
    assert platform.owns(["python", "-m", SUPERVISOR, "--", "python", "-m", "konduktor.cli.main", kubeconfig])
    assert not platform.owns(["kubectl", "--kubeconfig", kubeconfig])  # a user's command naming the file
    assert not platform.owns(["python", "-m", "konduktor.cli.health", "run", "--kubeconfig", "/elsewhere.yaml"])


def test_a_free_port_is_below_the_ephemeral_range_and_free() -> None:
    """Outgoing connections take their local ports from the ephemeral range, so a server's port is picked below it:
    no client's connect() takes it before the server binds."""
    ephemeral_low = int(EPHEMERAL_RANGE.read_text().split()[0])
    ports = {free_port() for _ in range(50)}
    assert all(port < ephemeral_low for port in ports)
    assert len(ports) > 40  # picked at random, so clusters starting at once rarely pick the same one
    for port in ports:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))
