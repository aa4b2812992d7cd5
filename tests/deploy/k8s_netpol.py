"""Who may reach whom under the rendered NetworkPolicies: a small evaluator of the Kubernetes
semantics (ingress only; label selectors; namespaces by their kubernetes.io/metadata.name label),
so tests can ask "does the gateway still reach Serve?" and "is Ray's dashboard closed to others?".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Doc = dict[str, Any]


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str]


def selects(selector: Doc, labels: dict[str, str]) -> bool:
    """A LabelSelector; ``{}`` selects everything."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _peer_admits(peer: Doc, policy_namespace: str, source: Pod) -> bool:
    if "ipBlock" in peer:
        return False  # pod-to-pod questions only
    namespace_labels = {"kubernetes.io/metadata.name": source.namespace}
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], namespace_labels):
            return False
    elif source.namespace != policy_namespace:
        return False
    return selects(peer.get("podSelector", {}), source.labels)


def _rule_admits(rule: Doc, policy_namespace: str, source: Pod, port: int) -> bool:
    ports = rule.get("ports")
    if ports and not any(p.get("port") == port for p in ports):
        return False
    peers = rule.get("from")
    return not peers or any(_peer_admits(p, policy_namespace, source) for p in peers)


def admits(docs: list[Doc], source: Pod, target: Pod, port: int) -> bool:
    """Whether ``source`` may open TCP ``port`` on ``target`` under the NetworkPolicies in docs."""
    policies = [
        d
        for d in docs
        if d.get("kind") == "NetworkPolicy"
        and d["metadata"].get("namespace") == target.namespace
        and selects(d["spec"]["podSelector"], target.labels)
        and "Ingress" in d["spec"].get("policyTypes", ["Ingress"])
    ]
    if not policies:
        return True  # a pod no policy selects is not isolated
    return any(
        _rule_admits(rule, p["metadata"]["namespace"], source, port)
        for p in policies
        for rule in p["spec"].get("ingress", [])
    )
