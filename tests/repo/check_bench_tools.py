#!/usr/bin/env python3
"""The host-side parts of two GPU tools, checked without a GPU:

- tools/bench/layer_model.py (the decoder layer of bench_layer.py): every op's bytes, FLOPs and
  floor against figures worked out here by hand, the cases' attended pairs, and its tables rendered
  from a result shaped like bench_layer.py's JSON (a missing figure printed as "-");
- tools/bench/cublaslt_algos.py: its C-header enum reader on a made-up header (implicit values,
  hex, expressions, tags, comments, preprocessor lines); its ABI constants against the installed
  cublasLt.h / cublas_api.h / library_types.h; and, where libcublasLt loads, the descriptor it
  builds for torch._scaled_mm's problem, read back attribute by attribute and through cuBLASLt's
  own log of the heuristic query (which needs no GPU: the query fails without a handle, after
  logging). The header and library parts are skipped where the CUDA toolkit is absent.

Exit 0 when everything checked holds, 1 otherwise (listing what failed).
"""
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "bench"))

import cublaslt_algos as ca  # noqa: E402
import layer_model as lm  # noqa: E402

problems = []


def expect(cond, what):
    if not cond:
        problems.append(what)


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b))


# ---- layer_model ---------------------------------------------------------------------------------------

b1, b128, pre = lm.decode_case(1), lm.decode_case(128), lm.prefill_case()
expect(lm.QKV_N == 10240 and lm.GEMMS["gate_up"] == (57344, 8192) and lm.GEMMS["down"] == (8192, 28672),
       "layer shapes")
expect(pre.tokens == 4096 and pre.kv_lens == [2560] * 8, f"prefill case {pre.tokens} {pre.kv_lens[:1]}")
# causal, queries at the end: request of q new tokens over kv keys attends q·(kv − q) + q(q + 1)/2
expect(pre.attended_pairs() == 8 * sum(2048 + i + 1 for i in range(512)), "prefill attended pairs")
expect(b128.attended_pairs() == 128 * 4096, "decode attended pairs")
mixed = lm.mixed_case(32)
expect(sum(mixed.kv_lens) == 32 * 4096 and len(set(mixed.kv_lens)) > 4, f"mixed lengths {mixed.kv_lens[:8]}")
# QKV GEMM at M = 1: the weight, one activation row, one bf16 output row, over 3.35 TB/s
qkv = (10240 * 8192 + 8192 + 2 * 10240) / 3.35e12 * 1e6
expect(close(lm.floor_us("qkv", b1, "H100"), qkv), f"QKV floor {lm.floor_us('qkv', b1, 'H100')} != {qkv}")
# gate/up at M = 4096 is compute-bound: 2·M·N·K over 1979 TFLOP/s
gu = 2 * 4096 * 57344 * 8192 / 1979e12 * 1e6
expect(close(lm.floor_us("gate_up", pre, "H200"), gu), "gate/up prefill floor (FLOP-bound)")
# decode attention reads every K and V row once: 2 · 2 B · 8 heads · 128 per token
att = (128 * 4096 * 2 * 2 * 8 * 128 + 2 * 2 * 128 * 8192) / 4.8e12 * 1e6
expect(close(lm.floor_us("attention", b128, "H200"), att), "B128 attention floor")
# prefill attention: 4 · D · Hq FLOPs per attended pair, bf16 peak
patt = 4 * 128 * 64 * pre.attended_pairs() / 989e12 * 1e6
expect(close(lm.floor_us("attention", pre, "H100"), patt), "prefill attention floor (FLOP-bound)")
f = lm.floors(b1)
expect(set(f) == set(lm.DEVICES) and close(f["H100"]["layer"], sum(f["H100"][k] for k in lm.OP_KEYS)),
       "layer floor = sum of op floors")
expect(f["H100"]["layer"] > f["H200"]["layer"], "H200 floor below H100's at decode")
expect(lm.device_key("NVIDIA H200") == "H200" and lm.device_key("NVIDIA H100 80GB HBM3") == "H100", "device_key")

result = dict(case=b1.name, tokens=1, floors_us=lm.floors(b1), peer_attention="FlashInfer decode (tensor cores)",
              ops=[dict(op=op.key, kjit_us=10.0, peer_us=12.0, peer_impl=op.peer) for op in lm.OPS],
              layer=dict(kjit_us=300.0, peer_us=330.0), checks={k: v / 2 for k, v in lm.TOLERANCES.items()},
              agree=True, errors=[])
