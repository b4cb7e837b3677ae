"""Argument checks of the ops from Python, with or without a GPU: NumPy arrays (host memory) are
refused as such, and DLPack tensors that claim a CUDA device (fake_dlpack, on an ordinal the
machine does not have) reach every shape, dtype and layout rule; valid ones get as far as opening
the device and no further (no launch ever sees their fake pointers or streams)."""
import numpy as np
import pytest

import kjit
from conftest import HAS_GPU
from fake_dlpack import ABSENT_DEVICE as DEV
from fake_dlpack import FakeTensor as T


def stops_at_the_device():
    """What a valid call on fake tensors raises: no driver here, or no device of that ordinal."""
    if HAS_GPU:
        return pytest.raises((kjit.InvalidArgument, kjit.DriverError), match="device")
    return pytest.raises(kjit.DriverError, match="driver")


def test_error_hierarchy():
    assert issubclass(kjit.InvalidArgument, kjit.Error) and issubclass(kjit.InvalidArgument, ValueError)
    for e in (kjit.Unsupported, kjit.CompileError, kjit.DriverError, kjit.CacheError):
        assert issubclass(e, kjit.Error)
    assert issubclass(kjit.Error, RuntimeError)


# ---- NumPy arrays are host memory ------------------------------------------------------------------

def test_numpy_rejected_as_host_memory():
    x = np.zeros((4, 64), np.float32)
    with pytest.raises(kjit.InvalidArgument, match=r"kjit::fp8::quantize: x must be on a CUDA device, got host memory \[4, 64\] f32"):
        kjit.fp8.quantize(x)
    q = np.zeros((2, 8, 128), np.float16)
    cs = np.zeros((16, 64), np.float32)
    with pytest.raises(kjit.InvalidArgument, match="rotary: q must be on a CUDA device, got host memory"):
        kjit.rotary(q, cs, cs, np.zeros(2, np.int64))
    with pytest.raises(kjit.InvalidArgument, match="decode: q must be on a CUDA device"):
        kjit.attention.decode(np.zeros((2, 1, 8, 128), np.float16), np.zeros((2, 16, 8, 128), np.float16),
                              np.zeros((2, 16, 8, 128), np.float16))
    a = np.zeros((16, 64), np.uint8)
    with pytest.raises(kjit.InvalidArgument, match="gemm: a must be on a CUDA device"):
        kjit.fp8.gemm(a, a, np.ones(1, np.float32), np.ones(1, np.float32))


def test_numpy_bool_and_int_dtypes_are_read():
    # NumPy 2 exports bool with DLPack 1.x's code: a bool mask reaches the device rule, not a dtype error.
    with pytest.raises(kjit.InvalidArgument, match="must be on a CUDA device"):
        kjit.attention.decode(np.zeros((2, 1, 8, 128), np.float16), np.zeros((2, 16, 8, 128), np.float16),
                              np.zeros((2, 16, 8, 128), np.float16), np.zeros(2, np.int32),
                              mask=np.ones((2, 16), bool))


def test_unsupported_dtype_names_the_argument():
    with pytest.raises(kjit.InvalidArgument, match=r"kjit.rotary: cos: DLTensor dtype code=1 bits=16"):
        kjit.rotary(T((2, 8, 128)), T((16, 64), "u16"), T((16, 64), "f32"), T((2,), "i64"))


def test_not_a_tensor():
    with pytest.raises(kjit.InvalidArgument, match="kjit.rotary: cos: expected a DLPack tensor"):
        kjit.rotary(T((2, 8, 128)), [1.0, 2.0], T((16, 64), "f32"), T((2,), "i64"))


# ---- rules reached through fake CUDA tensors --------------------------------------------------------

def rotary_args():
    return dict(q=T((4, 8, 128)), cos=T((32, 64), "f32"), sin=T((32, 64), "f32"), positions=T((4,), "i64"))


def test_wrong_dtype_rejected():
    a = rotary_args()
    a["q"] = T((4, 8, 128), "f16")
    with pytest.raises(kjit.InvalidArgument, match="kjit::rotary: q must be bf16, got \\[4, 8, 128\\] f16"):
        kjit.rotary(**a)
    with pytest.raises(kjit.InvalidArgument, match="positions must be"):
        kjit.rotary(**dict(rotary_args(), positions=T((4,), "f32")))


