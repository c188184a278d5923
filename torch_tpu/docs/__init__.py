"""Answers from the documentation, offline: ``python -m torch_tpu docs QUESTION``.

The pages of the documentation site (``docs/**/*.md`` in a checkout; ``torch_tpu/docs/pages`` in
an installed wheel) are split into sections at their headings, and a question is ranked against
the sections with BM25. Each answer is cited as ``page#anchor``: the page's path under
``docs/`` and the anchor MkDocs gives the section's heading, so the citation is also a link into
the built site (``guide/compile/#keeping-shapes-from-recompiling``).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = ["Answer", "Section", "docs_root", "search", "sections", "slugify"]

# Pages made of API directives (their text lives in the docstrings), not searched.
SKIPPED_FOLDERS = ("api",)
K1 = 1.5
B = 0.75
# Words too common in questions to tell sections apart.
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it its my of on or so that the"
    " this to what when where which why with you your".split()
)


@dataclass
class Section:
    """One heading of a page and the text under it, up to the next heading."""

    page: str  # "guide/compile.md"
    anchor: str  # "keeping-shapes-from-recompiling"
    title: str  # "torch.compile, the cache and dynamic shapes › Keeping shapes from recompiling"
    text: str
    terms: Counter[str] = field(default_factory=Counter, repr=False)

    @property
    def citation(self) -> str:
        return f"{self.page}#{self.anchor}"

    @property
    def url(self) -> str:
        """The section's address relative to the built site's root."""
        page = self.page.removesuffix(".md")
        page = "" if page == "index" else page.removesuffix("/index") + "/"
        return f"{page}#{self.anchor}"


@dataclass
class Answer:
    section: Section
    score: float
    passage: str

    def to_dict(self) -> dict[str, object]:
        return {
            "citation": self.section.citation,
            "page": self.section.page,
            "anchor": self.section.anchor,
            "title": self.section.title,
            "url": self.section.url,
            "score": round(self.score, 3),
            "passage": self.passage,
        }


def docs_root() -> Path:
    """Where the pages are: shipped in the package, else the checkout's docs/ folder."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "pages", here.parents[1] / "docs"):
        if (candidate / "index.md").is_file():
            return candidate
    raise FileNotFoundError(
        f"torch_tpu: no documentation pages found (looked in {here / 'pages'} and "
        f"{here.parents[1] / 'docs'}); reinstall torch_tpu"
    )


