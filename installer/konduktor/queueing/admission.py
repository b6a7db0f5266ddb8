"""What the cluster's admission says of a job `konduktor submit` sends, and the least change that satisfies it (pure).

A job is judged by a server-side dry run: the platform's admission policies, Pod Security and Kueue's webhooks
answer as they would to the real create. Two answers mean the job would not run:

- the dry run is refused (a policy that denies, or Pod Security refusing a bare Pod): the reasons are the API's
  message;
- Pod Security warns of the job's pod template. Pod Security enforces its level on Pods only; of a Job (or any
  object with a pod template) it only warns, at the namespace's `warn` level, so the Job is created and its pods
  are refused later, one by one, by the Job controller's creates. Whether the namespace's *enforced* level
  refuses them is asked by dry-running one pod of each template (`probe_pods`): its refusal holds the reasons.

`fix_for` turns the reasons (Pod Security's items, or a policy's message naming the fields it wants) into the
minimal changes to the job's pod templates: for `restricted` a numeric non-root user with a writable HOME (NVIDIA's
NGC images run as root and write to $HOME), no privilege escalation, every capability dropped, the runtime's
seccomp profile. What it cannot change safely (a hostPath volume, an unknown policy) is returned as unfixed.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from konduktor.queueing.explain import policy_reason

# The user a fixed job runs as: numeric (Pod Security cannot check a user name) and not root.
NON_ROOT_USER = 1000
# A writable home for that user: NGC images' HOME is /root, which user 1000 cannot write.
HOME_VOLUME = "konduktor-home"
HOME_PATH = "/home/konduktor"
# Capabilities `restricted` lets a container add back after dropping ALL.
ALLOWED_ADD = ("NET_BIND_SERVICE",)

_PSA_REFUSED = re.compile(r'violates PodSecurity "(?P<level>[^"]+)": (?P<items>.*)', re.S)
_PSA_WARNED = re.compile(r'would violate PodSecurity "(?P<level>[^"]+)": (?P<items>.*)', re.S)
# What the client puts before the server's message: `POST /api/v1/namespaces/x/pods: 403 `.
_REQUEST = re.compile(r"^[A-Z]+ \S+: \d{3} ")
_RBAC_DENIED = re.compile(r'cannot [a-z]+ resource "[^"]*"')
# Pod Security joins its checks with ", " after each check's parenthesised detail.
_PSA_ITEM_END = re.compile(r"(?<=\)), ")


def lacks_rights(message: str) -> bool:
    """A 403 of authorisation (`User "alice" cannot create resource "pods" ...`): the identity may not make the
    request. Admission refusals (Pod Security, a policy that denies) are 403s too, with their reasons instead."""
    return _RBAC_DENIED.search(message) is not None


def is_pod_security_warning(text: str) -> bool:
    return _PSA_WARNED.search(text) is not None


def is_pod_security_refusal(text: str) -> bool:
    return _PSA_REFUSED.search(text) is not None and not is_pod_security_warning(text)


def reasons_of(texts: list[str]) -> list[str]:
    """The separate reasons in the API's answers: each Pod Security check on its own, with its level; a policy's
    refusal as `policy NAME: why`; anything else as the server said it."""
    found: list[str] = []
    for answer in texts:
        text = _REQUEST.sub("", answer)
        psa = _PSA_REFUSED.search(text)
        if psa is None:
            found.append(policy_reason(text))
            continue
        found.extend(f"Pod Security {psa['level']}: {item.strip()}" for item in _PSA_ITEM_END.split(psa["items"]))
    return found


def pod_specs(obj: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every pod spec in a job (a Pod's spec, a Job's template, each of a JobSet's or a PyTorchJob's replicas'),
    with its path; the dicts are the job's own, for changing in place."""
    if isinstance(obj, dict):
        if isinstance(obj.get("containers"), list):
            yield path, obj
            return
        for key, value in obj.items():
            if key in ("metadata", "status"):
                continue
            yield from pod_specs(value, f"{path}.{key}" if path else key)
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            yield from pod_specs(value, f"{path}[{index}]")


def probe_pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """One bare Pod per pod template of the job, in its namespace, for a dry run that the namespace's enforced
    Pod Security level judges as it will judge the pods the job's controller creates."""
    namespace = job["metadata"].get("namespace")
    if job.get("kind") == "Pod":
        return []  # the job's own dry run is judged as a Pod already
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "konduktor-submit-probe-", "namespace": namespace},
            "spec": copy.deepcopy(spec),
        }
        for _, spec in pod_specs(job.get("spec", {}), "spec")
    ]


@dataclass
class Fix:
    job: dict[str, Any]
    changes: list[str] = field(default_factory=list)  # `path: value`, in the order made
    unfixed: list[str] = field(default_factory=list)  # reasons no change answers


