#!/usr/bin/env python3
"""Checks that the repository's docs stay true of the tree they describe:

- no file refers to documents outside the repository (a path up into a `shared` folder beside
  the checkout);
- every repository path that README.md, tests/README.md and docs/*.md name in backticks (`runtime/ops/tuned.hpp`,
  `tools/tune/`) exists. Paths with placeholders (`<op>`, `*`, `{...}`) and build outputs are
  not checked.

Exit 0 when both hold; otherwise 1, listing each file:line and what is wrong.
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOP_FOLDERS = ("cache/", "cmake/", "docs/", "include/", "kernel_sources/", "python/", "runtime/", "tests/",
               "tools/", ".ci/")


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files"], check=True, capture_output=True, text=True).stdout
        return [ROOT / line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts and not p.parts[-2].startswith("build")]


def main():
    problems = []
    outside = "../" + "shared"
    for path in tracked_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if outside in line:
                problems.append(f"{path.relative_to(ROOT)}:{n}: refers outside the repository: {line.strip()}")

    docs = [ROOT / "README.md", ROOT / "tests" / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    for doc in docs:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for span in re.findall(r"`([^`\s]+)`", line):
                name = span.rstrip(".,:;)")
                if not name.startswith(TOP_FOLDERS) or re.search(r"[<>*{}$]|\.\.\.|…", name):
                    continue
                name = name.split(":")[0]  # file:line
                if not (ROOT / name).exists():
                    problems.append(f"{doc.relative_to(ROOT)}:{n}: names {name}, which does not exist")
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s)" if problems else "docs: every named path exists; no outside references")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
