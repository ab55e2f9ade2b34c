#!/usr/bin/env python3
"""Kubernetes JSON schemas for kubeconform, generated here (they cannot be downloaded).

    hack/chart-schemas.py --kubeconfig K --out DIR [--crds PATH ...]

Source: the running API server's `/openapi/v2` (our local control plane, built from the pinned
Kubernetes release, serving resource.k8s.io v1, v1beta2 and v1beta1), plus the openAPIV3Schema of
every CustomResourceDefinition found in the given files or directories. One standalone, strict file
per kind and version, named as kubeconform's default layout expects
(`{kind}-{group's first label}-{version}.json`, `{kind}-{version}.json` for the core group), so
kubeconform runs with `-schema-location 'DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json' -strict`.
"Strict": objects with declared properties reject unknown ones (like openapi2jsonschema --strict).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from dra_fake.core.kube import get_json, load_kube_client


def fetch_openapi(kubeconfig: Path) -> dict[str, Any]:
    """The server's /openapi/v2, with the kubeconfig's credentials (a token or a client certificate)."""
    return get_json(load_kube_client(str(kubeconfig)), "/openapi/v2")


def file_name(group: str, version: str, kind: str) -> str:
    suffix = f"-{group.split('.')[0].lower()}-{version.lower()}" if group else f"-{version.lower()}"
    return f"{kind.lower()}{suffix}.json"


def strict(node: Any) -> Any:
    """Copy of a schema with int-or-string made explicit and unknown properties rejected."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: strict(v) for k, v in node.items()}
    if out.get("format") == "int-or-string" or out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out.pop("format", None)
        out["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def reachable(defs: dict[str, Any], root: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen[name] = defs[name]
        todo += [r.rsplit("/", 1)[1] for r in _refs(defs[name])]
    return seen


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def from_openapi(doc: dict[str, Any], out: Path) -> int:
    defs = doc["definitions"]
    count = 0
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if name.endswith("List") or gvk["kind"] in ("WatchEvent", "DeleteOptions", "Status"):
                continue
            body = strict({k: v for k, v in schema.items() if not k.startswith("x-kubernetes-group")})
            # apiVersion/kind must name this schema's kind exactly.
            api_version = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            body.setdefault("properties", {})
            body["properties"]["apiVersion"] = {"type": "string", "enum": [api_version]}
            body["properties"]["kind"] = {"type": "string", "enum": [gvk["kind"]]}
            body["required"] = sorted(set(body.get("required", [])) | {"apiVersion", "kind"})
            standalone = {
                "$schema": "http://json-schema.org/draft-07/schema#",
                **body,
                "definitions": {n: strict(d) for n, d in reachable(defs, name).items() if n != name},
            }
            text = json.dumps(standalone, sort_keys=True).replace('"#/definitions/' + name + '"', '"#"')
            (out / file_name(gvk["group"], gvk["version"], gvk["kind"])).write_text(text)
            count += 1
    return count


def from_crds(paths: list[Path], out: Path) -> int:
    files = [f for p in paths for f in (sorted(p.rglob("*.yaml")) if p.is_dir() else [p])]
    count = 0
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            group, kind = spec["group"], spec["names"]["kind"]
            for v in spec["versions"]:
                schema = strict(v.get("schema", {}).get("openAPIV3Schema", {"type": "object"}))
                props = schema.setdefault("properties", {})
                props["apiVersion"] = {"type": "string", "enum": [f"{group}/{v['name']}"]}
                props["kind"] = {"type": "string", "enum": [kind]}
                props["metadata"] = {"type": "object"}
                schema["required"] = sorted(set(schema.get("required", [])) | {"apiVersion", "kind"})
                schema["$schema"] = "http://json-schema.org/draft-07/schema#"
                (out / file_name(group, v["name"], kind)).write_text(json.dumps(schema, sort_keys=True))
                count += 1
    return count


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--crds", type=Path, action="append", default=[])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    n = from_openapi(fetch_openapi(args.kubeconfig), args.out)
    c = from_crds([p for p in args.crds if p.exists()], args.out)
    print(f"chart-schemas: {n} built-in and {c} CRD schemas in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
