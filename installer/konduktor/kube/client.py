"""The one place that talks to the Kubernetes API.

Objects are plain dicts. Writes of objects Konduktor owns are server-side applies with one field manager, so
re-running a command converges instead of conflicting, and fields set by others are left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from konduktor.errors import ExitCode, KonduktorError, UsageError

FIELD_MANAGER = "konduktor"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: its URL prefix, plural name and scope."""

    prefix: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        parts = [self.prefix]
        if self.namespaced and namespace:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name:
            parts.append(name)
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


# Answers that mean "not this identity" or "not these rights": the command cannot work at all with them.
UNAUTHORISED = (401, 403)
KUBECONFIG_HINT = "pass --kubeconfig, set KUBECONFIG, or start the simulated cluster: konduktor-install sim up"


class KubeconfigError(UsageError):
    """A kubeconfig that is missing or does not load, or names no such context (exit 2): nothing was read."""


@dataclass(frozen=True)
class Identity:
    """Who a request is sent as (request.userInfo): a user name and at most one group."""

    user: str
    group: str | None = None


class ApiError(KonduktorError):
    """The API server refused a request or could not be reached (`status` None)."""

    def __init__(self, message: str, status: int | None = None, hint: str | None = None) -> None:
        if hint is None and status in UNAUTHORISED:
            hint = (
                "the kubeconfig's credentials are not accepted (401) or lack the rights this command needs (403); "
                "`kubectl auth can-i --list` shows what they may do"
            )
        super().__init__(message, hint=hint)
        self.status = status
        # An outage or missing rights is never the command's own negative answer (exit 1).
        self.exit_code = ExitCode.UNREACHABLE if self.outage else ExitCode.NEGATIVE

    @property
    def outage(self) -> bool:
        """The cluster could not be reached, or refused this identity or the rights the request needs."""
        return self.status is None or self.status in UNAUTHORISED