def slugify(heading: str) -> str:
    """The anchor MkDocs (Python-Markdown's toc) gives a heading with this Markdown text."""
    parts = heading.split("`")  # odd parts are code spans, whose text stays as written
    for i in range(0, len(parts), 2):
        linked = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", parts[i])  # links keep their text
        parts[i] = re.sub(r"<[^>]+>", "", linked)  # inline HTML leaves no text
    text = "".join(parts)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _stem(word: str) -> str:
    """A crude suffix stripper: recompiling, recompiled, recompiles -> recompil."""
    for suffix in ("ing", "ed", "es", "s", "e"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def terms(text: str) -> list[str]:
    """Lower-cased word stems; an identifier (TORCH_TPU_CACHE_DIR) both whole and split at
    `_`, so that its exact name ranks first and its words still match."""
    text = text.lower()
    words = [_stem(w) for w in re.findall(r"[a-z0-9]+", text) if w not in STOPWORDS]
    return words + re.findall(r"[a-z0-9]+(?:_[a-z0-9]+)+", text)


_HEADING = re.compile(r"^(#{1,4})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _split_page(root: Path, path: Path) -> list[Section]:
    page = path.relative_to(root).as_posix()
    found: list[Section] = []
    used: Counter[str] = Counter()
    titles: list[str] = []  # the heading path: page title, section, subsection
    lines: list[str] = []
    current: tuple[str, str] | None = None
    in_code = False

    def close() -> None:
        if current is not None:
            anchor, title = current
            found.append(Section(page, anchor, title, "\n".join(lines).strip()))

    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_code = not in_code
        heading = None if in_code else _HEADING.match(line)
        if heading is None:
            lines.append(line)
            continue
        close()
        level, text = len(heading.group(1)), heading.group(2)
        base = slugify(text)
        # Python-Markdown's toc makes repeated anchors unique with _1, _2, ...
        anchor = base if used[base] == 0 else f"{base}_{used[base]}"
        used[base] += 1
        titles[level - 1 :] = [text.replace("`", "")]
        current, lines = (anchor, " › ".join(titles)), []
    close()
    return found


@lru_cache(maxsize=4)
def sections(root: Path | None = None) -> tuple[Section, ...]:
    """Every section of every page under `root` (default: docs_root())."""
    root = root or docs_root()
    found: list[Section] = []
    for path in sorted(root.rglob("*.md")):
        if path.relative_to(root).parts[0] in SKIPPED_FOLDERS:
            continue
        for section in _split_page(root, path):
            # The heading path counts three times: a question usually names what a heading says.
            section.terms = Counter(terms(section.text) + 3 * terms(section.title))
            if section.text or section.title:
                found.append(section)
    return tuple(found)


def _units(paragraph: str) -> list[tuple[str, str]]:
    """A paragraph as (prefix, text) units to choose from: each row of a table, with the table's
    header as its prefix; otherwise the whole paragraph."""
    lines = paragraph.splitlines()
    if len(lines) > 2 and all(line.lstrip().startswith("|") for line in lines):
        header = "\n".join(lines[:2]) + "\n"
        return [(header, row) for row in lines[2:]]
    if lines[0].startswith(("- ", "* ", "1. ")):  # a list: each item, with its wrapped lines
        items = re.split(r"\n(?=(?:- |\* |\d+\. ))", paragraph)
        return [("", item) for item in items]
    return [("", paragraph)]


def _passage(text: str, weights: dict[str, float], limit: int = 900) -> str:
    """What of `text` answers the query best: the table rows, list item or paragraph (a code
    block counts as one) holding the weightiest query terms, after the section's short first
    paragraph; a long paragraph is cut to the sentences around its best one, a short one is
    followed by the next while there is room."""

    def score(unit: str) -> float:
        return sum(weights.get(term, 0.0) for term in set(terms(unit)))

    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    if not paragraphs:
        return ""
    units = [(i, prefix, unit) for i, p in enumerate(paragraphs) for prefix, unit in _units(p)]
    scores = [score(unit) for _, _, unit in units]
    best = max(range(len(units)), key=lambda u: (scores[u], -u))
    index, prefix, unit = units[best]
    lead = paragraphs[0]
    if index > 0 and len(lead) < 400 and not lead.startswith(("|", "```", "<")):
        # A section's first paragraph usually says what the section is about.
        return lead + "\n\n" + _passage(text[text.index(paragraphs[index]) :], weights, limit)
    if prefix:  # table rows: the header and the rows that score as well as the best, up to 3
        rows = [
            u for u, s in zip(units, scores, strict=True) if u[0] == index and s >= scores[best]
        ]
        return prefix + "\n".join(row for _, _, row in rows[:3])
    if len(unit) > limit:
        sentences = re.split(r"(?<=\.)\s+(?=[A-Z`(*])", unit)
        ranked = [score(s) for s in sentences]
        first = max(range(len(sentences)), key=lambda s: (ranked[s], -s))
        if first > 0 and len(sentences[first - 1]) + len(sentences[first]) < limit:
            first -= 1  # the sentence before gives the best one its context
        chosen, last = sentences[first], first + 1
        while last < len(sentences) and len(chosen) + len(sentences[last]) < limit:
            chosen += " " + sentences[last]
            last += 1
        ellipsis = "... " if first > 0 else ""
        return ellipsis + chosen + (" ..." if last < len(sentences) else "")
    if index + 1 < len(paragraphs) and len(unit) + len(paragraphs[index + 1]) < limit:
        unit += "\n\n" + paragraphs[index + 1]
    return unit


def search(question: str, limit: int = 3, root: Path | None = None) -> list[Answer]:
    """The `limit` sections that answer `question` best (BM25), best first."""
    corpus = sections(root)
    query = terms(question)
    if not corpus or not query:
        return []
    average = sum(sum(s.terms.values()) for s in corpus) / len(corpus)
    documents = Counter(t for s in corpus for t in s.terms)
    weights = {
        term: math.log(1 + (len(corpus) - documents[term] + 0.5) / (documents[term] + 0.5))
        for term in set(query)
    }
    scored: list[tuple[float, Section]] = []
    for section in corpus:
        length = sum(section.terms.values())
        score = 0.0
        for term in set(query):
            frequency = section.terms.get(term, 0)
            if frequency == 0:
                continue
            score += (
                weights[term]
                * frequency
                * (K1 + 1)
                / (frequency + K1 * (1 - B + B * length / average))
            )
        if score > 0:
            scored.append((score, section))
    scored.sort(key=lambda item: -item[0])
    return [Answer(s, score, _passage(s.text, weights)) for score, s in scored[:limit]]
