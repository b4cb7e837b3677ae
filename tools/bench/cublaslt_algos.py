#!/usr/bin/env python3
"""What cuBLASLt chooses for the FP8 GEMMs of a decode step, asked the way torch._scaled_mm asks.

    python3 tools/bench/cublaslt_algos.py [--json out.json] [--shapes 10240x8192,...] [--m 1,2,4,...]
        [--fast-accum both|0|1] [--top 1] [--workspace-kib N] [--lib PATH] [--header PATH] [--no-torch-check]

The problem: D[M, N] = A[M, K] · W[N, K]ᵀ, e4m3 × e4m3 → bf16, f32 compute, one f32 scale per
tensor, A row-major and W the nn.Linear weight, as bench_fp8_decode.py and bench_layer.py call
torch._scaled_mm(a, w.t(), scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=...).
torch's scaled_gemm (aten/src/ATen/cuda/CUDABlas.cpp, its operands from cublasCommonArgs) hands
cuBLASLt the column-major problem Dᵀ = W · Aᵀ:
  m = N, n = M, k = K; TRANSA = T, TRANSB = N; A = the weight: e4m3, rows K, cols N, ld K; B = the
  activation: e4m3, rows K, cols M, ld K; C and D: bf16, rows N, cols M, ld N (C takes the output's
  type: no bias); compute CUBLAS_COMPUTE_32F, scale type CUDA_R_32F; the A and B scale pointers
  (device f32 scalars); A and B scale modes CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F (torch sets
  them from CUDA 12.8 on; a library without them is noted); CUBLASLT_MATMUL_DESC_FAST_ACCUM =
  use_fast_accum (int8); the preference's MAX_WORKSPACE_BYTES = torch's cuBLASLt workspace; nothing
  else; cublasLtMatmulAlgoGetHeuristic with requestedAlgoCount 1, and the first result runs.
This script builds that descriptor through ctypes against the libcublasLt that torch loaded (found
in /proc/self/maps; --lib overrides), takes the heuristic's first --top results and reads each
algo's configuration with cublasLtMatmulAlgoConfigGetAttribute: algo id, tile, stages, split-K
count, reduction scheme, CTA swizzling, custom option, inner shape, cluster shape. Names come from
the enums of cublasLt.h: the header beside the library (nvidia wheels ship it), else
$CUDA_HOME/include, else /usr/local/cuda/include (--header overrides). A tile is cuBLASLt's C/D
tile, rows × columns = N × M here (weight rows × tokens).

The check against torch (unless --no-torch-check): cuBLASLt's logger is routed to this script and
torch._scaled_mm runs each problem once first; its heuristic query's log line (layouts, compute
descriptor, preference) gives torch's workspace limit, which this script's query then uses (unless
--workspace-kib), and must equal this script's line, pointers aside. Column "torch": "same", or
"DIFFERENT" (both lines in the JSON), or why it could not tell. Without the torch check the
workspace limit is torch's default: CUBLASLT_WORKSPACE_SIZE KiB (default 1024), at most the
cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG; default 32 MiB on sm_90, 8 MiB + 128 KiB elsewhere).

Every library call is checked; a failure prints its status name (cublasLtGetStatusName) and the
problem's row says so; the script goes on with the next problem.
"""
import argparse
import ast
import ctypes
import glob
import json
import os
import re
import sys