def api_prefix(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


class Kube:
    """A client for one cluster (a kubeconfig file and optional context)."""

    def __init__(
        self,
        kubeconfig: Path | None = None,
        context: str | None = None,
        timeout: float = 30,
        impersonate: Identity | None = None,
    ) -> None:
        configuration = client.Configuration()
        namespace = "default"
        if kubeconfig is not None and not Path(kubeconfig).expanduser().exists():
            # The client would call it an invalid file ("No configuration found").
            raise KubeconfigError(f"kubeconfig {kubeconfig}: no such file", hint=KUBECONFIG_HINT)
        try:
            if kubeconfig is None and context is None and in_cluster_only():
                config.load_incluster_config(client_configuration=configuration)
            else:
                # No file named: $KUBECONFIG's files merged, else ~/.kube/config, read now (the client's own default
                # was fixed when it was imported).
                files = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or None
                if files is None and not Path("~/.kube/config").expanduser().exists():
                    raise KubeconfigError(
                        "no kubeconfig: KUBECONFIG is not set and ~/.kube/config does not exist", hint=KUBECONFIG_HINT
                    )
                config.load_kube_config(config_file=files, context=context, client_configuration=configuration)
                contexts, active = config.list_kube_config_contexts(config_file=files)
                chosen = active if context is None else next(c for c in contexts if c["name"] == context)
                context = chosen["name"]
                namespace = (chosen.get("context") or {}).get("namespace") or namespace
        except (config.ConfigException, OSError) as problem:
            raise KubeconfigError(
                f"cannot load kubeconfig {kubeconfig or '(default)'}: {problem}", hint=KUBECONFIG_HINT
            ) from problem
        configuration.retries = 2
        # Connections kept for reuse (default: 5 per CPU). The health controller writes up to 64 nodes at once; with
        # fewer kept, each burst would open and drop connections (and urllib3 warns for each one).
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, 64)
        self.server = configuration.host
        # The PEM file of the CA that signs the server's certificate (the client writes inline data to a file).
        self.ca_file: str | None = configuration.ssl_ca_cert
        self.kubeconfig = kubeconfig
        self.context = context
        # The context's namespace, where kubectl would act without -n.
        self.namespace = namespace
        self.api = client.ApiClient(configuration)
        if impersonate is not None:
            # The API server authorizes and admits each request as this identity (the kubeconfig's user needs
            # the `impersonate` verb on it): how the platform asks "what would this user be allowed?".
            self.api.set_default_header("Impersonate-User", impersonate.user)
            if impersonate.group is not None:
                self.api.set_default_header("Impersonate-Group", impersonate.group)
        self.timeout = timeout
        self.last_warnings: list[str] = []
        self._resources: dict[str, dict[str, Resource]] = {}

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, *_exception: object) -> None:
        self.close()

    def request(self, method: str, path: str, **options: Any) -> Any:
        """One API call (options as for `send`); returns the decoded JSON body."""
        data = self.send(method, path, **options)
        return json.loads(data) if data else None

    def send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> bytes:
        """One API call; returns the raw body. Errors become ApiError with the server's message."""
        # Apply patches are YAML; a dict body is sent as JSON, which is valid YAML.
        method, url, headers, payload, _ = self.api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api.call_api(
                method, url, header_params=headers, body=payload, _request_timeout=timeout or self.timeout
            )
            data = response.read()
        except ApiException as problem:
            raise ApiError(describe(problem.status, problem.body, method, path), status=problem.status) from problem
        except (urllib3.exceptions.HTTPError, OSError) as problem:
            raise ApiError(
                f"cannot reach the API server at {self.server}: {problem.__class__.__name__}",
                hint="is the cluster running? (`konduktor-install sim status` for the simulated cluster)",
            ) from problem
        if response.status >= 400:
            raise ApiError(describe(response.status, data, method, path), status=response.status)
        # Admission warnings (e.g. a ValidatingAdmissionPolicy in Warn mode) come back as headers.
        self.last_warnings = warnings_of(response.headers.get("Warning"))
        return bytes(data or b"")

    def dry_run_create(self, obj: dict[str, Any]) -> list[str]:
        """Creates nothing; returns the admission warnings a real create of `obj` would get."""
        resource = self.resource(obj["apiVersion"], obj["kind"])  # the object may have only a generateName
        self.request("POST", resource.path(obj["metadata"].get("namespace")), query={"dryRun": "All"}, body=obj)
        return self.last_warnings

    def watch(
        self,
        api_version: str,
        kind: str,
        resource_version: str | None = None,
        namespace: str | None = None,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> WatchStream:
        """A watch from `resource_version` (with bookmarks); the server ends it after `timeout_seconds`. An object
        that stops matching the selectors arrives as DELETED.

        An expired resourceVersion is ApiError status 410, as the response status or as an ERROR event.
        """
        resource = self.resource(api_version, kind)
        query = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_seconds)}
        if resource_version:
            query["resourceVersion"] = resource_version
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        path = resource.path(namespace)
        method, url, headers, _, _ = self.api.param_serialize(
            "GET",
            path,
            query_params=list(query.items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        try:
            # (connect, read): the read timeout is per socket read, and the server sends bookmarks meanwhile.
            response = self.api.call_api(
                method, url, header_params=headers, _request_timeout=(self.timeout, timeout_seconds + 30)
            )
        except ApiException as problem:
            raise ApiError(describe(problem.status, problem.body, "WATCH", path), status=problem.status) from problem
        except (urllib3.exceptions.HTTPError, OSError) as problem:
            raise ApiError(f"cannot reach the API server at {self.server}: {problem.__class__.__name__}") from problem
        if response.status >= 400:
            raise ApiError(describe(response.status, response.read(), "WATCH", path), status=response.status)
        return WatchStream(response.response, path)

    def resource(self, api_version: str, kind: str) -> Resource:
        """Discovery for one group/version, cached; refreshed once when a kind is missing (new CRDs)."""
        for attempt in range(2):
            if attempt or api_version not in self._resources:
                listing = self.request("GET", api_prefix(api_version))
                self._resources[api_version] = {
                    item["kind"]: Resource(api_prefix(api_version), item["name"], item["namespaced"])
                    for item in listing.get("resources", [])
                    if "/" not in item["name"]
                }
            if kind in self._resources[api_version]:
                return self._resources[api_version][kind]
        raise ApiError(
            f"the API server does not serve {kind} in {api_version}", status=404, hint="is the CRD installed?"
        )

    def _locate(self, obj: dict[str, Any]) -> tuple[Resource, str | None, str]:
        meta = obj.get("metadata", {})
        resource = self.resource(obj["apiVersion"], obj["kind"])
        return resource, meta.get("namespace"), meta["name"]

    def apply(
        self, obj: dict[str, Any], field_manager: str = FIELD_MANAGER, force: bool = True, dry_run: bool = False
    ) -> dict[str, Any]:
        """Server-side apply of one object; `force` takes ownership of fields another manager set."""
        resource, namespace, name = self._locate(obj)
        # Strict: a misspelt or unknown field is an error instead of being dropped silently.
        query: dict[str, Any] = {
            "fieldManager": field_manager,
            "force": str(force).lower(),
            "fieldValidation": "Strict",
        }
        if dry_run:
            query["dryRun"] = "All"
        result: dict[str, Any] = self.request(
            "PATCH", resource.path(namespace, name), query=query, body=obj, content_type=APPLY_PATCH
        )
        return result

    def apply_all(
        self, objects: Iterable[dict[str, Any]], field_manager: str = FIELD_MANAGER, dry_run: bool = False
    ) -> list[dict[str, Any]]:
        return [self.apply(obj, field_manager, dry_run=dry_run) for obj in objects]

    def apply_status(self, obj: dict[str, Any], field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        resource, namespace, name = self._locate(obj)
        result: dict[str, Any] = self.request(
            "PATCH",
            resource.path(namespace, name, "status"),
            query={"fieldManager": field_manager, "force": "true"},
            body=obj,
            content_type=APPLY_PATCH,
        )
        return result

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        resource = self.resource(api_version, kind)
        try:
            found: dict[str, Any] = self.request("GET", resource.path(namespace, name))
        except ApiError as problem:
            if problem.status == 404:
                return None
            raise
        return found

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        resource = self.resource(api_version, kind)
        query = {k: v for k, v in {"labelSelector": label_selector, "fieldSelector": field_selector}.items() if v}
        items: list[dict[str, Any]] = self.request("GET", resource.path(namespace), query=query).get("items", [])
        for item in items:  # list responses omit each item's apiVersion/kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str = FIELD_MANAGER,
    ) -> dict[str, Any]:
        """A JSON merge patch, for fields of objects Konduktor does not own (a taint on a Node). The object's
        managedFields name `field_manager` as the writer of what it changed (without it, the client's User-Agent)."""
        resource = self.resource(api_version, kind)
        result: dict[str, Any] = self.request(
            "PATCH",
            resource.path(namespace, name, subresource),
            query={"fieldManager": field_manager},
            body=patch,
            content_type=MERGE_PATCH,
        )
        return result

    def create(self, obj: dict[str, Any], field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """A plain create: fails with 409 when the object exists. For kinds such as Node the status sent is kept,
        as when a kubelet registers its node. The object may have only a `generateName`: the server names it (the
        name is in the object returned)."""
        resource = self.resource(obj["apiVersion"], obj["kind"])
        namespace = obj.get("metadata", {}).get("namespace")
        result: dict[str, Any] = self.request(
            "POST", resource.path(namespace), query={"fieldManager": field_manager}, body=obj
        )
        return result

    def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None, propagation: str = "Background"
    ) -> bool:
        """Deletes if present; returns whether there was something to delete."""
        resource = self.resource(api_version, kind)
        try:
            self.request("DELETE", resource.path(namespace, name), body={"propagationPolicy": propagation})
        except ApiError as problem:
            if problem.status == 404:
                return False
            raise
        return True

    def allowed(
        self, verb: str, resource: str, group: str = "", namespace: str | None = None, subresource: str = ""
    ) -> bool:
        """Whether this identity may `verb` the `resource`, as the API server's authorizer answers a
        SelfSubjectAccessReview (which every authenticated identity may create)."""
        attributes = {"verb": verb, "resource": resource, "group": group}
        if namespace is not None:
            attributes["namespace"] = namespace
        if subresource:
            attributes["subresource"] = subresource
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = self.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review)
        return bool(answer.get("status", {}).get("allowed"))

    def version(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/version")
        return result

    def ready(self) -> bool:
        """True when the API server answers /readyz."""
        try:
            return self.send("GET", "/readyz", timeout=5).strip() == b"ok"
        except ApiError:
            return False


class WatchStream:
    """The events of one watch request as they arrive, as dicts {"type": ..., "object": ...}.

    `close()` may be called from another thread: it unblocks the read and ends the iteration quietly, which is
    how a controller stops watching on shutdown. A connection that breaks is ApiError without a status.
    """

    def __init__(self, response: urllib3.BaseHTTPResponse, path: str) -> None:
        self._response = response
        self._path = path
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        pending = b""
        try:
            # amt=None: each chunk as the server flushes it; an event may span chunks, so split on newlines.
            for chunk in self._response.stream(amt=None, decode_content=False):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield self._event(json.loads(line))
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as problem:
            if not self._closed:
                raise ApiError(f"WATCH {self._path}: stream broken ({problem.__class__.__name__})") from problem
        except AttributeError:
            # close() took the response's file away (http.client sets it to None) while the reader handled an
            # event or read: its next read ends the iteration as closed.
            if not self._closed:
                raise
        finally:
            self._response.release_conn()

    def _event(self, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("type") == "ERROR":
            status = event.get("object", {})
            raise ApiError(f"WATCH {self._path}: {status.get('message', status)}", status=status.get("code"))
        return event

    def close(self) -> None:
        self._closed = True
        # An iteration that ended (the server closed the watch, or an exception such as a signal's SystemExit went
        # through it) has released the connection, and urllib3 refuses to shut that down (RuntimeError): raised in
        # a caller's `finally`, it replaced the exception, and the GPU agent went on watching after SIGTERM.
        with contextlib.suppress(RuntimeError, ValueError):
            self._response.shutdown()
        self._response.close()


def in_cluster_only() -> bool:
    """Inside a pod and without a kubeconfig file: use the pod's service account."""
    if not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return False
    locations = os.environ.get("KUBECONFIG") or config.KUBE_CONFIG_DEFAULT_LOCATION
    return not any(os.path.exists(os.path.expanduser(p)) for p in locations.split(os.pathsep) if p)


def warnings_of(header: str | None) -> list[str]:
    """`299 - "text", 299 - "more"` (RFC 7234) -> the texts, their escaped quotes restored."""
    if not header:
        return []
    return [text.replace('\\"', '"') for text in re.findall(r'\d{3} \S+ "((?:[^"\\]|\\.)*)"', header)]


def describe(status: int | None, body: bytes | str | None, method: str, path: str) -> str:
    try:
        message = json.loads(body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    if not message:
        raw = body.decode(errors="replace") if isinstance(body, bytes) else (body or "")
        message = raw[:200] or "(no message)"
    return f"{method} {path}: {status} {message}"
