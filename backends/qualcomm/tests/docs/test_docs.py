"""The docs as a reader meets them: README.md, docs/*.md and examples/qualcomm/README.md.

- Every relative link resolves to a file of the repository, and a `#anchor` to a heading of the
  page it points to (GitHub's heading slugs).
- Every test a page names (`test_x.py`, `test_x`) exists under backends/qualcomm/tests, so a
  renamed test shows up here.
- Every ```python block preceded by `<!-- runnable: <group> -->` runs as written: the blocks of one
  group on one page, in order, as one script, in a fresh folder, by this interpreter (the venv's
  python) in a subprocess; it must exit 0 and print what the page promises (EXPECTED).

Standard library only (plus pytest): no test helper module is imported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest

REPO = Path(__file__).resolve().parents[4]
TESTS = REPO / "backends" / "qualcomm" / "tests"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "examples" / "qualcomm" / "README.md"]

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
RUNNABLE = re.compile(r"<!-- runnable: ([\w-]+) -->\n```python\n(.*?)^```", re.S | re.M)
TEST_NAME = re.compile(r"\btest_[A-Za-z0-9_]+(?:\.py)?(?![\w*{])")


def _rel(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def _prose(text: str) -> str:
    """The page without fenced code blocks (links and headings in code are not links)."""
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces -> '-'."""
    text = INLINE_CODE.sub(lambda m: m.group(0)[1:-1], heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set:
    found, seen = set(), {}
    for match in HEADING.finditer(_prose(page.read_text())):
        slug = _slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> List[str]:
    text = INLINE_CODE.sub("", _prose(page.read_text()))
    return [t for t in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_relative_links_resolve(page):
    broken = []
    for target in relative_links(page):
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading '#{anchor}' in {_rel(path)}")
    assert not broken, f"{_rel(page)}: " + "; ".join(broken)


def _test_sources() -> Tuple[set, str]:
    files = {p.name for p in TESTS.rglob("*.py")}
    code = "\n".join(p.read_text() for p in TESTS.rglob("*.py"))
    return files, code


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_named_tests_exist(page):
    files, code = _test_sources()
    names = {n for span in INLINE_CODE.findall(page.read_text()) for n in TEST_NAME.findall(span)}
    missing = sorted(
        n
        for n in names
        if not (
            n in files
            if n.endswith(".py")
            else f"{n}.py" in files or re.search(rf"^\s*(?:def|class) {re.escape(n)}\b", code, re.M)
        )
    )
    assert not missing, f"{_rel(page)} names tests that do not exist: {missing}"


def runnable_groups() -> Dict[Tuple[str, str], str]:
    """(page, group) -> the group's blocks joined into one script, in page order."""
    groups: Dict[Tuple[str, str], List[str]] = {}
    for page in PAGES:
        for group, block in RUNNABLE.findall(page.read_text()):
            groups.setdefault((_rel(page), group), []).append(block)
    return {key: "\n".join(blocks) for key, blocks in groups.items()}


def _at_most(limit: float) -> Callable[[str], None]:
    def check(stdout: str) -> None:
        match = re.search(r"max \|delegate - QDQ model\|: (\S+)", stdout)
        assert match and float(match.group(1)) <= limit, stdout

    return check


def _matches(*patterns: str) -> Callable[[str], None]:
    def check(stdout: str) -> None:
        for pattern in patterns:
            assert re.search(pattern, stdout, re.M), f"{pattern!r} not in:\n{stdout}"

    return check


# What each runnable group promises to print (README: "at most one step of the output's 8-bit
# encoding", 0.0024). Every group listed must exist; groups not listed must exit 0.
EXPECTED: Dict[Tuple[str, str], Callable[[str], None]] = {
    ("README.md", "readme"): _at_most(0.0025),
    ("docs/api.md", "runtime-options"): _matches(r"was never set", r"qnn_runtime_bogus"),
    ("docs/debugging.md", "debugger"): _matches(r"compared (\d+) outputs: \1 pass, 0 fail"),
    ("docs/debugging.md", "inspector-flow"): _matches(r"\[conv2d, batch_norm\]", r"\[relu\]"),
    ("docs/real-qnn.md", "profiling"): _matches(r"type=Graph"),
    ("docs/llm.md", "text-llm-runner"): _matches(
        r"exported forward.pte \(fp16, context 64, AR 1\)", r'"generated_tokens":7\b'
    ),
}
GROUPS = runnable_groups()


def test_every_promised_snippet_is_marked_runnable():
    assert set(EXPECTED) <= set(GROUPS), sorted(set(EXPECTED) - set(GROUPS))


@pytest.mark.parametrize("key", sorted(GROUPS), ids=lambda key: f"{key[0]}:{key[1]}")
def test_runnable_snippets_run_as_written(key, tmp_path):
    script = tmp_path / f"{key[1]}.py"
    script.write_text(GROUPS[key])
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
    )
    assert result.returncode == 0, f"{key[0]} '{key[1]}' exited {result.returncode}:\n{result.stderr[-4000:]}"
    EXPECTED.get(key, lambda stdout: None)(result.stdout)