del result["ops"][3]["kjit_us"]
lines = lm.case_table(result, "H100")
expect(sum(line.startswith("| ") for line in lines) == len(lm.OPS) + 3, "case table rows (ops, sum, layer)")
layer_row = next(line for line in lines if "layer, one graph" in line)
expect("**1.100**" in layer_row, f"layer ratio: {layer_row}")
sum_row = next(line for line in lines if line.startswith("| Σ ops"))
expect(sum_row.split("|")[2].strip() == "-" and sum_row.split("|")[3].strip() == "180.0", f"sum row: {sum_row}")
summary = lm.summary_table([result, dict(case="failed", tokens=1, floors_us=lm.floors(b1), errors=["x"])], "H200")
expect(summary[-1].endswith("| NO |") and summary[-2].endswith("| yes |"), f"summary: {summary[-2:]}")
expect(len(lm.floor_tables()) == 4 + len(lm.OPS) + 1, "floor table rows")

# ---- cublaslt_algos: the enum reader ----------------------------------------------------------------------

fake = """
#define X 1
typedef enum tag_t {
  A_ZERO,              /* implicit 0 */
  A_ONE,
  A_HEX = 0x10,        // 16
#if defined(SOMETHING)
  A_SHIFT = (1u << 5) | A_ONE,
#endif
  A_NEXT,
  A_ALIAS = A_HEX,
  A_END
} fake_t;
typedef enum { B = -2, C } other_t;
"""
en = ca.parse_enums(fake)
expect(en.get("fake_t") == {"A_ZERO": 0, "A_ONE": 1, "A_HEX": 16, "A_SHIFT": 33, "A_NEXT": 34, "A_ALIAS": 16,
                            "A_END": 17} and en.get("tag_t") is en.get("fake_t"), f"parse_enums: {en.get('fake_t')}")
expect(en.get("other_t") == {"B": -2, "C": -1}, f"parse_enums negatives: {en.get('other_t')}")
names = ca.Names({"cublasLtMatmulTile_t": {"CUBLASLT_MATMUL_TILE_64x128": 17, "CUBLASLT_MATMUL_TILE_END": 18},
                  "cublasLtReductionScheme_t": {"CUBLASLT_REDUCTION_SCHEME_NONE": 0, "CUBLASLT_REDUCTION_SCHEME_MASK": 7}})
expect(names("tile", 17) == "64x128" and names("tile", 18) == "?18" and names("reduction", 7) == "?7"
       and names("custom", 3) == "3" and names("tile", None) is None, "Names")


def check_library(lt):
    """The descriptor cublaslt_algos builds for torch._scaled_mm's problem, through the library
    (no GPU needed)."""
    log = ca.Logger(lt)
    n, k, m, ws = 10240, 8192, 3, 1 << 20
    with ca.Problem(lt, n, k, m, True, 0x1000, 0x2000, ws) as p:
        got = {name: lt.get_desc(p.desc, name) for name in ca.DESC_ATTRS}
        expect(got == {"CUBLASLT_MATMUL_DESC_TRANSA": ca.CUBLAS_OP_T, "CUBLASLT_MATMUL_DESC_TRANSB": ca.CUBLAS_OP_N,
                       "CUBLASLT_MATMUL_DESC_A_SCALE_POINTER": 0x1000,
                       "CUBLASLT_MATMUL_DESC_B_SCALE_POINTER": 0x2000, "CUBLASLT_MATMUL_DESC_FAST_ACCUM": 1,
                       "CUBLASLT_MATMUL_DESC_A_SCALE_MODE": 0, "CUBLASLT_MATMUL_DESC_B_SCALE_MODE": 0},
               f"descriptor read back: {got}")
        with log:
            try:
                p.heuristic(None, 1)  # no handle: refused after the query is logged
                problems.append("a heuristic query without a handle succeeded")
            except ca.LtError as e:
                expect(e.status != 0 and e.status_name.startswith("CUBLAS_STATUS_"), f"status name: {e}")
        line = log.last("cublasLtMatmulAlgoGetHeuristic") or ""
        want = [f"Adesc=[type=R_8F_E4M3 rows={k} cols={n} ld={k}]", f"Bdesc=[type=R_8F_E4M3 rows={k} cols={m} ld={k}]",
                f"Cdesc=[type=R_16BF rows={n} cols={m} ld={n}]", f"Ddesc=[type=R_16BF rows={n} cols={m} ld={n}]",
                f"maxWorkspaceSizeinBytes={ws}", "transa=OP_T", "fastAccumulationFlag=1"]
        missing = [w for w in want if w not in line]
        expect(not missing, f"logged heuristic query lacks {missing}: {line}")
        expect(ca.logged_workspace(line) == ws and "PTR" in (ca.normalize_log(line) or ""), "log parsing")
    cfg, errors = lt.algo_config(ca.Algo())
    expect(set(cfg) == {key for key, *_ in ca.CONFIG_ATTRS} and not errors, f"algo config: {cfg} {errors}")
    expect(not any(f == "cublasLtMatmulDescCreate" for _, f, _ in log.messages), "the logger on outside `with`")


