"""Code and docs point at docs/ for the facts they rely on: every such pointer must resolve."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# docs/reference/gpu-profiles.md#mig-profiles-per-model, and ", #other-anchor" after it.
POINTER = re.compile(r"(?<![\w/.-])(docs/[\w./-]+\.md)((?:#[\w-]+)?(?:,\s*#[\w-]+)*)")


def slug(heading: str) -> str:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    found = set()
    in_code = False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#+\s+(.*)", line)):
            found.add(slug(m.group(1)))
    return found


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    keep = (".py", ".md", ".yaml", ".proto", ".sh", ".go", ".tpl", "Makefile")
    return [REPO / n for n in names.stdout.splitlines() if n.endswith(keep) and (REPO / n).is_file()]


def test_every_docs_pointer_names_an_existing_file_and_heading() -> None:
    cache: dict[Path, set[str]] = {}
    broken = []
    checked = 0
    for path in tracked_text_files():
        for m in POINTER.finditer(path.read_text(errors="replace")):
            doc = REPO / m.group(1)
            where = f"{path.relative_to(REPO)}: {m.group(0)}"
            if not doc.is_file():
                broken.append(f"{where} (no such file)")
                continue
            for anchor in re.findall(r"#([\w-]+)", m.group(2)):
                checked += 1
                if anchor not in cache.setdefault(doc, anchors(doc)):
                    broken.append(f"{where} (no heading #{anchor})")
    assert checked > 20, "the pointer pattern no longer matches what the code writes"
    assert not broken, "\n".join(broken)
