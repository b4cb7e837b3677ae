#!/usr/bin/env python3
"""Checks that a rule stated once in the code is not written again as a literal elsewhere.

The paged prefill's wide tile (192 query rows, at head_dim 64 only) is declared once, as
kWideTileRows / kWideTileHeadDim beside paged_tile_rows_fit() in runtime/families/attention.hpp;
every other use names them (C++), or kjit.attention.WIDE_TILE_ROWS / WIDE_TILE_HEAD_DIM (Python).
This scans the code of runtime/, include/, cache/, python/src, python/kjit and tools/ for the
number 192: C++ outside comments (string literals count: a message that spells the rule out is a
second copy), Python as a number token. Comments and docstrings state the contract and may name
it. ALLOWED lists the lines where 192 is another fact. Exit 0 when none is found; otherwise 1,
listing each file:line.
"""
import io
import pathlib
import re
import sys
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDERS = ("runtime", "include", "cache", "python/src", "python/kjit", "tools")
CPP = (".cc", ".hpp", ".h", ".cu", ".cuh")
LITERAL = re.compile(r"\b192\b")
# (path, what the line holds): 192 there is not the wide tile.
ALLOWED = {
    ("runtime/families/attention.hpp", "inline constexpr int kWideTileRows = 192;"),
    ("runtime/families/rotary.hpp", "kRotaryHeadDims"),
    # The FP8 GEMM's wave-fitting tile of 192 weight rows (an N side, not query rows).
    ("runtime/families/fp8.cc", '{"128x192", gemm_tile_code(128, 192), "128, 192"}'),
    ("runtime/families/fp8.cc", '{"64x192", gemm_tile_code(64, 192), "64, 192"}'),
    ("runtime/families/fp8.cc", '"wgmma tiles are 128 or 64 rows by 16, 32, 64, 80, 96, 112, 128, 160, 192, 224 or 256"'),
    ("runtime/ops/fp8/gemm_plan.cc", "t.bn >= 192"),
}


def allowed(rel, line):
    return any(rel == path and what in line for path, what in ALLOWED)


def strip_cpp_comments(text):
    """The text with // and /* */ comments blanked (string and char literals kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def cpp_hits(text):
    for n, line in enumerate(strip_cpp_comments(text).splitlines(), 1):
        if LITERAL.search(line):
            yield n, line


def python_hits(text):
    lines = text.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NUMBER and tok.string == "192":
            yield tok.start[0], lines[tok.start[0] - 1]


def main():
    problems = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or path.suffix not in CPP + (".py",):
                continue
            rel = path.relative_to(ROOT).as_posix()
            text = path.read_text(errors="replace")
            hits = python_hits(text) if path.suffix == ".py" else cpp_hits(text)
            for n, line in hits:
                if not allowed(rel, line):
                    problems.append(f"{rel}:{n}: the wide tile's 192 written out; name kWideTileRows / "
                                    f"paged_tile_rows_fit() (Python: kjit.attention.WIDE_TILE_ROWS): {line.strip()}")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
