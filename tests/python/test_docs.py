"""The documentation cannot rot: the site builds with `mkdocs build --strict` (no broken link or
anchor), every Python block of the docs and the README runs on the CPU plugin, the README's
links resolve, every environment variable the code reads is documented, and
`python -m torch_tpu docs` answers known questions with citations that exist.

A block that cannot run here (several processes, a server, a model download, a GPU) is marked
on the line before its fence with `<!-- docs-test: skip (the reason) -->` and reported skipped.
The blocks of one page run in order in one process, sharing their names, as a reader runs them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from torch_tpu import docs as docs_search

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
SKIP = re.compile(r"^<!-- docs-test: skip \((?P<reason>[^)]+)\) -->$")
FENCE = re.compile(r"^```(?P<lang>\S*)")


@dataclass
class Block:
    page: str
    line: int  # of the fence, 1-based
    lang: str
    source: str
    skip: str | None  # the reason, for a block marked to skip


def pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def name_of(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, with their skip markers."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i].strip())
        if fence is None:
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][indent:])
            i += 1
        previous = lines[start - 1].strip() if start > 0 else ""
        marker = SKIP.match(previous)
        found.append(
            Block(
                name_of(path),
                start + 1,
                fence.group("lang"),
                "\n".join(body) + "\n",
                marker.group("reason") if marker else None,
            )
        )
        i += 1
    return found


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang in ("python", "py")]


PAGES_WITH_PYTHON = [p for p in pages() if python_blocks(p)]

# Runs each block in one namespace; names the failing block by page and line.
RUNNER = """
import json, sys, traceback
namespace = {"__name__": "__main__"}
for label, source in json.loads(sys.stdin.read()):
    try:
        exec(compile(source, label, "exec"), namespace)
    except BaseException:
        print(f"docs-test: the block at {label} failed:", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", PAGES_WITH_PYTHON, ids=name_of)
def test_python_blocks_run(path: Path, tmp_path: Path) -> None:
    found = python_blocks(path)
    runnable = [b for b in found if b.skip is None]
    if not runnable:
        reasons = "; ".join(f"line {b.line}: {b.skip}" for b in found)
        pytest.skip(f"every Python block is marked to skip ({reasons})")
    program = [(f"{b.page}:{b.line}", b.source) for b in runnable]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(program),
        cwd=tmp_path,  # what the blocks write (a trace, a snapshot) stays in the test's folder
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]


def test_skip_markers_name_a_reason_and_precede_a_python_block() -> None:
    for path in pages():
        lines = path.read_text(encoding="utf-8").splitlines()
        in_code = False
        for number, line in enumerate(lines, 1):
            if line.strip().startswith("```"):
                in_code = not in_code
            if in_code or "docs-test:" not in line:  # a marker shown in a block is an example
                continue
            assert SKIP.match(line.strip()), f"{name_of(path)}:{number}: malformed marker {line!r}"
            following = lines[number].strip() if number < len(lines) else ""
            assert following in ("```python", "```py"), (
                f"{name_of(path)}:{number}: a skip marker must sit right before a Python block"
            )


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    first_block = blocks(README)[0]
    assert first_block.lang == "bash"
    assert "bash scripts/demo.sh" in first_block.source
    assert "bash scripts/test.sh" in first_block.source


def anchors_of(path: Path) -> set[str]:
    """The anchors MkDocs gives the headings of a page (as the docs search computes them)."""
    return {s.anchor for s in docs_search._split_page(path.parent, path)}


def test_readme_links_point_at_pages_and_anchors_that_exist() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        path = (ROOT / target) if target else README
        assert path.exists(), f"README links to {link}, which does not exist"
        if anchor:
            assert anchor in anchors_of(path), f"README links to {link}: no such section"


def environment_variables_in_code() -> set[str]:
    """Every TORCH_TPU_*/TPU_* name the package, its build, set-up, recipes and test plugins
    read or set: quoted names in the sources, ${NAME} in the shell scripts."""
    names: set[str] = set()
    quoted = re.compile(r"[\"']((?:TORCH_TPU|TPU)_[A-Z0-9_]*[A-Z0-9])[\"']")
    sources = [ROOT / "setup.py", ROOT / "CMakeLists.txt"]
    for folder, pattern in (
        ("torch_tpu", "*.py"),
        ("csrc", "*.cc"),
        ("csrc", "*.h"),
        ("recipes", "*.py"),
        ("tests/cpp", "*.cc"),
        ("tests/plugins", "*.cc"),
    ):
        sources += sorted((ROOT / folder).rglob(pattern))
    for source in sources:
        names |= set(quoted.findall(source.read_text(encoding="utf-8")))
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        text = script.read_text(encoding="utf-8")
        names |= set(re.findall(r"\$\{?((?:TORCH_TPU|TPU)_[A-Z0-9_]+)", text))
    return names


