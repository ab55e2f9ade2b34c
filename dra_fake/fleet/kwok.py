"""KWOK's controller for fleet nodes (pure): the flags it runs with, and the manifests that run it in
a cluster (`dra-fake fleet-stages --deployment IMAGE`). The local harness starts the same binary as
a process with the same flags (e2e/localcluster/cluster.py); docs/local-cluster.md#kwok-fleets.

It manages only the Nodes labelled dra-fake.dev/fleet, holds no Leases (the fleet renews its nodes'
as a kubelet does; with Leases KWOK would manage only nodes whose Lease it holds) and loads its
Stages from the workload profile's file, no Stage objects: it needs no CRDs.
"""

from __future__ import annotations

import hashlib
from typing import Any

from dra_fake.fleet.core import FLEET_LABEL
from dra_fake.fleet.workload import WorkloadProfile, stages_yaml

NAME = "dra-fake-kwok"
NAMESPACE = "kube-system"  # where KWOK's own manifests put it (--namespace)
CONFIG_DIR = "/etc/kwok"
STAGES_FILE = "stages.yaml"
HEALTH_PORT = 10247  # KWOK's server: /healthz, /readyz
RUN_AS = 65532  # no file or privilege of the node's


def kwok_args(stages: str, kubeconfig: str = "") -> list[str]:
    """KWOK's flags for the fleet nodes: `stages`, the path of its Stages file; `kubeconfig`
    empty: in-cluster (its ServiceAccount)."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-label-selector={FLEET_LABEL}",
        "--node-lease-duration-seconds=0",
        "--cidr=10.0.0.1/16",  # pod IPs (KWOK's default /24 runs out past 254 pods)
        "--v=INFO",
    ]


# What KWOK does with the fleet's nodes and their pods: watch both; write a Node's first Ready
# condition (status); write a pod's status as it starts and finishes; remove a deleted pod
# (its finalizers cleared, then deleted for good); post the Started event.
RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes/status", "pods/status"], "verbs": ["patch", "update"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch", "update", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "update"]},
]


def manifests(profile: WorkloadProfile, image: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """ServiceAccount, ClusterRole and its binding, the Stages ConfigMap and a Deployment running
    KWOK with kwok_args(); the pod restarts when the Stages change (their hash on its template)."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "dra-fake"}
    meta = {"name": NAME, "namespace": namespace, "labels": labels}
    cluster_meta = {"name": NAME, "labels": labels}
    rbac = "rbac.authorization.k8s.io/v1"
    stages = stages_yaml(profile)
    container = {
        "name": "kwok",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": [*kwok_args(f"{CONFIG_DIR}/{STAGES_FILE}"), f"--server-address=0.0.0.0:{HEALTH_PORT}"],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "ports": [{"name": "health", "containerPort": HEALTH_PORT}],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "health"},
            "periodSeconds": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "health"},
            "initialDelaySeconds": 30,
            "periodSeconds": 30,
        },
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        "securityContext": {
            "runAsUser": RUN_AS,
            "runAsGroup": RUN_AS,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [
            {"name": "stages", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": cluster_meta, "rules": RULES},
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": cluster_meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {STAGES_FILE: stages}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,  # two would play every pod twice
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {
                            "dra-fake.dev/stages-sha256": hashlib.sha256(stages.encode()).hexdigest()
                        },
                    },
                    "spec": {
                        "serviceAccountName": NAME,
                        "priorityClassName": "system-cluster-critical",
                        "terminationGracePeriodSeconds": 5,
                        "containers": [container],
                        "volumes": [
                            {"name": "stages", "configMap": {"name": NAME}},
                            {"name": "tmp", "emptyDir": {}},
                        ],
                    },
                },
            },
        },
    ]
