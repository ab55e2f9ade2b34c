"""yamlio.dump_block writes exactly what PyYAML writes, or declines."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_fake.core import cdi, yamlio
from tests.trialswitch import Without

# Words near the edges of PyYAML's plain-scalar rules: indicators, `: `, ` #`, spaces, numbers,
# booleans, dates, non-ASCII, line breaks, long values that PyYAML folds.
WORDS = st.one_of(
    st.text(alphabet="aZ09_/.=:,-#@ '\"~\n\t%&*!|>?[]{}é", max_size=12),
    st.sampled_from(
        [
            "true",
            "no",
            "on",
            "~",
            "null",
            "8080",
            "0x1f",
            "1e3",
            "2026-12-01",
            "0.5.0",
            "a: b",
            "a #b",
            "-a",
            "- a",
            "---",
            "...",
            "k8s.gpu.nvidia.com/claim",
            "NVIDIA H100 80GB HBM3",
            "=",
            "<<",
        ]
    ),
    st.builds(lambda w, n: " ".join([w] * n), st.sampled_from(["word", "/a/long/path"]), st.integers(1, 30)),
)
SCALARS = st.one_of(WORDS, st.integers(-(2**40), 2**40), st.booleans(), st.none(), st.floats(allow_nan=False))
KEYS = st.one_of(st.sampled_from(["name", "env", "hostPath", "options", "a", "1", "yes"]), WORDS)
DOCS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=30,
)


# Documents the direct path should mostly take: words of the characters it allows (and sometimes
# one that reads back as a number, has `: ` or is folded past the width), numbers, booleans,
# non-empty containers.
NEAR_PLAIN = st.one_of(
    st.from_regex(r"[A-Za-z0-9_/][A-Za-z0-9_./=,+@()~ :-]{0,40}", fullmatch=True),
    st.integers(-(2**40), 2**40),
    st.booleans(),
)
NEAR_PLAIN_DOCS = st.recursive(
    NEAR_PLAIN,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=4),
        st.dictionaries(
            st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,10}", fullmatch=True), inner, min_size=1, max_size=4
        ),
    ),
    max_leaves=30,
)


def pyyaml(doc: Any, dumper: Any) -> str:
    return str(yaml.dump(doc, Dumper=dumper, sort_keys=False, default_flow_style=False, explicit_start=True))


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.dictionaries(KEYS, DOCS, max_size=5),
        st.dictionaries(st.sampled_from(["cdiVersion", "kind", "devices"]), NEAR_PLAIN_DOCS, min_size=1),
    )
)
def test_dump_block_is_pyyaml_or_declines(doc: dict[str, Any]) -> None:
    text = yamlio.dump_block(doc)
    if text is not None:
        assert text == pyyaml(doc, yaml.SafeDumper) == pyyaml(doc, yamlio.DUMPER)
        assert yaml.safe_load(text) == doc
    assert yamlio.dump(doc) == pyyaml(doc, yamlio.DUMPER)  # as before the direct path existed


def test_a_claim_spec_takes_the_direct_path() -> None:
    """The specs a prepare writes are the case the direct path is for (it does not decline them)."""
    uid = "1a111111-1111-1111-1111-111111111111"
    mount = {"containerPath": "/usr/bin/nvidia-smi", "options": ["ro", "nosuid", "nodev", "rbind"]}
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "k8s.gpu.nvidia.com/claim",
        "devices": [
            {
                "name": f"{uid}-gpu-0",
                "containerEdits": {
                    "env": ["DRA_FAKE_GPU_0_PRODUCT_NAME=NVIDIA H100 80GB HBM3", "X_PCI_BUS_ID=0000:18:00.0"],
                    "deviceNodes": [
                        {
                            "path": "/dev/nvidia0",
                            "type": "c",
                            "major": 195,
                            "minor": 0,
                            "fileMode": 438,
                            "permissions": "rw",
                        }
                    ],
                    "mounts": [{"hostPath": "/var/lib/kubelet/plugins/gpu.nvidia.com/nvidia-smi/x", **mount}],
                },
            }
        ],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void", f"DRA_FAKE_CLAIM_UID={uid}"]},
    }
    text = yamlio.dump_block(spec)
    assert text is not None and text == pyyaml(spec, yaml.SafeDumper)
    assert cdi.render_spec(spec) == text.encode()


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["env", "mounts", "a"]), NEAR_PLAIN_DOCS, min_size=1), st.integers(0, 3)
)
def test_a_registered_mapping_is_rendered_once_and_the_same(edits: dict[str, Any], depth: int) -> None:
    """FRAGMENTS: a mapping registered as never changing again is written from its first
    rendering at each indent, byte for byte what PyYAML writes; at another indent it is rendered
    for that indent."""
    kept, yamlio.FRAGMENTS = yamlio.FRAGMENTS, yamlio.Fragments(limit=8)
    try:
        yamlio.FRAGMENTS.register(edits)
        doc: dict[str, Any] = {"containerEdits": edits}
        for n in range(depth):
            doc = {f"k{n}": doc}
        expected = pyyaml(doc, yamlio.DUMPER)
        first = yamlio.dump(doc)
        texts = yamlio.FRAGMENTS.texts(edits)
        assert first == expected and texts is not None
        if yamlio.dump_block(doc) is not None:  # the direct path kept the text of this indent
            assert list(texts) == [2 * (depth + 1)]
            texts[2 * (depth + 1)] = "# from the fragment\n"  # a second rendering reads it back
            assert "# from the fragment" in yamlio.dump(doc)
            deeper = {"one": {"more": doc}}  # the mapping two levels further in
            assert yamlio.dump(deeper) == pyyaml(deeper, yamlio.DUMPER)
    finally:
        yamlio.FRAGMENTS = kept


def test_fragments_forget_everything_past_their_limit() -> None:
    fragments = yamlio.Fragments(limit=2)
    a, b, c = {"a": 1}, {"b": 2}, {"c": 3}
    for m in (a, b):
        fragments.register(m)
    assert fragments.texts(a) == {} and fragments.texts(b) == {}
    fragments.register(c)
    assert fragments.texts(a) is None and fragments.texts(b) is None and fragments.texts(c) == {}
    assert fragments.texts({"c": 3}) is None  # an equal mapping is not the registered one


@pytest.mark.parametrize("off", [False, True])
def test_without_yamlwriter_cdi_specs_go_through_pyyaml(without: Without, off: bool) -> None:
    """DRA_FAKE_WITHOUT=yamlwriter (dra_fake.core.trials): PyYAML's dumper, not dump_block."""
    without("yamlwriter" if off else "")
    doc = {"cdiVersion": "0.5.0", "devices": [{"name": "a", "containerEdits": {"env": ["X=1"]}}]}
    with mock.patch.object(yamlio, "dump_block", wraps=yamlio.dump_block) as direct:
        text = yamlio.dump(doc)
    assert text == yamlio.dump_pyyaml(doc)
    assert direct.called is not off
