"""The Alertmanager configuration and the kube-prometheus-stack values the config's `alerts:` section implies.

Secrets never enter the configuration: kube-prometheus-stack mounts each referenced Secret into the Alertmanager
pod at /etc/alertmanager/secrets/<secret>/<key> (alertmanagerSpec.secrets), and every receiver reads its
credentials from those files (`*_file` fields), which Alertmanager reads when it sends a notification.

The routing tree: team routes first (an alert labelled with the team, or with its queue as `cluster_queue`),
each continuing to the severity routes, so a critical alert about a team's queue reaches the team and the
on-call; then one route per severity; everything else goes to the default receiver.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from konduktor.config.model import Alerts, Config, SecretKey

SECRETS_DIR = PurePosixPath("/etc/alertmanager/secrets")
# A receiver that sends nothing: for kube-prometheus-stack's always-firing Watchdog and InfoInhibitor (which
# exist to prove the pipeline and to inhibit), and the root receiver when the config names none.
NOWHERE = "nowhere"
SILENT_ALERTS = 'alertname=~"Watchdog|InfoInhibitor"'
GROUP_BY = ["alertname", "node", "cluster_queue"]


def secret_path(ref: SecretKey, secrets_dir: PurePosixPath = SECRETS_DIR) -> str:
    return str(secrets_dir / ref.secret / ref.key)


def receiver_config(name: str, alerts: Alerts, secrets_dir: PurePosixPath = SECRETS_DIR) -> dict[str, Any]:
    """One Alertmanager receiver; `send_resolved` everywhere, so people learn when a node is back."""
    receiver = alerts.receivers[name]
    result: dict[str, Any] = {"name": name}
    if receiver.slack is not None:
        slack: dict[str, Any] = {"api_url_file": secret_path(receiver.slack.url, secrets_dir), "send_resolved": True}
        if receiver.slack.channel:
            slack["channel"] = receiver.slack.channel
        # The runbook link is an annotation of every Konduktor alert: show it in the message.
        slack["title"] = '{{ template "slack.default.title" . }}'
        slack["text"] = (
            "{{ range .Alerts }}{{ .Annotations.summary }}\n{{ .Annotations.description }}\n"
            "Runbook: {{ .Annotations.runbook_url }}\n{{ end }}"
        )
        result["slack_configs"] = [slack]
    elif receiver.pagerduty is not None:
        result["pagerduty_configs"] = [
            {"routing_key_file": secret_path(receiver.pagerduty.routing_key, secrets_dir), "send_resolved": True}
        ]
    elif receiver.webhook is not None:
        webhook: dict[str, Any] = {"url_file": secret_path(receiver.webhook.url, secrets_dir), "send_resolved": True}
        if receiver.webhook.bearer_token is not None:
            webhook["http_config"] = {
                "authorization": {
                    "type": "Bearer",
                    "credentials_file": secret_path(receiver.webhook.bearer_token, secrets_dir),
                }
            }
        result["webhook_configs"] = [webhook]
    elif receiver.email is not None:
        email = receiver.email
        mail: dict[str, Any] = {
            "to": email.to,
            "from": email.sender,
            "smarthost": email.smarthost,
            "require_tls": email.require_tls,
            "send_resolved": True,
        }
        if email.username:
            mail["auth_username"] = email.username
        if email.password is not None:
            mail["auth_password_file"] = secret_path(email.password, secrets_dir)
        result["email_configs"] = [mail]
    return result


def default_receiver(alerts: Alerts) -> str:
    if alerts.routes.default is not None:
        return alerts.routes.default
    return next(iter(alerts.receivers), NOWHERE)


def alertmanager_config(config: Config, secrets_dir: PurePosixPath = SECRETS_DIR) -> dict[str, Any]:
    """Alertmanager's configuration file (alertmanager.yaml) as data."""
    alerts = config.alerts
    routes: list[dict[str, Any]] = [{"receiver": NOWHERE, "matchers": [SILENT_ALERTS]}]
    for team, receiver in alerts.routes.teams.items():
        # The team's ClusterQueue is named after the team; an alert carrying both labels is sent once.
        routes.append({"receiver": receiver, "matchers": [f'team="{team}"'], "continue": True})
        routes.append(
            {"receiver": receiver, "matchers": [f'cluster_queue="{team}"', f'team!="{team}"'], "continue": True}
        )
    for severity, receiver in alerts.routes.severity.items():
        routes.append({"receiver": receiver, "matchers": [f'severity="{severity}"']})
    route: dict[str, Any] = {
        "receiver": default_receiver(alerts),
        "group_by": list(GROUP_BY),
        "group_wait": alerts.group_wait or "0s",
        "group_interval": alerts.group_interval or "5m",
        "repeat_interval": alerts.repeat_interval or "4h",
    }
    route["routes"] = routes
    receivers = [receiver_config(name, alerts, secrets_dir) for name in alerts.receivers]
    return {"route": route, "receivers": [*receivers, {"name": NOWHERE}]}


def referenced_secrets(config: Config) -> list[str]:
    """The Secrets the receivers read, in first-use order: each is mounted into the Alertmanager pod."""
    names: list[str] = []
    for receiver in config.alerts.receivers.values():
        for kind in (receiver.slack, receiver.pagerduty, receiver.webhook, receiver.email):
            if kind is None:
                continue
            for value in vars(kind).values():
                if isinstance(value, SecretKey) and value.secret not in names:
                    names.append(value.secret)
    return names


def kube_prometheus_stack_values(config: Config) -> dict[str, Any]:
    """kube-prometheus-stack values: the configuration, and the Secrets mounted for its `*_file` fields."""
    alertmanager: dict[str, Any] = {"config": alertmanager_config(config)}
    if secrets := referenced_secrets(config):
        alertmanager["alertmanagerSpec"] = {"secrets": secrets}
    return {"alertmanager": alertmanager}
