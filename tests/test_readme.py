"""The README keeps its promises: every python snippet runs, every link resolves.

Each ```python block of README.md runs as its own fresh interpreter (a newcomer
pastes it whole), warnings as errors. Every relative link of README.md and docs/
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


def run_snippet(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``code`` run in a fresh interpreter in ``cwd``, warnings as errors."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        check=False,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("index", range(len(snippets(README.read_text()))))
def test_readme_snippet_runs(index: int, tmp_path: Path) -> None:
    code = snippets(README.read_text())[index]
    result = run_snippet(code, tmp_path)
    assert result.returncode == 0, f"README snippet {index}:\n{code}\n{result.stderr}"


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