def test_non_contiguous_rejected():
    # positions [4] with stride 2: a strided view.
    with pytest.raises(kjit.InvalidArgument, match="positions must be contiguous"):
        kjit.rotary(**dict(rotary_args(), positions=T((4,), "i64", strides=(2,))))
    # q's last dim must be contiguous.
    with pytest.raises(kjit.InvalidArgument, match="q must have a contiguous last dimension"):
        kjit.rotary(**dict(rotary_args(), q=T((4, 8, 128), strides=(2048, 256, 2))))


def test_wrong_shape_rejected():
    with pytest.raises(kjit.InvalidArgument, match="positions dim 0 must be tokens"):
        kjit.rotary(**dict(rotary_args(), positions=T((5,), "i64")))
    with pytest.raises(kjit.InvalidArgument, match="q must be 3-d"):
        kjit.rotary(**dict(rotary_args(), q=T((4, 1024))))


def test_wrong_device_between_tensors():
    with pytest.raises(kjit.InvalidArgument, match=f"cos is on CUDA device {DEV + 1}, expected CUDA device {DEV}"):
        kjit.rotary(**dict(rotary_args(), cos=T((32, 64), "f32", device=DEV + 1)))
    with pytest.raises(kjit.InvalidArgument, match=f"sin is on the host, expected CUDA device {DEV}"):
        kjit.rotary(**dict(rotary_args(), sin=T((32, 64), "f32", device=-1)))


def test_bad_choices_and_stream():
    with pytest.raises(kjit.InvalidArgument, match="style must be one of 'neox', 'gptj', got 'rope'"):
        kjit.rotary(**rotary_args(), style="rope")
    with pytest.raises(kjit.InvalidArgument, match="stream: expected an int"):
        kjit.rotary(**rotary_args(), stream="default")
    with pytest.raises(kjit.InvalidArgument, match="granularity must be one of"):
        kjit.fp8.quantize(T((4, 64), "f32"), y=T((4, 64), "e4m3"), granularity="col")
    with pytest.raises(kjit.InvalidArgument, match="out_dtype must be one of"):
        kjit.fp8.gemm(T((16, 64), "e4m3"), T((16, 64), "e4m3"), T((1,), "f32"), T((1,), "f32"), out_dtype="int8")


def test_outputs_of_an_unknown_framework_must_be_passed():
    with pytest.raises(kjit.InvalidArgument, match="pass the output tensor in"):
        kjit.rotary(**rotary_args(), inplace=False)


def test_dlpack_protocol_gets_the_stream():
    # Valid arguments on the absent device: every tensor is exported, then opening the device fails
    # before the (fake) stream 1234 reaches the driver.
    a = rotary_args()
    with stops_at_the_device():
        kjit.rotary(**a, stream=1234)
    assert a["q"].last_stream == 1234 and a["positions"].last_stream == 1234
    a = rotary_args()
    with stops_at_the_device():
        kjit.rotary(**a)
    assert a["q"].last_stream == 1  # the legacy default stream, as the DLPack protocol spells it


def test_valid_arguments_reach_the_driver():
    with stops_at_the_device():
        kjit.rotary(**rotary_args())
    q = T((2, 1, 32, 128))
    kv = T((2, 256, 8, 128))
    with stops_at_the_device():
        kjit.attention.decode(q, kv, kv, T((2,), "i32"), out=T((2, 1, 32, 128)))
    with stops_at_the_device():
        kjit.attention.decode(q, kv, kv, out=T((2, 1, 32, 128)), num_splits=1)


def test_decode_rules():
    q, kv = T((2, 1, 32, 128)), T((2, 256, 8, 128))
    with pytest.raises(kjit.InvalidArgument, match="kv_lens must be i32"):
        kjit.attention.decode(q, kv, kv, T((2,), "i64"), out=T((2, 1, 32, 128)))
    with pytest.raises(kjit.InvalidArgument, match="head_dim"):
        kjit.attention.decode(T((2, 1, 32, 96)), T((2, 256, 8, 96)), T((2, 256, 8, 96)), out=T((2, 1, 32, 96)))


def test_quantize_and_gemm_rules():
    with pytest.raises(kjit.InvalidArgument, match="cols"):
        kjit.fp8.quantize(T((4, 40), "f32"), y=T((4, 40), "e4m3"), scale_inv=T((1,), "f32"))
    with pytest.raises(kjit.InvalidArgument, match="kjit::fp8::gemm"):
        kjit.fp8.gemm(T((16, 64), "e4m3"), T((16, 32), "e4m3"), T((1,), "f32"), T((1,), "f32"), d=T((16, 16)))
    # fp8_format names an FP8 format only: the other dtypes are refused by name, with the two choices.
    for bad in ("bf16", "e3m4"):
        with pytest.raises(kjit.InvalidArgument,
                           match=f"kjit.fp8.gemm: fp8_format must be one of e4m3, e5m2 .*, got '{bad}'"):
            kjit.fp8.gemm(T((16, 64), "u8"), T((16, 64), "u8"), T((1,), "f32"), T((1,), "f32"), fp8_format=bad)