# ---- ABI constants (cublasLt.h, cublas_api.h, library_types.h; tests/repo/check_bench_tools.py
# compares them with the installed headers) ----------------------------------------------------------
CUBLAS_COMPUTE_32F = 68
CUDA_R_32F, CUDA_R_16BF, CUDA_R_8F_E4M3 = 0, 14, 28
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F = 0
# cublasLtMatmulDescAttributes_t: name -> (value, ctypes type of the attribute)
DESC_ATTRS = {
    "CUBLASLT_MATMUL_DESC_TRANSA": (3, ctypes.c_int32),
    "CUBLASLT_MATMUL_DESC_TRANSB": (4, ctypes.c_int32),
    "CUBLASLT_MATMUL_DESC_A_SCALE_POINTER": (17, ctypes.c_void_p),
    "CUBLASLT_MATMUL_DESC_B_SCALE_POINTER": (18, ctypes.c_void_p),
    "CUBLASLT_MATMUL_DESC_FAST_ACCUM": (25, ctypes.c_int8),
    "CUBLASLT_MATMUL_DESC_A_SCALE_MODE": (31, ctypes.c_int32),
    "CUBLASLT_MATMUL_DESC_B_SCALE_MODE": (32, ctypes.c_int32),
}
CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1  # uint64
# cublasLtMatmulAlgoConfigAttributes_t: (key, name, signed); the sizes are asked of the library.
CONFIG_ATTRS = (
    ("algo_id", "CUBLASLT_ALGO_CONFIG_ID", 0, True),
    ("tile", "CUBLASLT_ALGO_CONFIG_TILE_ID", 1, False),
    ("splitk", "CUBLASLT_ALGO_CONFIG_SPLITK_NUM", 2, True),
    ("reduction", "CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME", 3, False),
    ("swizzle", "CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING", 4, False),
    ("custom", "CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION", 5, False),
    ("stages", "CUBLASLT_ALGO_CONFIG_STAGES_ID", 6, False),
    ("inner", "CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID", 7, False),
    ("cluster", "CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID", 8, False),
)
# The enum each configuration value is named from, and the prefix dropped from its names.
ENUM_OF = {
    "tile": ("cublasLtMatmulTile_t", "CUBLASLT_MATMUL_TILE_"),
    "stages": ("cublasLtMatmulStages_t", "CUBLASLT_MATMUL_STAGES_"),
    "reduction": ("cublasLtReductionScheme_t", "CUBLASLT_REDUCTION_SCHEME_"),
    "cluster": ("cublasLtClusterShape_t", "CUBLASLT_CLUSTER_SHAPE_"),
    "inner": ("cublasLtMatmulInnerShape_t", "CUBLASLT_MATMUL_INNER_SHAPE_"),
}
STATUS_NAMES = {0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
                7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
                13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
                15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR"}
LOG_MASK_ALL = 1 | 2 | 4 | 8 | 16  # errors, trace, hints, heuristics trace, API trace

SHAPES = [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672), (7168, 2048), (4096, 7168), (28672, 8192)]
M_VALUES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
TORCH_DEFAULT_LT_WORKSPACE_KIB = 1024


# ---- cublasLt.h enums --------------------------------------------------------------------------------

_ENUM_RE = re.compile(r"typedef\s+enum\s*(\w*)\s*\{(.*?)\}\s*(\w+)\s*;", re.S)
_C_INT_RE = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b")
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")


