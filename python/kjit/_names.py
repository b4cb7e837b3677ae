"""The names the ops' string arguments take, as the C++ name tables spell them (kjit/names.hpp
and the family declarations, exported by kjit._C): the Python side writes none of them, so a
value added in C++ is accepted, exported and documented here with no edit."""
from __future__ import annotations

from typing import Iterable


def alternatives(names: Iterable[str], sep: str = " | ") -> str:
    """'"a" | "b" | "c"': the names quoted, for a docstring or a message."""
    return sep.join(f'"{n}"' for n in names)


def fill_doc(doc, **tables):
    """`doc` with each {name} replaced by the alternatives of tables[name]; None under python -OO."""
    return doc.format(**{k: alternatives(v) for k, v in tables.items()}) if doc else doc