def test_plan_paged_prefill_with_a_forced_tile_is_host_only():
    plan = kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, tile_rows=64, device=0) \
        if HAS_GPU else None
    if plan is not None:
        assert plan.num_work == 6
    with pytest.raises(kjit.InvalidArgument):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=100, tile_rows=64)
    # 192-row tiles exist at head_dim 64 only (the Hopper kernel's three-consumer tile).
    with pytest.raises(kjit.InvalidArgument, match="tile_rows 192 runs only at head_dim 64"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, tile_rows=192)
    if HAS_GPU:
        assert kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=64, tile_rows=192).num_work == 3
    # The binding's names of that tile are the C++ planner's.
    assert (kjit.attention.WIDE_TILE_ROWS, kjit.attention.WIDE_TILE_HEAD_DIM) == (192, 64)


KV = dict(kv_indptr=[0, 5, 6, 15], last_page_len=[6, 10, 2], q_heads=8, page_size=16)


def test_plan_paged_prefill_chooses_only_with_the_kv_layout():
    # tile_rows=0 lets the device's tuning table choose, and its bucket is read from the KV layout:
    # without it the call is refused (a forced tile needs none), never planned by the untuned rule.
    with pytest.raises(kjit.InvalidArgument, match="tile_rows 0 lets the device's tuning table choose the tile, "
                                                   "which reads the KV layout: pass kv_indptr, last_page_len"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128)
    with pytest.raises(kjit.InvalidArgument, match="kv_indptr or last_page_len is missing"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, kv_indptr=[0, 5, 6, 15], q_heads=8)
    with pytest.raises(kjit.InvalidArgument, match="kv_indptr or last_page_len is missing"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, tile_rows=64, page_size=16)
    with pytest.raises(kjit.InvalidArgument, match=r"kv_indptr needs batch \+ 1 = 4 entries and last_page_len "
                                                   r"batch = 3 \(from qo_indptr\), got 3 and 3"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, **dict(KV, kv_indptr=[0, 5, 6]))
    with pytest.raises(kjit.InvalidArgument, match=r"plan_paged_prefill: last_page_len\[2\] must be an int"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, **dict(KV, last_page_len=[6, 10, 2.5]))
    # The C++ planner's rules on the KV side, named.
    with pytest.raises(kjit.InvalidArgument, match="kjit::attention::plan_paged_prefill: q_heads must be in"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, **dict(KV, q_heads=0))
    with pytest.raises(kjit.InvalidArgument, match="kv_indptr must be non-decreasing"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, **dict(KV, kv_indptr=[0, 5, 4, 15]))
    with pytest.raises(kjit.InvalidArgument, match="device must be an ordinal, got -1"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, device=-1, **KV)
    with pytest.raises(kjit.InvalidArgument, match=r"max_ctas must be >= 0 \(0: one per SM\), got -1"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, max_ctas=-1, **KV)
    with pytest.raises(kjit.InvalidArgument, match="page_load must be one of"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, page_load="dma", **KV)
    with pytest.raises(kjit.InvalidArgument, match=r"page_load tma loads 16-row boxes inside pages: page_size "
                                                   r"must be a multiple of 16, got 8"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, page_load="tma", **dict(KV, page_size=8))
    with pytest.raises(kjit.InvalidArgument, match="page_load tma runs on the sm_90a wgmma kernel, whose tiles have 128 rows or more; got tile_rows 64"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, tile_rows=64, page_load="tma", **KV)
    # persistent= and max_ctas= plan with the KV layout: without it they are refused by name.
    with pytest.raises(kjit.InvalidArgument, match="kv_indptr or last_page_len is missing"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, tile_rows=64, persistent=False)
    if not HAS_GPU:  # a valid plan uploads its work map: the driver is what is missing here
        with pytest.raises(kjit.DriverError, match="no CUDA device: this call needs a GPU"):
            kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, **KV)