def _strip_c(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def _eval_c_int(expr, consts):
    """The value of an enumerator's initializer (integers, known names, | & << >> + - * ~ and
    parentheses), or None."""
    expr = _C_INT_RE.sub(r"\1", expr.strip())
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return consts[node.id] if node.id in consts else None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            v = ev(node.operand)
            if v is None:
                return None
            return -v if isinstance(node.op, ast.USub) else ~v if isinstance(node.op, ast.Invert) else v
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if a is None or b is None:
                return None
            ops = {ast.BitOr: lambda: a | b, ast.BitAnd: lambda: a & b, ast.LShift: lambda: a << b,
                   ast.RShift: lambda: a >> b, ast.Add: lambda: a + b, ast.Sub: lambda: a - b,
                   ast.Mult: lambda: a * b}
            return ops[type(node.op)]() if type(node.op) in ops else None
        return None

    return ev(tree)


def parse_enums(text, consts=None):
    """{enum name: {enumerator: value}} of every `typedef enum [tag] { ... } name;` in C header
    text (under its tag too); `consts` (updated) resolves names used in initializers."""
    consts = {} if consts is None else consts
    enums = {}
    for m in _ENUM_RE.finditer(_strip_c(text)):
        values, nxt = {}, 0
        for item in m.group(2).split(","):
            item = item.strip()
            if not item:
                continue
            ident, _, expr = item.partition("=")
            ident = ident.strip()
            if not _IDENT_RE.fullmatch(ident):
                nxt = None
                continue
            val = _eval_c_int(expr, consts) if expr else nxt
            if val is not None:
                values[ident] = consts[ident] = val
            nxt = None if val is None else val + 1
        enums[m.group(3)] = values
        if m.group(1):
            enums[m.group(1)] = values
    return enums


def header_version(include_dir):
    """CUBLAS_VER_MAJOR.MINOR.PATCH from cublas_api.h in `include_dir`, or None."""
    try:
        text = open(os.path.join(include_dir, "cublas_api.h")).read()
    except OSError:
        return None
    parts = [re.search(rf"#define\s+CUBLAS_VER_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(p.group(1) for p in parts) if all(parts) else None


def load_header_enums(path):
    """The enums of cublasLt.h at `path`, with cublas_api.h and library_types.h of its folder
    parsed first (for the names its initializers use)."""
    consts, enums = {}, {}
    folder = os.path.dirname(path)
    for name in ("library_types.h", "cublas_api.h"):
        try:
            enums.update(parse_enums(open(os.path.join(folder, name)).read(), consts))
        except OSError:
            pass
    enums.update(parse_enums(open(path).read(), consts))
    return enums


class Names:
    """Configuration values to enum names (the prefix of ENUM_OF dropped): "64x128", "128xAUTO"."""

    def __init__(self, enums):
        self.maps = {}
        for key, (enum, prefix) in ENUM_OF.items():
            rev = {}
            for ident, val in enums.get(enum, {}).items():
                if ident.endswith(("_END", "_MASK")):
                    continue
                rev.setdefault(val, ident[len(prefix):] if ident.startswith(prefix) else ident)
            self.maps[key] = rev

    def __call__(self, key, value):
        if value is None:
            return None
        if key not in self.maps:
            return str(value)
        return self.maps[key].get(value, f"?{value}")


def find_header(lib_path, given=None):
    candidates = [given] if given else []
    if lib_path:
        lib_dir = os.path.dirname(os.path.realpath(lib_path))
        candidates += [os.path.join(lib_dir, "..", "include", "cublasLt.h"),
                       os.path.join(os.path.dirname(lib_path), "..", "include", "cublasLt.h")]
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "include", "cublasLt.h"))
    candidates.append("/usr/local/cuda/include/cublasLt.h")
    for c in candidates:
        if c and os.path.isfile(c):
            return os.path.normpath(c)
    return None


# ---- the library ------------------------------------------------------------------------------------

class Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", Algo), ("workspaceSize", ctypes.c_size_t), ("state", ctypes.c_int),
                ("wavesCount", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


LOGGER_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p)


class LtError(RuntimeError):
    def __init__(self, what, status, name):
        super().__init__(f"{what}: {name} ({status})")
        self.status, self.status_name = status, name


class CublasLt:
    """libcublasLt through ctypes: every call checked (LtError names the status)."""

    def __init__(self, path):
        self.path = path
        lib = self.lib = ctypes.CDLL(path)
        vp, sz, i32, u64, i64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64
        pvp = ctypes.POINTER(vp)
        sigs = {
            "cublasLtGetVersion": ([], sz),
            "cublasLtCreate": ([pvp], i32),
            "cublasLtDestroy": ([vp], i32),
            "cublasLtMatmulDescCreate": ([pvp, i32, i32], i32),
            "cublasLtMatmulDescDestroy": ([vp], i32),
            "cublasLtMatmulDescSetAttribute": ([vp, i32, vp, sz], i32),
            "cublasLtMatmulDescGetAttribute": ([vp, i32, vp, sz, ctypes.POINTER(sz)], i32),
            "cublasLtMatrixLayoutCreate": ([pvp, i32, u64, u64, i64], i32),
            "cublasLtMatrixLayoutDestroy": ([vp], i32),
            "cublasLtMatmulPreferenceCreate": ([pvp], i32),
            "cublasLtMatmulPreferenceDestroy": ([vp], i32),
            "cublasLtMatmulPreferenceSetAttribute": ([vp, i32, vp, sz], i32),
            "cublasLtMatmulAlgoGetHeuristic": ([vp, vp, vp, vp, vp, vp, vp, i32, ctypes.POINTER(HeuristicResult),
                                                ctypes.POINTER(i32)], i32),
            "cublasLtMatmulAlgoConfigGetAttribute": ([ctypes.POINTER(Algo), i32, vp, sz, ctypes.POINTER(sz)], i32),
            "cublasLtLoggerSetCallback": ([LOGGER_CALLBACK], i32),
            "cublasLtLoggerSetMask": ([i32], i32),
            "cublasLtLoggerOpenFile": ([ctypes.c_char_p], i32),
        }
        for name, (args, res) in sigs.items():
            fn = getattr(lib, name)  # AttributeError: a library without it (reported by the caller)
            fn.argtypes, fn.restype = args, res
        self._status_name = getattr(lib, "cublasLtGetStatusName", None)
        if self._status_name is not None:
            self._status_name.argtypes, self._status_name.restype = [i32], ctypes.c_char_p

    def version(self):
        v = self.lib.cublasLtGetVersion()
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"

    def status_name(self, status):
        if self._status_name is not None:
            name = self._status_name(status)
            if name:
                return name.decode(errors="replace")
        return STATUS_NAMES.get(status, "unknown status")

    def check(self, status, what):
        if status != 0:
            raise LtError(what, status, self.status_name(status))

    def create_handle(self):
        h = ctypes.c_void_p()
        self.check(self.lib.cublasLtCreate(ctypes.byref(h)), "cublasLtCreate")
        return h

    def set_desc(self, desc, name, value):
        attr, ctype = DESC_ATTRS[name]
        v = ctype(value)
        self.check(self.lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(v), ctypes.sizeof(v)),
                   f"cublasLtMatmulDescSetAttribute({name})")

    def get_desc(self, desc, name):
        attr, ctype = DESC_ATTRS[name]
        v, written = ctype(), ctypes.c_size_t()
        self.check(self.lib.cublasLtMatmulDescGetAttribute(desc, attr, ctypes.byref(v), ctypes.sizeof(v),
                                                           ctypes.byref(written)),
                   f"cublasLtMatmulDescGetAttribute({name})")
        return v.value

    def algo_config(self, algo):
        """{key: value or None} of CONFIG_ATTRS for `algo` (sizes asked first, any 1-8 bytes read)."""
        out, errors = {}, []
        for key, name, attr, signed in CONFIG_ATTRS:
            size = ctypes.c_size_t(0)
            st = self.lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), attr, None, 0, ctypes.byref(size))
            if st != 0 or not 0 < size.value <= 8:
                out[key] = None
                errors.append(f"{name}: {self.status_name(st) if st else f'size {size.value}'}")
                continue
            buf, written = (ctypes.c_uint8 * size.value)(), ctypes.c_size_t(0)
            st = self.lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), attr, buf, size.value,
                                                               ctypes.byref(written))
            if st != 0:
                out[key] = None
                errors.append(f"{name}: {self.status_name(st)}")
                continue
            out[key] = int.from_bytes(bytes(buf)[:written.value], "little", signed=signed)
        return out, errors