def test_every_environment_variable_is_documented() -> None:
    documented = (DOCS / "guide" / "environment.md").read_text(encoding="utf-8")
    names = environment_variables_in_code()
    assert "TORCH_TPU_PJRT_PLUGIN" in names and "TPU_DEFER_AND_FUSE" in names
    missing = sorted(n for n in names if f"`{n}" not in documented)
    assert not missing, f"docs/guide/environment.md does not name {missing}"


# (question, the citation that must be among the first answers, how many answers to look at)
KNOWN_ANSWERS = [
    (
        "how do I keep shapes from recompiling",
        "guide/compile.md#keeping-shapes-from-recompiling",
        1,
    ),
    ("where is the compile cache folder", "guide/compile.md#the-persistent-compile-cache", 2),
    (
        "IndexError index out of range",
        "guide/errors.md#torch_tpu-aten-was-given-an-index-out-of-range",
        2,
    ),
    (
        "run a jax function as a torch op",
        "guide/kernels.md#custom-kernels-jax-and-pallas-functions-as-ops",
        1,
    ),
    ("which plugin is loaded", "guide/installing.md#choosing-a-plugin", 3),
    ("profile a training step and open it in tensorboard", "guide/profiling.md#profiling", 1),
]


@pytest.mark.parametrize(
    "question,citation,within", KNOWN_ANSWERS, ids=[q for q, *_ in KNOWN_ANSWERS]
)
def test_known_questions_cite_the_right_section(question: str, citation: str, within: int) -> None:
    answers = docs_search.search(question, limit=within)
    cited = [a.section.citation for a in answers]
    assert citation in cited, f"{question!r}: {cited}"


def test_every_citation_is_a_section_of_an_existing_page() -> None:
    sections = docs_search.sections(DOCS)
    assert len(sections) > 50
    for section in sections:
        page = DOCS / section.page
        assert page.is_file()
        assert section.anchor in anchors_of(page)
    # Anchors are unique within a page, as the site's are.
    citations = [s.citation for s in sections]
    assert len(citations) == len(set(citations))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch_tpu", "docs", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_cli_prints_passages_with_citations() -> None:
    proc = run_cli("how do I keep shapes from recompiling")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("[1] guide/compile.md#keeping-shapes-from-recompiling")
    assert "bucket" in proc.stdout


def test_cli_json_for_agents() -> None:
    proc = run_cli("--json", "-n", "2", "what does TORCH_TPU_DONATE do")
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    assert document["question"] == "what does TORCH_TPU_DONATE do"
    assert Path(document["docs"]).is_dir()
    assert len(document["answers"]) == 2
    for answer in document["answers"]:
        assert set(answer) == {"citation", "page", "anchor", "title", "url", "score", "passage"}
        assert answer["citation"] == f"{answer['page']}#{answer['anchor']}"
        assert answer["url"].endswith(f"/#{answer['anchor']}") or answer["url"].startswith("#")
        assert answer["score"] > 0 and answer["passage"]
    assert any("TORCH_TPU_DONATE" in a["passage"] for a in document["answers"])


def test_cli_without_an_answer_exits_1() -> None:
    proc = run_cli("--json", "zzzqqq xyzzy")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["answers"] == []


@pytest.mark.timeout(300)
def test_the_site_builds_strictly_and_citations_are_its_anchors(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra: bash scripts/setup.sh docs")
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for section in docs_search.sections(DOCS):
        html = site / section.url.partition("#")[0] / "index.html"
        ids = set(re.findall(r'id="([^"]+)"', html.read_text(encoding="utf-8")))
        assert section.anchor in ids, f"{section.citation}: no such anchor in {html}"
    # The API pages hold the docstrings mkdocstrings found.
    api = (site / "api" / "torch_tpu_device" / "index.html").read_text(encoding="utf-8")
    assert "torch_tpu.device_module.synchronize" in api


def test_optional_pages_join_the_nav_only_when_they_exist(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import mkdocs_hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    (tmp_path / "guide").mkdir()
    nav = [{"User guide": [{"Profiling": "guide/profiling.md"}, {"Errors": "guide/errors.md"}]}]
    config = {"docs_dir": str(tmp_path), "nav": nav}
    assert mkdocs_hooks.on_config(config)["nav"][0]["User guide"] == nav[0]["User guide"]
    assert len(nav[0]["User guide"]) == 2  # no page, no entry
    (tmp_path / "guide" / "flight_recorder.md").write_text("# Flight recorder\n")
    entries = mkdocs_hooks.on_config(config)["nav"][0]["User guide"]
    assert entries[1] == {"Flight recorder": "guide/flight_recorder.md"}  # after profiling
    assert len(mkdocs_hooks.on_config(config)["nav"][0]["User guide"]) == 3  # added once
