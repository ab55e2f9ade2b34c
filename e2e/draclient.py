"""Call a plugin's DRA socket directly, as the kubelet would (v1 API), for harness-only tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from dra_fake.kubelet.pb.dra.v1 import api_pb2, api_pb2_grpc


def prepare(socket: Path, claim: dict[str, Any]) -> dict[str, Any]:
    """NodePrepareResources for one claim; returns its single device's fields or raises on error."""
    meta = claim["metadata"]
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = api_pb2_grpc.DRAPluginStub(channel)
        resp = stub.NodePrepareResources(
            api_pb2.NodePrepareResourcesRequest(
                claims=[api_pb2.Claim(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])]
            ),
            timeout=30,
        )
    result = resp.claims[meta["uid"]]
    if result.error:
        raise AssertionError(f"prepare failed: {result.error}")
    [device] = result.devices
    return {
        "request_names": list(device.request_names),
        "pool_name": device.pool_name,
        "device_name": device.device_name,
        "cdi_device_ids": list(device.cdi_device_ids),
    }


def unprepare(socket: Path, claim: dict[str, Any]) -> str:
    """NodeUnprepareResources for one claim; returns its error ("" on success)."""
    meta = claim["metadata"]
    with grpc.insecure_channel(f"unix://{socket}") as channel:
        stub = api_pb2_grpc.DRAPluginStub(channel)
        resp = stub.NodeUnprepareResources(
            api_pb2.NodeUnprepareResourcesRequest(
                claims=[api_pb2.Claim(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])]
            ),
            timeout=30,
        )
    return str(resp.claims[meta["uid"]].error)