def test_flags_take_bools_numpy_bools_and_ints_alike():
    a, b, s = T((16, 64), "e4m3"), T((16, 64), "e4m3"), T((1,), "f32")
    for on in (True, 1, 0, np.True_, np.int32(1)):
        with stops_at_the_device():  # accepted: the call gets as far as the device
            kjit.fp8.gemm(a, b, s, s, d=T((16, 16)), b_constant=on)
    q = T((1, 64, 8, 128))
    with stops_at_the_device():
        kjit.attention.prefill(q, q, q, causal=1, out=T((1, 64, 8, 128)), return_lse=np.False_)
    # What is not a truth value by that rule is refused, not read as bool() would ("no" is True).
    for bad in ("no", 1.0, None):
        with pytest.raises(TypeError):
            kjit.fp8.gemm(a, b, s, s, d=T((16, 16)), b_constant=bad)
        with pytest.raises(TypeError):
            kjit.attention.prefill(q, q, q, causal=bad, out=T((1, 64, 8, 128)))
        with pytest.raises(TypeError, match="Program: arch_specific must be True or False"):
            kjit.Program("__global__ void k() {}", ["k"], arch_specific=bad)
        with pytest.raises(TypeError, match="Program: std_headers must be True or False"):
            kjit.Program("__global__ void k() {}", ["k"], std_headers=bad)
    assert kjit.Program("__global__ void k() {}", ["k"], arch_specific=0).arch_specific is False
    assert kjit.Program("__global__ void k() {}", ["k"], std_headers=0).std_headers is False


def test_forced_paged_prefill_variant_is_checked_before_the_device():
    with pytest.raises(kjit.InvalidArgument, match="plan_paged_prefill: variant must be one of 'auto', 'mma', "
                                                   "'wgmma', got 'sm90'"):
        kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, variant="sm90", **KV)
    with pytest.raises(TypeError):  # keyword-only: a fifth positional argument is refused
        kjit.attention.plan_paged_prefill([0, 70], 128, 0, 0, "mma")
    # A list entry that is not an int32 is named, never a C++ cast error.
    for bad, shown in (([0, 2**40], "1099511627776"), ([0, 4.5], "4.5"), ([0, None], "None"),
                       ([0, -2**40], "-1099511627776")):
        with pytest.raises(kjit.InvalidArgument,
                           match=r"plan_paged_prefill: qo_indptr\[1\] must be an int in the int32 range, got " + shown):
            kjit.attention.plan_paged_prefill(bad, head_dim=128)
    with pytest.raises(kjit.InvalidArgument, match="plan_paged_prefill"):
        kjit.attention.plan_paged_prefill("abc", head_dim=128)
    if HAS_GPU:
        assert kjit.attention.plan_paged_prefill([0, 70], head_dim=128, tile_rows=128).variant == "auto"
        plan = kjit.attention.plan_paged_prefill([0, 70, 80, 210], head_dim=128, tile_rows=128, variant="mma")
        assert plan.variant == "mma" and plan.workspace_bytes > 0


def test_workspace_queries():
    q, kv = T((2, 1, 32, 128)), T((2, 256, 8, 128))
    # One split needs no partials and no device query: an answer without a GPU.
    assert kjit.attention.decode_workspace_bytes(q, kv, kv, T((2,), "i32"), num_splits=1) == 0
    with pytest.raises(kjit.InvalidArgument, match=r"kjit::attention::decode_workspace_bytes: kv_lens must be i32, got \[2\] i64"):
        kjit.attention.decode_workspace_bytes(q, kv, kv, T((2,), "i64"))
    with pytest.raises(kjit.InvalidArgument, match="decode_workspace_bytes: mask"):
        kjit.attention.decode_workspace_bytes(q, kv, kv, mask=T((2, 255), "bool"))
    with stops_at_the_device():  # the planner's split count depends on the SM count
        kjit.attention.decode_workspace_bytes(q, kv, kv)
    pages, indptr, pidx, last = T((10, 16, 8, 128)), T((3,), "i32"), T((9,), "i32"), T((2,), "i32")
    assert kjit.attention.paged_decode_workspace_bytes(q, pages, pages, indptr, pidx, last, num_splits=1) == 0
    with pytest.raises(kjit.InvalidArgument, match="paged_decode_workspace_bytes: cache.last_page_len must have 2 elements"):
        kjit.attention.paged_decode_workspace_bytes(q, pages, pages, indptr, pidx, T((3,), "i32"))
    with stops_at_the_device():
        kjit.attention.paged_decode_workspace_bytes(q, pages, pages, indptr, pidx, last, kv_len_hint=4096)


