"""The `alerts:` section: receivers whose secrets stay in Kubernetes Secrets, routes by severity and team, the
Alertmanager configuration it renders (checked and route-tested by the real amtool), and the umbrella values."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from amtool import amtool, report
from quota_samples import DELETE, EXAMPLES, edited, write_config
from support import run

from konduktor.alerts.render import alertmanager_config, kube_prometheus_stack_values
from konduktor.config import load_config
from konduktor.config.findings import ConfigError
from konduktor.config.load import parse_config
from konduktor.helm.values import umbrella_values
from konduktor.quotas.manifests import to_yaml
from konduktor.tools.catalog import load_tools
from konduktor.tools.toolbox import Toolbox

EVERY_KIND: dict[str, Any] = {
    "receivers": {
        "oncall": {"pagerduty": {"routingKey": {"secret": "pagerduty", "key": "routing-key"}}},
        "platform-slack": {"slack": {"url": {"secret": "slack", "key": "url"}, "channel": "#gpu"}},
        "team-a-hook": {
            "webhook": {
                "url": {"secret": "team-a-hook", "key": "url"},
                "bearerToken": {"secret": "team-a-hook", "key": "token"},
            }
        },
        "mail": {
            "email": {
                "to": "ops@example.com",
                "from": "am@example.com",
                "smarthost": "smtp.example.com:587",
                "username": "am",
                "password": {"secret": "smtp", "key": "password"},
            }
        },
    },
    "routes": {
        "default": "platform-slack",
        "severity": {"critical": "oncall", "info": "mail"},
        "teams": {"team-a": "team-a-hook"},
    },
}


def text(data: dict[str, Any]) -> str:
    return to_yaml([data]).removeprefix("---\n")


def errors_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(text(data), "config.yaml")
    return [f.located("config.yaml") for f in raised.value.findings if f.is_error]


def line_of(data: dict[str, Any], needle: str, after: str = "") -> int:
    """The line of the first `needle` below the first line holding `after`."""
    lines = text(data).splitlines()
    start = next(number for number, line in enumerate(lines) if after in line)
    return next(number for number, line in enumerate(lines, 1) if number > start and needle in line)


@pytest.mark.parametrize(
    ("kind", "field", "body"),
    [
        ("slack", "url", {"url": "https://hooks.slack.com/services/T000/B000/XXXX"}),
        ("pagerduty", "routingKey", {"routingKey": "0123456789abcdef0123456789abcdef"}),
        ("webhook", "url", {"url": "https://alerts.example.com/hook?token=s3cret"}),
        ("webhook", "bearerToken", {"url": {"secret": "hook", "key": "url"}, "bearerToken": "s3cret"}),
        (
            "email",
            "password",
            {"to": "a@example.com", "from": "b@example.com", "smarthost": "smtp:25", "password": "hunter2"},
        ),
    ],
)
def test_an_inline_secret_is_an_error_with_its_line(kind: str, field: str, body: dict[str, Any]) -> None:
    data = edited({"alerts": {"receivers": {"ops": {kind: body}}}})
    line = line_of(data, f"{field}:", after="ops:")
    [message] = errors_of(data)
    assert message.startswith(f"config.yaml:{line}: alerts.receivers.ops.{kind}.{field}: ")
    assert "Kubernetes Secret" in message and "never the secret itself inline" in message


def test_validate_refuses_an_inline_secret_with_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = edited({"alerts": {"receivers": {"ops": {"slack": {"url": "https://hooks.slack.com/x"}}}}})
    code, out, err = run(capsys, "validate", str(write_config(tmp_path, data)))
    assert (code, out) == (2, "")
    assert f"config.yaml:{line_of(data, 'url:', after='ops:')}: alerts.receivers.ops.slack.url" in err
    assert "hooks.slack.com" not in err  # the secret is not echoed back


def test_a_receiver_has_exactly_one_kind() -> None:
    both = {"webhook": {"url": {"secret": "a", "key": "b"}}, "pagerduty": {"routingKey": {"secret": "a", "key": "c"}}}
    [message] = errors_of(edited({"alerts": {"receivers": {"ops": both}}}))
    assert "alerts.receivers.ops" in message and "exactly one of slack, pagerduty, webhook, email" in message
    [message] = errors_of(edited({"alerts": {"receivers": {"ops": {}}}}))
    assert "got none" in message


def test_routes_name_configured_receivers_and_known_teams() -> None:
    data = edited(
        {"alerts": {"routes": {"default": "platfrom", "severity": {"critical": "oncall"}, "teams": {"team-c": "x"}}}}
    )
    messages = errors_of(data)
    assert messages == [
        f"config.yaml:{line_of(data, 'default:')}: alerts.routes.default: no receiver named 'platfrom' in "
        "alerts.receivers",
        f"config.yaml:{line_of(data, 'critical:')}: alerts.routes.severity.critical: no receiver named 'oncall' in "
        "alerts.receivers",
        f"config.yaml:{line_of(data, 'team-c:')}: alerts.routes.teams.team-c: no team named 'team-c'",
    ]


def test_a_secret_reference_names_a_secret_and_a_key() -> None:
    data = edited({"alerts": {"receivers": {"ops": {"webhook": {"url": {"secret": "Bad_Name", "key": "u/rl"}}}}}})
    messages = errors_of(data)
    assert any("alerts.receivers.ops.webhook.url.secret" in m and "not a namespace name" in m for m in messages)
    assert any("alerts.receivers.ops.webhook.url.key" in m and "not a Secret key" in m for m in messages)


def test_no_receiver_is_a_warning_that_alerts_reach_nobody(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = edited({"alerts": DELETE})
    code, _, err = run(capsys, "validate", str(write_config(tmp_path, data)))
    assert code == 0
    assert "config.yaml:1: no alert receiver is configured: alerts fire in Alertmanager but reach nobody" in err
    assert "1 warning" in err


def test_secrets_are_mounted_and_read_from_files_never_inline() -> None:
    config = parse_config(text(edited({"alerts": EVERY_KIND}))).config
    values = kube_prometheus_stack_values(config)["alertmanager"]
    assert values["alertmanagerSpec"]["secrets"] == ["platform-webhook", "pagerduty", "slack", "team-a-hook", "smtp"]
    receivers = {r["name"]: r for r in values["config"]["receivers"]}
    assert receivers["oncall"]["pagerduty_configs"][0]["routing_key_file"] == (
        "/etc/alertmanager/secrets/pagerduty/routing-key"
    )
    assert receivers["platform-slack"]["slack_configs"][0]["api_url_file"] == "/etc/alertmanager/secrets/slack/url"
    hook = receivers["team-a-hook"]["webhook_configs"][0]
    assert hook["url_file"] == "/etc/alertmanager/secrets/team-a-hook/url"
    assert hook["http_config"]["authorization"]["credentials_file"] == "/etc/alertmanager/secrets/team-a-hook/token"
    assert receivers["mail"]["email_configs"][0]["auth_password_file"] == "/etc/alertmanager/secrets/smtp/password"
    rendered = yaml.safe_dump(values)
    assert (
        "api_url:" not in rendered
        and "routing_key:" not in rendered
        and "url:" not in rendered.replace("url_file:", "").replace("api_url_file:", "")
    )


def test_up_passes_the_alertmanager_configuration_to_the_umbrella() -> None:
    config = parse_config(text(edited({"alerts": EVERY_KIND}))).config
    values = umbrella_values(config, {})
    assert values["kube-prometheus-stack"] == kube_prometheus_stack_values(config)
    assert values["kube-prometheus-stack"]["alertmanager"]["config"] == alertmanager_config(config)


@pytest.mark.parametrize("name", ["config.yaml", "multi-department.yaml", "gke-topology.yaml", "ssh-preflight.yaml"])
def test_amtool_accepts_the_rendered_configuration_of_each_example(name: str, tmp_path: Path) -> None:
    rendered = tmp_path / "alertmanager.yaml"
    rendered.write_text(yaml.safe_dump(alertmanager_config(load_config(EXAMPLES / name).config)))
    result = amtool("check-config", str(rendered))
    assert result.returncode == 0, report(result)
    assert "SUCCESS" in result.stdout + result.stderr, report(result)


def test_amtool_accepts_every_receiver_kind(tmp_path: Path) -> None:
    rendered = tmp_path / "alertmanager.yaml"
    rendered.write_text(yaml.safe_dump(alertmanager_config(parse_config(text(edited({"alerts": EVERY_KIND}))).config)))
    result = amtool("check-config", str(rendered))
    assert result.returncode == 0, report(result)
    assert "Found:\n - global config\n - route\n" in result.stdout, report(result)
    assert " - 6 receivers\n" in result.stdout, report(result)  # the four kinds, the seed's and `nowhere`


def test_amtool_refuses_a_configuration_that_routes_to_a_missing_receiver(tmp_path: Path) -> None:
    # The check above can fail: the same configuration with a dangling route is refused.
    broken = alertmanager_config(load_config(EXAMPLES / "config.yaml").config)
    broken["route"]["routes"][-1]["receiver"] = "gone"
    rendered = tmp_path / "alertmanager.yaml"
    rendered.write_text(yaml.safe_dump(broken))
    result = amtool("check-config", str(rendered))
    assert result.returncode != 0, report(result)


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (["alertname=KonduktorNodeQuarantined", "severity=warning", "node=gpu-1"], "platform"),
        (["alertname=KonduktorQuarantineBreakerTripped", "severity=critical"], "platform"),
        (["alertname=KonduktorWorkloadsPendingTooLong", "severity=warning", "cluster_queue=team-a"], "team-a-chat"),
        (["alertname=X", "severity=critical", "team=team-a"], "team-a-chat,platform"),
        (["alertname=X", "severity=critical", "team=team-a", "cluster_queue=team-a"], "team-a-chat,platform"),
        (["alertname=X", "severity=warning", "cluster_queue=team-b"], "platform"),
        (["alertname=Watchdog", "severity=none"], "nowhere"),
    ],
)
def test_the_example_routes_by_severity_and_team(labels: list[str], receivers: str, tmp_path: Path) -> None:
    rendered = tmp_path / "alertmanager.yaml"
    rendered.write_text(yaml.safe_dump(alertmanager_config(load_config(EXAMPLES / "config.yaml").config)))
    result = amtool("config", "routes", "test", f"--config.file={rendered}", f"--verify.receivers={receivers}", *labels)
    assert result.returncode == 0, report(result)
    assert result.stdout.strip() == receivers, report(result)


def test_render_prints_the_alertmanager_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", "--alertmanager", str(EXAMPLES / "config.yaml"))
    assert code == 0
    assert yaml.safe_load(out) == alertmanager_config(load_config(EXAMPLES / "config.yaml").config)


def test_the_pinned_alertmanager_is_the_one_the_umbrella_deploys() -> None:
    images = (EXAMPLES.parent / "charts" / "konduktor" / "images.txt").read_text().split()
    [image] = [i for i in images if i.startswith("quay.io/prometheus/alertmanager:")]
    tool = load_tools()["alertmanager"]
    assert image.rpartition(":")[2] == tool.version
    for binary in ("alertmanager", "amtool"):
        result = subprocess.run(
            [str(Toolbox().path(binary)), "--version"], capture_output=True, text=True, check=False, timeout=60
        )
        assert f"version {tool.version.removeprefix('v')} " in result.stdout + result.stderr, result
