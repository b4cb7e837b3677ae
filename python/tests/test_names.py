"""Guard: an enum value added in C++ is followed everywhere. Each enum a string argument names is
declared in a public header; its names are one C++ table (kjit/names.hpp, or the family
declarations for tiles, granularities and formats), which kjit._C exports as the tuples below.
This checks, against the headers in the source tree, that every enumerator has its name (in
enumerator order), and that the Python side (docstrings, the output allocator's dtype maps) and
the docs that list the values name each one. tests/runtime/names_test.cc checks the C++ side."""
import pathlib
import re

import pytest

import kjit
from kjit import _alloc, _C

ROOT = pathlib.Path(__file__).resolve().parents[2]

# (header, enum, the names kjit exports for it)
TABLES = [
    ("include/kjit/tensor.hpp", "DType", _C.dtypes),
    ("include/kjit/runtime.hpp", "JitMode", kjit.JIT_MODES),
    ("include/kjit/ops/rotary.hpp", "RotaryStyle", kjit.ROTARY_STYLES),
    ("include/kjit/ops/attention.hpp", "AttentionVariant", kjit.attention.VARIANTS),
    ("include/kjit/ops/attention.hpp", "PackGqa", kjit.attention.PACK_GQA),
    ("include/kjit/ops/attention.hpp", "PageLoad", kjit.attention.PAGE_LOADS),
    ("include/kjit/ops/attention.hpp", "DecodeMerge", kjit.attention.DECODE_MERGES),
    ("include/kjit/ops/fp8.hpp", "Granularity", kjit.fp8.GRANULARITIES),
    ("include/kjit/ops/fp8.hpp", "ScaleMode", kjit.fp8.SCALE_MODES),
    ("include/kjit/ops/fp8.hpp", "GemmTile", kjit.fp8.GEMM_TILES),
    ("include/kjit/ops/fp8.hpp", "GemmKernel", kjit.fp8.GEMM_KERNELS),
    ("include/kjit/ops/fp8.hpp", "Recipe", kjit.fp8.RECIPES),
]


def enumerators(header, enum):
    """The enumerators of `enum class <enum>` in `header`, in order (comments dropped)."""
    text = (ROOT / header).read_text()
    m = re.search(r"enum class " + enum + r"\b[^{;]*\{(.*?)\};", text, re.S)
    assert m, f"{header}: no enum class {enum}"
    body = re.sub(r"//[^\n]*", "", m.group(1))
    return [e.split("=")[0].strip() for e in body.split(",") if e.strip()]


@pytest.mark.parametrize("header,enum,names", TABLES, ids=[t[1] for t in TABLES])
def test_every_enumerator_has_its_name_in_order(header, enum, names):
    declared = enumerators(header, enum)
    assert len(declared) == len(names), (
        f"{header}: {enum} declares {declared}, its name table gives {names}: add the new value's "
        f"name to its table (kjit/names.hpp rows beside the enum, or its family declaration)")
    for enumerator, name in zip(declared, names):
        # kMmaSync is "mma", kDynamicTensor "dynamic_tensor", k128x64 "128x64": the name, without
        # underscores, begins the enumerator after its k.
        assert enumerator[1:].lower().startswith(name.replace("_", "").lower()), (
            f"{header}: {enum}::{enumerator} is named '{name}': the table's rows are out of enumerator order")


def test_the_docstrings_list_every_name():
    docs = {
        kjit: [kjit.JIT_MODES, kjit.ROTARY_STYLES],
        kjit.attention: [kjit.attention.VARIANTS, kjit.attention.PACK_GQA, kjit.attention.PAGE_LOADS,
                         kjit.attention.DECODE_MERGES],
        kjit.fp8: [kjit.fp8.FORMATS, kjit.fp8.GRANULARITIES, kjit.fp8.SCALE_MODES, kjit.fp8.GEMM_KERNELS,
                   kjit.fp8.GEMM_TILES, kjit.fp8.RECIPES],
    }
    for module, tables in docs.items():
        if module.__doc__ is None:  # python -OO
            continue
        for names in tables:
            for name in names:
                assert f'"{name}"' in module.__doc__, f"{module.__name__}'s docstring does not list {name}"
    # The operating functions describe each mode in prose: a new mode needs its sentence.
    for name in kjit.JIT_MODES:
        assert f'"{name}"' in kjit.jit_mode.__doc__, f"kjit.jit_mode's docstring does not name {name}"
        if name != kjit.JIT_MODES[0]:
            assert f'"{name}"' in kjit.freeze.__doc__, f"kjit.freeze's docstring does not describe {name}"


def test_the_output_allocator_maps_every_dtype():
    assert set(_alloc._WIDTH_STANDIN) == set(_C.dtypes), "kjit/_alloc.py: a dtype without a same-width stand-in"


README = (ROOT / "README.md").read_text().splitlines()


def readme_row(variable):
    """The environment table's row of `variable`: `| `NAME` | values and meaning |`."""
    rows = [line for line in README if line.startswith(f"| `{variable}` |") and line.count("|") == 3]
    assert len(rows) == 1, f"README.md: one row for {variable} in the environment table"
    return rows[0]


def test_the_docs_list_every_name():
    jit = readme_row("KJIT_JIT")
    for name in kjit.JIT_MODES:
        assert f"`{name}`" in jit, f"README.md's KJIT_JIT row does not name {name}"
    # The deployment table compares the modes: one row each.
    at = README.index("| `KJIT_JIT` | a miss | choose it when |")
    rows = README[at + 2:README.index("", at)]
    for name in kjit.JIT_MODES:
        assert any(f"`{name}`" in row.split("|")[1] for row in rows), \
            f"README.md's table of what a miss does per KJIT_JIT has no row for {name}"
    variant = readme_row("KJIT_ATTN_VARIANT")
    for name in kjit.attention.VARIANTS:
        assert f"`{name}`" in variant, f"README.md's KJIT_ATTN_VARIANT row does not name {name}"
    # GemmTile's doc comment says which kernel runs each tile.
    header = (ROOT / "include/kjit/ops/fp8.hpp").read_text()
    doc = header[:header.index("enum class GemmTile")].rsplit("\n\n", 1)[1]
    for name in kjit.fp8.GEMM_TILES[1:]:
        assert re.search(rf"\bk{name}\b", doc), f"include/kjit/ops/fp8.hpp: GemmTile's comment does not place k{name}"


def test_the_families_declare_the_same_values():
    assert kjit.fp8.GEMM_TILES[1:] == tuple(_C.family_values("fp8.gemm", "tile"))
    assert kjit.fp8.GRANULARITIES == tuple(_C.family_values("fp8.quantize", "granularity"))
    assert kjit.fp8.FORMATS == tuple(_C.family_values("fp8.quantize", "fmt"))
    assert kjit.fp8.GEMM_KERNELS[1:] == tuple(_C.family_values("fp8.gemm", "impl"))
    assert kjit.ROTARY_STYLES == tuple(_C.family_values("rotary", "style"))
    for family in ("attention.decode", "attention.paged_decode"):
        assert kjit.attention.DECODE_MERGES[1:] == tuple(_C.family_values(family, "merge"))