def test_decode_merge_is_checked_before_the_device():
    q, kv = T((2, 1, 32, 128)), T((2, 256, 8, 128))
    pages, indptr, pidx, last = T((10, 16, 8, 128)), T((3,), "i32"), T((9,), "i32"), T((2,), "i32")
    with pytest.raises(kjit.InvalidArgument, match="kjit.attention.decode_workspace_bytes: merge must be one of "
                                                   "'auto', 'kernel', 'cluster', got 'warp'"):
        kjit.attention.decode_workspace_bytes(q, kv, kv, merge="warp")
    with pytest.raises(kjit.InvalidArgument, match="merge must be one of"):
        kjit.attention.paged_decode(q, pages, pages, indptr, pidx, last, merge="Cluster")
    with pytest.raises(kjit.InvalidArgument, match="merge 'cluster' combines at most 8 splits.*num_splits=9"):
        kjit.attention.decode_workspace_bytes(q, kv, kv, num_splits=9, merge="cluster")
    with pytest.raises(kjit.InvalidArgument, match="merge 'cluster' combines at most 8 splits.*num_splits=16"):
        kjit.attention.paged_decode_workspace_bytes(q, pages, pages, indptr, pidx, last, num_splits=16,
                                                    merge="cluster")
    # One split merges nothing: no workspace and no device query, whatever the merge.
    for merge in kjit.attention.DECODE_MERGES:
        assert kjit.attention.decode_workspace_bytes(q, kv, kv, num_splits=1, merge=merge) == 0


def test_swa_decode_plan_rules():
    args = (T((4, 32, 512)), T((8, 256, 512), "u8"), T((2048, 1)), T((4, 128), "i64"), T((4,), "i64"))
    with pytest.raises(kjit.InvalidArgument, match="head_group must be 0 \\(auto\\), 16, 32 or 64"):
        kjit.mla.swa_decode_plan(*args, head_group=8)
    with pytest.raises(kjit.InvalidArgument, match=r"num_splits must be in \[0, 8\]"):
        kjit.mla.swa_decode_plan(*args, num_splits=9)
    with pytest.raises(kjit.InvalidArgument, match="head_group 64 .* does not split the window"):
        kjit.mla.swa_decode_plan(*args, num_splits=3, head_group=64)
    with pytest.raises(kjit.InvalidArgument, match="swa_decode: lens"):
        kjit.mla.swa_decode_plan(*args[:4], T((4,), "f32"))
    with pytest.raises(kjit.InvalidArgument, match=r"cluster_split must be 0 \(auto\) or 1, 2, 4 or 8, got 3"):
        kjit.mla.swa_decode_plan(*args, cluster_split=3)
    with pytest.raises(kjit.InvalidArgument, match="cluster_split 2 merges the window inside its cluster"):
        kjit.mla.swa_decode_plan(*args, cluster_split=2, num_splits=4)
    with pytest.raises(kjit.InvalidArgument, match="cluster_split 8 cannot run .*window a multiple of 128"):
        kjit.mla.swa_decode_plan(*args[:3], T((4, 64), "i64"), args[4], cluster_split=8)
    with stops_at_the_device():  # the plan reads the device's SM count
        kjit.mla.swa_decode_plan(*args, num_splits=2, head_group=16)
    with stops_at_the_device():
        kjit.mla.swa_decode_plan(*args, cluster_split=4)
    assert kjit.mla.SwaDecodePlan._fields == ("head_group", "kv_tile", "num_splits", "cluster_split", "split_len",
                                              "ctas", "launches", "workspace_bytes")


def test_docstrings_and_scale_shapes_come_from_the_family_declarations():
    for g in kjit._C.family_values("fp8.quantize", "granularity"):
        assert f'"{g}"' in kjit.fp8.__doc__
    for t in kjit._C.family_values("fp8.gemm", "tile"):
        assert f'"{t}"' in kjit.fp8.__doc__
    for w in kjit._C.family_values("mla.swa_decode", "window"):
        assert w in kjit.mla.__doc__
    assert "{" not in kjit.fp8.__doc__ and "{" not in kjit.mla.__doc__
    assert kjit._C.fp8_scale_shape("tensor", 300, 1000) == (1,)
    assert kjit._C.fp8_scale_shape("row", 300, 1000) == (300,)
    assert kjit._C.fp8_scale_shape("block1x128", 300, 1000) == (300, 8)
    assert kjit._C.fp8_scale_shape("block128x128", 300, 1000) == (3, 8)
    with pytest.raises(kjit.InvalidArgument, match="granularity must be one of tensor, row"):
        kjit._C.fp8_scale_shape("column", 1, 1)
    with pytest.raises(kjit.InvalidArgument, match="no parameter"):
        kjit._C.family_values("fp8.gemm", "nope")
