"""charts/dra-fake/README.md is what hack/chartdoc.py generates from values.yaml and
values.schema.json (make generate): the values table is never written twice."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import yaml

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "charts" / "dra-fake"


def chartdoc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chartdoc", REPO / "hack" / "chartdoc.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["chartdoc"] = module
    spec.loader.exec_module(module)
    return module


def leaves(values: dict[str, object], prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out += leaves(value, f"{prefix}{key}.")  # type: ignore[arg-type]
        else:
            out.append(f"{prefix}{key}")
    return out


def test_the_committed_chart_readme_is_generated() -> None:
    assert (CHART / "README.md").read_text() == chartdoc().render(), "make generate"


def test_every_value_is_in_the_table_and_the_defaults_reviewed_are_shown() -> None:
    text = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    # a map the schema does not describe key by key (resources, securityContext) is one row
    rows = {line.split("`")[1] for line in text.splitlines() if line.startswith("| `")}
    missing = [p for p in leaves(values) if p not in rows and not any(p.startswith(f"{r}.") for r in rows)]
    assert missing == []
    assert '| `kubeletPlugin.cpuAffinity` | `"one"` \\| `"inherit"` | `"inherit"` |' in text


def test_comments_above_a_key_and_after_its_value_describe_it() -> None:
    text = """# The GPUs.
# Two lines.
inventory:
  profile: h100   # a profile id
  # the count
  count: 8
  mig: none  # "a # in quotes" stays
#   - name: example
#     more: example
pools: []
"""
    notes = chartdoc().comments(text)
    assert notes == {
        "inventory": "The GPUs. Two lines.",
        "inventory.profile": "a profile id",
        "inventory.count": "the count",
        "inventory.mig": '"a # in quotes" stays',
        "pools": "`- name: example more: example`",
    }
