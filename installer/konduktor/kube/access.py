"""What this identity may do, as the API server's authorizer answers a SelfSubjectAccessReview.

`Permission` is plain data, so the pure checks that name rights (`konduktor.preflight.cluster`) import it without
the Kubernetes client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from konduktor.kube.client import Kube


@dataclass(frozen=True)
class Permission:
    """One verb on one resource, as a SelfSubjectAccessReview asks for it."""

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""

    @property
    def qualified_resource(self) -> str:
        """As kubectl names it: nodes, customresourcedefinitions.apiextensions.k8s.io, pods/log."""
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{resource}.{self.group}" if self.group else resource

    def __str__(self) -> str:
        return f"{self.verb} {self.qualified_resource}"


def may(kube: Kube, permission: Permission, namespace: str | None = None) -> bool:
    """One SelfSubjectAccessReview; a review the server does not answer proves no right."""
    from konduktor.kube.client import ApiError  # only a review needs the client

    try:
        return kube.allowed(permission.verb, permission.resource, permission.group, namespace, permission.subresource)
    except ApiError:
        return False