class _Edit:
    """Changes to one copy of the job, each recorded once as `path: value`."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.changes: list[str] = []

    def set(self, owner: dict[str, Any], key: str, value: Any, path: str) -> None:
        if owner.get(key) != value:
            owner[key] = value
            self.changes.append(f"{path}.{key}: {_text(value)}")

    def remove(self, owner: dict[str, Any], key: str, path: str) -> None:
        if key in owner:
            del owner[key]
            self.changes.append(f"{path}.{key}: removed")

    def containers(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for path, spec in pod_specs(self.job.get("spec", {}), "spec"):
            for kind in ("initContainers", "containers"):
                for index, container in enumerate(spec.get(kind) or ()):
                    yield f"{path}.{kind}[{index}]", container

    def specs(self) -> Iterator[tuple[str, dict[str, Any]]]:
        return pod_specs(self.job.get("spec", {}), "spec")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return str(value)


def _context(owner: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    return owner.setdefault("securityContext", {}), f"{path}.securityContext"


def _no_escalation(edit: _Edit) -> None:
    for path, container in edit.containers():
        context, where = _context(container, path)
        edit.set(context, "allowPrivilegeEscalation", False, where)


def _drop_capabilities(edit: _Edit) -> None:
    for path, container in edit.containers():
        context, where = _context(container, path)
        capabilities = context.setdefault("capabilities", {})
        if "ALL" not in (capabilities.get("drop") or []):
            edit.set(capabilities, "drop", ["ALL"], f"{where}.capabilities")
        added = capabilities.get("add") or []
        kept = [c for c in added if c in ALLOWED_ADD]
        if kept != added:
            if kept:
                edit.set(capabilities, "add", kept, f"{where}.capabilities")
            else:
                edit.remove(capabilities, "add", f"{where}.capabilities")


def _non_root(edit: _Edit) -> None:
    for path, spec in edit.specs():
        context, where = _context(spec, path)
        edit.set(context, "runAsNonRoot", True, where)
        user_set = False
        if context.get("runAsUser") in (None, 0):
            edit.set(context, "runAsUser", NON_ROOT_USER, where)
            user_set = True
        for kind in ("initContainers", "containers"):
            for index, container in enumerate(spec.get(kind) or ()):
                inner = container.get("securityContext") or {}
                at = f"{path}.{kind}[{index}].securityContext"
                if inner.get("runAsNonRoot") is False:
                    edit.set(inner, "runAsNonRoot", True, at)
                if inner.get("runAsUser") == 0:
                    edit.set(inner, "runAsUser", NON_ROOT_USER, at)
                    user_set = True
        if user_set:
            _writable_home(edit, spec, path)


def _writable_home(edit: _Edit, spec: dict[str, Any], path: str) -> None:
    """An emptyDir at HOME_PATH and HOME pointing there, in every container that sets no HOME of its own."""
    homeless = [
        (f"{path}.{kind}[{index}]", container)
        for kind in ("initContainers", "containers")
        for index, container in enumerate(spec.get(kind) or ())
        if not any(e.get("name") == "HOME" for e in container.get("env") or ())
    ]
    if not homeless:
        return
    volumes = spec.setdefault("volumes", [])
    if not any(v.get("name") == HOME_VOLUME for v in volumes):
        volumes.append({"name": HOME_VOLUME, "emptyDir": {}})
        edit.changes.append(f"{path}.volumes: + {{name: {HOME_VOLUME}, emptyDir: {{}}}}")
    for at, container in homeless:
        container.setdefault("env", []).append({"name": "HOME", "value": HOME_PATH})
        edit.changes.append(f"{at}.env: + HOME={HOME_PATH}")
        mounts = container.setdefault("volumeMounts", [])
        if not any(m.get("mountPath") == HOME_PATH for m in mounts):
            mounts.append({"name": HOME_VOLUME, "mountPath": HOME_PATH})
            edit.changes.append(f"{at}.volumeMounts: + {HOME_VOLUME} at {HOME_PATH}")


def _seccomp(edit: _Edit) -> None:
    for path, spec in edit.specs():
        context, where = _context(spec, path)
        if (context.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            edit.set(context, "seccompProfile", {"type": "RuntimeDefault"}, where)
    for path, container in edit.containers():
        inner = container.get("securityContext") or {}
        if (inner.get("seccompProfile") or {}).get("type") == "Unconfined":
            edit.set(inner, "seccompProfile", {"type": "RuntimeDefault"}, f"{path}.securityContext")


def _unprivileged(edit: _Edit) -> None:
    for path, container in edit.containers():
        inner = container.get("securityContext") or {}
        if inner.get("privileged"):
            edit.set(inner, "privileged", False, f"{path}.securityContext")


def _host_namespaces(edit: _Edit) -> None:
    for path, spec in edit.specs():
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(key):
                edit.remove(spec, key, path)


def _host_ports(edit: _Edit) -> None:
    for path, container in edit.containers():
        for index, port in enumerate(container.get("ports") or ()):
            edit.remove(port, "hostPort", f"{path}.ports[{index}]")


# What a reason names -> the change that answers it. Pod Security's check names and field paths, and the fields a
# policy's message names, match alike.
_RULES: tuple[tuple[re.Pattern[str], Callable[[_Edit], None]], ...] = (
    (re.compile(r"allowPrivilegeEscalation"), _no_escalation),
    (re.compile(r"capabilities"), _drop_capabilities),
    (re.compile(r"runAsNonRoot|runAsUser|\bnon-root\b|\bas root\b"), _non_root),
    (re.compile(r"seccomp", re.I), _seccomp),
    (re.compile(r"\bprivileged\b"), _unprivileged),
    (re.compile(r"hostNetwork|hostPID|hostIPC|host namespaces"), _host_namespaces),
    (re.compile(r"hostPort"), _host_ports),
)


def fix_for(job: dict[str, Any], reasons: list[str]) -> Fix:
    """The job with the least changes that answer `reasons` (as `reasons_of` gives them), the changes made, and
    the reasons no change answers. The job given is not changed; a fixed job gives no further changes."""
    edit = _Edit(copy.deepcopy(job))
    unfixed: list[str] = []
    for reason in reasons:
        rules = [rule for pattern, rule in _RULES if pattern.search(reason)]
        if not rules or re.search(r"hostPath|volume type", reason):
            unfixed.append(reason)
        for rule in rules:
            rule(edit)
    return Fix(edit.job, edit.changes, unfixed)