class Logger:
    """cuBLASLt's logger routed to a list (its own file output to /dev/null), on only inside `with`."""

    def __init__(self, lt):
        self.lt, self.messages = lt, []
        self._cb = LOGGER_CALLBACK(self._on)  # kept: the library holds the pointer
        lt.lib.cublasLtLoggerOpenFile(os.devnull.encode())
        lt.check(lt.lib.cublasLtLoggerSetCallback(self._cb), "cublasLtLoggerSetCallback")
        lt.lib.cublasLtLoggerSetMask(0)

    def _on(self, level, function, message):
        self.messages.append((int(level), (function or b"").decode(errors="replace"),
                              (message or b"").decode(errors="replace")))

    def __enter__(self):
        self.messages = []
        self.lt.lib.cublasLtLoggerSetMask(LOG_MASK_ALL)
        return self

    def __exit__(self, *exc):
        self.lt.lib.cublasLtLoggerSetMask(0)
        return False

    def last(self, function):
        lines = [m for lvl, f, m in self.messages if f == function]
        return lines[-1] if lines else None


def normalize_log(line):
    """A logged descriptor with its pointer values and its timestamp prefix removed."""
    return None if line is None else re.sub(r"0[xX][0-9a-fA-F]+", "PTR", line).strip()


def logged_workspace(line):
    m = re.search(r"maxWorkspaceSizeinBytes=(\d+)", line or "")
    return int(m.group(1)) if m else None


