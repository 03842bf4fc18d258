"""The README keeps its promises: every python snippet runs, every link resolves.

Each ```python block of README.md (and of docs/accountable.md) runs as its own
fresh interpreter (a newcomer pastes it whole), warnings as errors. Every relative link of README.md and docs/
names a file that exists and, after ``#``, a heading of that file (GitHub's
anchors).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def snippets(text: str) -> list[str]:
    """The ```python blocks of a markdown text, in order."""
    return [body for lang, body in FENCE.findall(text) if lang == "python"]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a markdown text's headings (fenced code skipped)."""
    seen: dict[str, int] = {}
    for line in FENCE.sub("", text).splitlines():
        if match := re.match(r"#{1,6} (.+)", line):
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            slug = slug.replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            if count:
                seen[f"{slug}-{count}"] = 1
    return set(seen)


def test_anchors_follow_github() -> None:
    text = (
        "# A title\n## 1. A laptop\n### Docker / Compose\n```\n# no\n```\n## A title\n"
    )
    assert anchors(text) == {"a-title", "1-a-laptop", "docker--compose", "a-title-1"}


RUNNABLE = [README, ROOT / "docs" / "accountable.md"]
"""The pages whose ```python blocks run as they stand."""


@pytest.mark.parametrize(
    ("page", "index"),
    [(page, i) for page in RUNNABLE for i in range(len(snippets(page.read_text())))],
    ids=lambda value: value.name if isinstance(value, Path) else str(value),
)
def test_snippet_runs(page: Path, index: int, tmp_path: Path) -> None:
    code = snippets(page.read_text())[index]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, (
        f"{page.name} snippet {index}:\n{code}\n{result.stderr}"
    )


def test_readme_has_snippets() -> None:
    assert len(snippets(README.read_text())) >= 2


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text()
    broken = []
    for target in LINK.findall(FENCE.sub("", text)):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check offline
        file, _, anchor = target.partition("#")
        linked = (page.parent / file).resolve() if file else page
        if not linked.exists():
            broken.append(f"{target} (no file {linked.relative_to(ROOT)})")
        elif anchor and anchor not in anchors(linked.read_text()):
            broken.append(f"{target} (no heading #{anchor} in {linked.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"
