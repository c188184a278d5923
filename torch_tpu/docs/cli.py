"""``python -m torch_tpu docs QUESTION [-n N] [--json]``: the documentation's best passages for
a question, each with its ``page#section`` citation. Offline; exits 1 when nothing matches."""

from __future__ import annotations

import argparse
import json
import sys

from . import docs_root, search


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torch_tpu docs",
        description="Search torch_tpu's documentation (installed with it) for a question.",
    )
    parser.add_argument("question", nargs="+", help="the question, in words")
    parser.add_argument("-n", "--results", type=int, default=3, help="passages to print")
    parser.add_argument("--json", action="store_true", help="print the answers as JSON")
    options = parser.parse_args(argv)
    question = " ".join(options.question)
    try:
        root = docs_root()
    except FileNotFoundError as error:
        print(error, file=sys.stderr)
        return 2
    answers = search(question, max(options.results, 1), root)
    if options.json:
        document = {
            "question": question,
            "docs": str(root),
            "answers": [answer.to_dict() for answer in answers],
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
    elif not answers:
        print(f"docs: nothing in the documentation matches {question!r}")
    for number, answer in enumerate([] if options.json else answers, 1):
        print(f"[{number}] {answer.section.citation}  ({answer.section.title})")
        print("\n".join("    " + line for line in answer.passage.splitlines()))
        print()
    return 0 if answers else 1