# ---- cublaslt_algos against the installed CUDA toolkit ------------------------------------------------------

header = ca.find_header(None)
if header is None:
    print("no cublasLt.h (CUDA toolkit): the header and library checks skipped")
else:
    enums = ca.load_header_enums(header)

    def value(enum, name):
        return enums.get(enum, {}).get(name)

    expect(value("cublasComputeType_t", "CUBLAS_COMPUTE_32F") == ca.CUBLAS_COMPUTE_32F, "CUBLAS_COMPUTE_32F")
    for name, v in (("CUDA_R_32F", ca.CUDA_R_32F), ("CUDA_R_16BF", ca.CUDA_R_16BF),
                    ("CUDA_R_8F_E4M3", ca.CUDA_R_8F_E4M3)):
        expect(value("cudaDataType", name) == v, f"{name}: header {value('cudaDataType', name)}, script {v}")
    expect(value("cublasOperation_t", "CUBLAS_OP_N") == ca.CUBLAS_OP_N
           and value("cublasOperation_t", "CUBLAS_OP_T") == ca.CUBLAS_OP_T, "CUBLAS_OP_*")
    for name, (v, _) in ca.DESC_ATTRS.items():
        expect(value("cublasLtMatmulDescAttributes_t", name) == v, f"{name}: header "
               f"{value('cublasLtMatmulDescAttributes_t', name)}, script {v}")
    expect(value("cublasLtMatmulPreferenceAttributes_t", "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES")
           == ca.CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES")
    expect(value("cublasLtMatmulMatrixScale_t", "CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F")
           == ca.CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, "CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F")
    for _, name, v, _ in ca.CONFIG_ATTRS:
        expect(value("cublasLtMatmulAlgoConfigAttributes_t", name) == v, f"{name}")
    for v, name in ca.STATUS_NAMES.items():
        expect(value("cublasStatus_t", name) == v, f"{name}")
    for key, (enum, _) in ca.ENUM_OF.items():
        expect(len(enums.get(enum, {})) > 1, f"{enum} read from {header}")
    hnames = ca.Names(enums)
    expect(hnames("tile", value("cublasLtMatmulTile_t", "CUBLASLT_MATMUL_TILE_64x128")) == "64x128"
           and hnames("stages", value("cublasLtMatmulStages_t", "CUBLASLT_MATMUL_STAGES_128xAUTO")) == "128xAUTO"
           and hnames("cluster", value("cublasLtClusterShape_t", "CUBLASLT_CLUSTER_SHAPE_2x1x1")) == "2x1x1",
           "names from the header")
    expect(ca.header_version(os.path.dirname(header)) is not None, "cublas_api.h version")

    lib = next(iter(ca.candidate_libraries()), None)
    lt = None
    if lib is not None:
        try:
            lt = ca.CublasLt(lib)
        except (OSError, AttributeError) as e:
            print(f"{lib} does not load ({e}): the library checks skipped")
    if lt is None:
        print("no libcublasLt: the library checks skipped")
    else:
        try:
            check_library(lt)
        except ca.LtError as e:
            problems.append(f"cuBLASLt refused the descriptor: {e}")

expect(math.isclose(ca.torch_default_workspace_bytes(True), 1 << 20) or "CUBLASLT_WORKSPACE_SIZE" in os.environ,
       "torch's default cuBLASLt workspace (1 MiB)")

for p in problems:
    print("FAIL:", p)
print(f"bench tools: {len(problems)} problem(s)" if problems else "bench tools: every check holds")
sys.exit(1 if problems else 0)