class Problem:
    """The descriptors torch._scaled_mm builds for an M × N × K e4m3 GEMM (see the module doc)."""

    def __init__(self, lt, n, k, m, fast_accum, scale_a_ptr, scale_b_ptr, workspace_bytes):
        self.lt, self.notes = lt, []
        self.desc, self.layouts, self.pref = ctypes.c_void_p(), [], ctypes.c_void_p()
        L = lt.lib
        try:
            lt.check(L.cublasLtMatmulDescCreate(ctypes.byref(self.desc), CUBLAS_COMPUTE_32F, CUDA_R_32F),
                     "cublasLtMatmulDescCreate")
            lt.set_desc(self.desc, "CUBLASLT_MATMUL_DESC_TRANSA", CUBLAS_OP_T)
            lt.set_desc(self.desc, "CUBLASLT_MATMUL_DESC_TRANSB", CUBLAS_OP_N)
            lt.set_desc(self.desc, "CUBLASLT_MATMUL_DESC_A_SCALE_POINTER", scale_a_ptr)
            lt.set_desc(self.desc, "CUBLASLT_MATMUL_DESC_B_SCALE_POINTER", scale_b_ptr)
            lt.set_desc(self.desc, "CUBLASLT_MATMUL_DESC_FAST_ACCUM", 1 if fast_accum else 0)
            try:
                lt.set_desc(self.desc, "CUBLASLT_MATMUL_DESC_A_SCALE_MODE", CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
                lt.set_desc(self.desc, "CUBLASLT_MATMUL_DESC_B_SCALE_MODE", CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F)
            except LtError as e:
                self.notes.append(f"no A/B scale modes in this library ({e.status_name})")
            for dtype, rows, cols, ld in ((CUDA_R_8F_E4M3, k, n, k), (CUDA_R_8F_E4M3, k, m, k),
                                          (CUDA_R_16BF, n, m, n), (CUDA_R_16BF, n, m, n)):
                h = ctypes.c_void_p()
                lt.check(L.cublasLtMatrixLayoutCreate(ctypes.byref(h), dtype, rows, cols, ld),
                         "cublasLtMatrixLayoutCreate")
                self.layouts.append(h)
            lt.check(L.cublasLtMatmulPreferenceCreate(ctypes.byref(self.pref)), "cublasLtMatmulPreferenceCreate")
            ws = ctypes.c_uint64(workspace_bytes)
            lt.check(L.cublasLtMatmulPreferenceSetAttribute(self.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            ctypes.byref(ws), ctypes.sizeof(ws)),
                     "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)")
        except BaseException:
            self.close()
            raise

    def heuristic(self, handle, top):
        """The heuristic's first `top` results (state CUBLAS_STATUS_SUCCESS ones only)."""
        results, count = (HeuristicResult * top)(), ctypes.c_int(0)
        a, b, c, d = self.layouts
        self.lt.check(self.lt.lib.cublasLtMatmulAlgoGetHeuristic(handle, self.desc, a, b, c, d, self.pref, top,
                                                                 results, ctypes.byref(count)),
                      "cublasLtMatmulAlgoGetHeuristic")
        return [results[i] for i in range(count.value)]

    def close(self):
        L = self.lt.lib
        for h in self.layouts:
            L.cublasLtMatrixLayoutDestroy(h)
        self.layouts = []
        if self.pref:
            L.cublasLtMatmulPreferenceDestroy(self.pref)
            self.pref = ctypes.c_void_p()
        if self.desc:
            L.cublasLtMatmulDescDestroy(self.desc)
            self.desc = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def torch_default_workspace_bytes(sm90):
    """torch's cuBLASLt workspace limit from the environment (see the module doc)."""
    lt = TORCH_DEFAULT_LT_WORKSPACE_KIB * 1024
    try:
        lt = int(os.environ["CUBLASLT_WORKSPACE_SIZE"]) * 1024
    except (KeyError, ValueError):
        pass
    cublas = 4096 * 8 * 1024 if sm90 else 4096 * 1024 * 2 + 16 * 1024 * 8
    cfg = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    if cfg:
        pairs = re.findall(r":(\d+):(\d+)", cfg)
        if pairs:
            cublas = sum(int(s) * 1024 * int(c) for s, c in pairs)
    return min(lt, cublas)


# ---- locating the library torch uses ------------------------------------------------------------------

def loaded_library(prefix="libcublasLt.so"):
    """The path of a loaded library whose file name starts with `prefix` (/proc/self/maps), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and os.path.basename(parts[5].strip()).startswith(prefix):
                    return parts[5].strip()
    except OSError:
        pass
    return None


def candidate_libraries():
    found = []
    for base in sys.path:
        found += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libcublasLt.so*")))
    found += [p for p in ("/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.12")
              if os.path.exists(p)]
    return found


# ---- table ------------------------------------------------------------------------------------------

def table(rows):
    head = ("| N × K | M | fast accum | algo | tile (N×M) | stages | split-K | reduction | swizzle | cluster | "
            "custom | inner | waves | workspace KiB | torch |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        def c(key):
            v = r.get(key)
            return "-" if v is None else str(v)
        if r.get("error"):
            lines.append(f"| {r['n']}×{r['k']} | {r['m']} | {r['fast_accum']} | error: {r['error']} |" + " |" * 11)
            continue
        waves = "-" if r.get("waves") is None else f"{r['waves']:.2f}"
        ws = "-" if r.get("workspace_bytes") is None else f"{r['workspace_bytes'] / 1024:.0f}"
        lines.append(f"| {r['n']}×{r['k']} | {r['m']} | {r['fast_accum']} | {c('algo_id')} | {c('tile_name')} | "
                     f"{c('stages_name')} | {c('splitk')} | {c('reduction_name')} | {c('swizzle')} | "
                     f"{c('cluster_name')} | {c('custom')} | {c('inner_name')} | {waves} | {ws} | {c('torch')} |")
    return lines


def describe(lt, names, result, rank):
    cfg, errors = lt.algo_config(result.algo)
    row = dict(rank=rank, state=result.state, waves=float(result.wavesCount), workspace_bytes=int(result.workspaceSize),
               **cfg)
    for key in ENUM_OF:
        row[f"{key}_name"] = names(key, cfg.get(key))
    if errors:
        row["config_errors"] = errors
    return row


# ---- main -------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES), help="comma-separated NxK")
    ap.add_argument("--m", default=",".join(map(str, M_VALUES)), help="comma-separated M values")
    ap.add_argument("--fast-accum", choices=("both", "0", "1"), default="both",
                    help="CUBLASLT_MATMUL_DESC_FAST_ACCUM (torch._scaled_mm's use_fast_accum; its default is 0)")
    ap.add_argument("--top", type=int, default=1, help="heuristic results asked for (torch asks for 1)")
    ap.add_argument("--workspace-kib", type=int, help="the preference's workspace limit (default: torch's)")
    ap.add_argument("--lib", help="the libcublasLt to load (default: the one torch loaded)")
    ap.add_argument("--header", help="cublasLt.h to name the enum values from")
    ap.add_argument("--no-torch-check", action="store_true", help="do not run torch._scaled_mm to compare")
    args = ap.parse_args()
    # The GPU side, in the kjit CLI's words where something is missing.
    from bench_common import cannot_run, require_gpu  # first
    import torch
    require_gpu()
    if args.top < 1:
        cannot_run("valid --top", "--top ≥ 1", f"got {args.top}")
    shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",") if s]
    ms = [int(v) for v in args.m.split(",") if v]
    fasts = {"both": (False, True), "0": (False,), "1": (True,)}[args.fast_accum]

    dev = torch.cuda.current_device()
    cap = torch.cuda.get_device_capability(dev)
    # Make torch load cuBLAS / cuBLASLt (and create its context) before looking for the library.
    x = torch.ones(16, 16, device="cuda", dtype=torch.bfloat16)
    (x @ x).sum().item()
    lib = args.lib or loaded_library() or next(iter(candidate_libraries()), None)
    if lib is None:
        cannot_run("libcublasLt", "the cuBLASLt library torch uses", "not in /proc/self/maps, the nvidia wheels "
                   "or /usr/local/cuda/lib64; pass --lib")
    try:
        lt = CublasLt(lib)
    except (OSError, AttributeError) as e:
        cannot_run("usable libcublasLt", f"a cuBLASLt with the matmul heuristic API at {lib}", e)
    header = find_header(lib, args.header)
    enums = {}
    if header:
        try:
            enums = load_header_enums(header)
        except OSError as e:
            print(f"cannot read {header}: {e}")
    names = Names(enums)
    hver = header_version(os.path.dirname(header)) if header else None
    lver = lt.version()
    print(f"device: {torch.cuda.get_device_name(dev)} (sm_{cap[0]}{cap[1]})  torch {torch.__version__}")
    print(f"cuBLASLt {lver}: {lib}")
    print(f"names from: {header or 'no cublasLt.h found: numbers only'}" + (f" (cuBLAS {hver})" if hver else ""))
    if hver and hver.split(".")[0] != lver.split(".")[0]:
        print(f"warning: the header ({hver}) and the library ({lver}) differ in major version; names may be off")
    try:
        handle = lt.create_handle()
    except LtError as e:
        cannot_run("cuBLASLt handle", "a cuBLASLt handle on the GPU", e)
    logger = None
    if not args.no_torch_check:
        try:
            logger = Logger(lt)
        except (LtError, AttributeError) as e:
            print(f"no torch check: cuBLASLt's logger is not usable ({e})")
    default_ws = args.workspace_kib * 1024 if args.workspace_kib is not None else torch_default_workspace_bytes(
        cap == (9, 0))
    scale_a = torch.ones(1, device="cuda", dtype=torch.float32)
    scale_b = torch.ones(1, device="cuda", dtype=torch.float32)

    rows, first_torch_log = [], None
    for n, k in shapes:
        w = torch.zeros(n, k, device="cuda", dtype=torch.float8_e4m3fn) if logger else None
        for m in ms:
            a = torch.zeros(m, k, device="cuda", dtype=torch.float8_e4m3fn) if logger else None
            for fast in fasts:
                row = dict(n=n, k=k, m=m, fast_accum=int(fast))
                torch_line = None
                if logger:
                    try:
                        with logger:
                            torch._scaled_mm(a, w.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                                             use_fast_accum=fast)
                            torch.cuda.synchronize()
                        torch_line = logger.last("cublasLtMatmulAlgoGetHeuristic")
                        row["torch_heuristic_log"] = torch_line
                        row["torch_matmul_log"] = logger.last("cublasLtMatmul")
                        if first_torch_log is None:
                            first_torch_log = [f"[{lvl}][{f}] {msg}" for lvl, f, msg in logger.messages][:200]
                        if torch_line is None:
                            row["torch"] = "no cuBLASLt heuristic query seen"
                    except Exception as e:  # torch refused the problem: say so, ask cuBLASLt anyway
                        row["torch"] = f"torch._scaled_mm failed: {str(e).splitlines()[0][:120]}"
                ws = default_ws
                if args.workspace_kib is None and logged_workspace(torch_line) is not None:
                    ws = logged_workspace(torch_line)
                row["workspace_limit_bytes"] = ws
                try:
                    with Problem(lt, n, k, m, fast, scale_b.data_ptr(), scale_a.data_ptr(), ws) as p:
                        if logger:
                            with logger:
                                results = p.heuristic(handle, args.top)
                            ours = logger.last("cublasLtMatmulAlgoGetHeuristic")
                            row["our_heuristic_log"] = ours
                            if torch_line is not None:
                                row["torch"] = "same" if normalize_log(ours) == normalize_log(torch_line) else "DIFFERENT"
                        else:
                            results = p.heuristic(handle, args.top)
                        if p.notes:
                            row["notes"] = p.notes
                    if not results:
                        row["error"] = "the heuristic returned no algorithm"
                    else:
                        row.update(describe(lt, names, results[0], 0))
                        if len(results) > 1:
                            row["others"] = [describe(lt, names, r, i) for i, r in enumerate(results[1:], 1)]
                except LtError as e:
                    row["error"] = str(e)
                rows.append(row)
        del w
        torch.cuda.empty_cache()

    for fast in fasts:
        print(f"\nFAST_ACCUM {int(fast)}" + (" (torch._scaled_mm's default)" if not fast else "") +
              f"; workspace limit {default_ws // 1024} KiB unless torch's log said otherwise:\n")
        print("\n".join(table([r for r in rows if r["fast_accum"] == int(fast)])))
    differ = [r for r in rows if r.get("torch") == "DIFFERENT"]
    if differ:
        r = differ[0]
        print(f"\ndescriptors differ from torch's, e.g. M={r['m']} N×K={r['n']}×{r['k']}:\n  torch: "
              f"{r.get('torch_heuristic_log')}\n  ours:  {r.get('our_heuristic_log')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(dev), capability=list(cap), torch=torch.__version__,
                           library=lib, library_version=lver, header=header, header_version=hver,
                           default_workspace_bytes=default_ws, top=args.top, rows=rows,
                           first_torch_log=first_torch_log), f, indent=1)
    errors = [r for r in rows if r.get("error")]
    print(f"\n{len(rows)} problems, {len(errors)} failed, {len(differ)} with a descriptor unlike torch's")
    return 1 if errors or differ else 0


if __name__ == "__main__":
    sys.exit(main())
