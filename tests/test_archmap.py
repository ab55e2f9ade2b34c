"""docs/architecture.md's module map is drawn from the code (hack/archmap.py): it cannot drift."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def archmap() -> ModuleType:
    spec = importlib.util.spec_from_file_location("archmap", REPO / "hack" / "archmap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_module_map_is_what_the_code_draws() -> None:
    m = archmap()
    text = m.DOC.read_text()
    assert text == m.document(text), "the module map is stale: make generate"


def test_the_map_has_every_layer_module_and_import_with_the_contracts_limits() -> None:
    m = archmap()
    drawn = "\n".join(m.mermaid())
    layers = m.layers(m.contracts())
    assert len(layers) == drawn.count("subgraph") >= 4
    for package in (p for layer in layers for p in layer):
        assert f"<b>{package}</b>" in drawn
    # every module of a package is in its box, generated code by its directory only
    assert all(name in drawn for name in m.modules("dra_fake.core")) and "checkpointstore" in drawn
    assert "pb/ (generated)" in drawn and "api_pb2" not in drawn
    # an import that exists, and the one the forbidden contract narrows to the GPU driver's API
    assert "dra_fake_core --> dra_fake_kubelet" in drawn
    assert 'dra_fake_fleet -- "only dra_fake.gpu.api" --> dra_fake_gpu' in drawn
    # nothing upwards: the kubelet layer imports nothing of this project above it
    assert "dra_fake_kubelet -->" not in drawn


def test_the_package_map_describes_every_module_the_map_draws() -> None:
    """The prose beside the drawn map (docs/architecture.md, Package map) names every module: a
    new or moved module gets its line there."""
    m = archmap()
    text = m.DOC.read_text()
    prose = text.split(m.BEGIN)[0] + text.split(m.END)[1]
    missing = [
        f"{package}.{name}"
        for layer in m.layers(m.contracts())
        for package in layer
        for name in (n.split("/")[0] for n in m.modules(package))
        if not re.search(rf"\b{re.escape(name)}\b", prose)
    ]
    assert missing == []
