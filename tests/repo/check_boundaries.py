#!/usr/bin/env python3
"""Checks the layering the architecture page states (data flows tools -> include -> runtime -> cache):

- the tools (tools/cli, tools/tune, tools/selftest, tools/bench) include, of kjit's own headers,
  only the public API (<kjit/...>), their own tools/ headers and the parts of runtime/internal/
  (driver.hpp, cache.hpp, ops.hpp, ...: each tool includes those it uses);
- the Python extension (python/src) includes, of kjit's own headers, only the public API, its own
  headers and its one sanctioned internal header, runtime/internal/python.hpp;
- no file outside cache/ names cache::detail (the cache's own internals): the runtime and the
  tools use the non-detail cache API (kjit::cache::read_file, ...).

tools/testing is test support and may include internal headers (it includes only
runtime/internal/ parts today). Exit 0 when both hold; otherwise 1, listing each file:line.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLS = ("tools/cli", "tools/tune", "tools/selftest", "tools/bench")
SOURCES = (".cc", ".hpp", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
INTERNAL = re.compile(r"^runtime/internal/[a-z_]+\.hpp$")
PYTHON_INTERNAL = "runtime/internal/python.hpp"


def sources(folder):
    base = ROOT / folder
    return sorted(p for p in base.rglob("*") if p.is_file() and p.suffix in SOURCES) if base.is_dir() else []


def main():
    problems = []
    for folder in TOOLS:
        for path in sources(folder):
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if m and not (m.group(1).startswith("tools/") or INTERNAL.match(m.group(1))):
                    problems.append(f"{path.relative_to(ROOT)}:{n}: includes {m.group(1)} (tools include the public "
                                    "API, tools/ and runtime/internal/*.hpp only)")
    for path in sources("python/src"):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if m and "/" in m.group(1) and m.group(1) != PYTHON_INTERNAL:
                problems.append(f"{path.relative_to(ROOT)}:{n}: includes {m.group(1)} (python/src includes the public "
                                f"API, its own headers and {PYTHON_INTERNAL} only)")
    for folder in ("runtime", "tools", "python/src", "include"):
        for path in sources(folder):
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if "cache::detail" in line:
                    problems.append(f"{path.relative_to(ROOT)}:{n}: names cache::detail outside cache/")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
