"""Every op from Python on a GPU, against float64 PyTorch references on fresh random data with
poisoned outputs; CuPy and JAX inputs; user kernels launched; wrong-device and non-contiguous
inputs refused. Skipped without a device or without torch."""
import ctypes
import math

import pytest

import kjit

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

SM = torch.cuda.get_device_capability()
GEN = torch.Generator(device="cuda")


@pytest.fixture(autouse=True)
def seed():
    GEN.manual_seed(1234)


def randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", generator=GEN).to(dtype)


def poison(t):
    t.view(torch.uint8).fill_(0xFF)  # NaN in bf16/f32: any element not written shows
    return t


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


# ---- references (float64) --------------------------------------------------------------------------

def rope_ref(x, cos, sin, pos, neox=True):
    x = x.double()
    c = cos.double()[pos][:, None, :]
    s = sin.double()[pos][:, None, :]
    half = cos.shape[1]
    if neox:
        x0, x1 = x[..., :half], x[..., half:2 * half]
        y = torch.cat((x0 * c - x1 * s, x1 * c + x0 * s), -1)
    else:
        x0, x1 = x[..., 0:2 * half:2], x[..., 1:2 * half:2]
        y = torch.stack((x0 * c - x1 * s, x1 * c + x0 * s), -1).flatten(-2)
    return torch.cat((y, x[..., 2 * half:]), -1)


def attn_ref(q, k, v, keep, scale):
    """q [Hq, Lq, D], k/v [Hkv, Lkv, D], keep [Lq, Lkv] → out [Hq, Lq, D], lse [Hq, Lq] (float64)."""
    g = q.shape[0] // k.shape[0]
    qd, kd, vd = q.double(), k.double().repeat_interleave(g, 0), v.double().repeat_interleave(g, 0)
    s = (qd @ kd.transpose(1, 2)) * scale
    s = s.masked_fill(~keep[None], float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ vd, lse


def tables(max_pos, rotary_dim):
    inv = 500000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64, device="cuda") / rotary_dim)
    ang = torch.arange(max_pos, dtype=torch.float64, device="cuda")[:, None] * inv[None, :]
    return torch.cos(ang).float().contiguous(), torch.sin(ang).float().contiguous()


# ---- rotary ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("neox", [True, False])
def test_rotary_in_place_and_out_of_place(neox):
    T, Hq, Hk, D = 37, 32, 8, 128
    cos, sin = tables(4096, D)
    pos = torch.randint(0, 4096, (T,), device="cuda", generator=GEN)
    q, k = randn(T, Hq, D), randn(T, Hk, D)
    rq, rk = rope_ref(q, cos, sin, pos, neox), rope_ref(k, cos, sin, pos, neox)
    style = "neox" if neox else "gptj"
    qo, ko = kjit.rotary(q, cos, sin, pos, k, inplace=False, style=style)
    assert qo.data_ptr() != q.data_ptr() and qo.dtype == torch.bfloat16
    for out, ref in ((qo, rq), (ko, rk)):
        assert rel_l2(out, ref) < 4e-3
    q_out, k_out = poison(torch.empty_like(q)), poison(torch.empty_like(k))
    kjit.rotary(q, cos, sin, pos, k, q_out=q_out, k_out=k_out, style=style)
    assert torch.equal(q_out, qo) and torch.equal(k_out, ko)
    r = kjit.rotary(q, cos, sin, pos, k, style=style)
    assert r[0] is q and r[1] is k
    torch.cuda.synchronize()
    assert torch.equal(q, qo) and torch.equal(k, ko)


def test_rotary_rejects_non_contiguous_and_wrong_device():
    cos, sin = tables(64, 128)
    pos = torch.zeros(4, dtype=torch.int64, device="cuda")
    q = randn(4, 8, 256)[..., ::2]  # last dim stride 2
    with pytest.raises(kjit.InvalidArgument, match="q must have a contiguous last dimension"):
        kjit.rotary(q, cos, sin, pos)
    with pytest.raises(kjit.InvalidArgument, match="cos is on the host"):
        kjit.rotary(randn(4, 8, 128), cos.cpu(), sin, pos)
    with pytest.raises(kjit.InvalidArgument, match="q must be on a CUDA device, got host memory"):
        kjit.rotary(randn(4, 8, 128).cpu(), cos, sin, pos)
    with pytest.raises(kjit.InvalidArgument, match="positions must be contiguous"):
        kjit.rotary(randn(4, 8, 128), cos, sin, torch.zeros(8, dtype=torch.int64, device="cuda")[::2])
    with pytest.raises(kjit.InvalidArgument, match="q must be bf16"):
        kjit.rotary(randn(4, 8, 128, dtype=torch.float16), cos, sin, pos)


# ---- attention ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("D", [64, 128])
def test_decode(D):
    B, Hq, Hkv, L = 5, 32, 8, 700
    q, k, v = randn(B, 1, Hq, D), randn(B, L, Hkv, D), randn(B, L, Hkv, D)
    lens = torch.tensor([700, 1, 333, 0, 512], dtype=torch.int32, device="cuda")
    out, lse = kjit.attention.decode(q, k, v, lens, return_lse=True)
    out2 = kjit.attention.decode(q, k, v, lens, out=poison(torch.empty_like(q)), num_splits=1)
    scale = 1 / math.sqrt(D)
    for b in range(B):
        keep = torch.arange(L, device="cuda")[None, :] < lens[b]
        ro, rl = attn_ref(q[b].transpose(0, 1), k[b].transpose(0, 1), v[b].transpose(0, 1), keep, scale)
        if lens[b] == 0:
            assert out[b].abs().max() == 0 and torch.isinf(lse[b]).all()
            continue
        assert rel_l2(out[b, 0], ro[:, 0]) < 1e-2
        assert rel_l2(out2[b, 0], ro[:, 0]) < 1e-2
        assert rel_l2(lse[b], rl[:, 0]) < 1e-4
    assert kjit.workspace_bytes_held() > 0


def test_decode_mask_and_explicit_workspace():
    B, Hq, Hkv, D, L = 2, 16, 4, 128, 300
    q, k, v = randn(B, 1, Hq, D), randn(B, L, Hkv, D), randn(B, L, Hkv, D)
    mask = torch.rand(B, L, device="cuda", generator=GEN) < 0.7
    n = kjit.attention.decode_workspace_bytes(q, k, v, mask=mask, num_splits=4)
    assert n > 0  # four splits: f32 partials
    ws = torch.empty(n, dtype=torch.uint8, device="cuda")  # exactly what the query says suffices
    out = kjit.attention.decode(q, k, v, mask=mask, workspace=ws, num_splits=4)
    for b in range(B):
        ro, _ = attn_ref(q[b].transpose(0, 1), k[b].transpose(0, 1), v[b].transpose(0, 1), mask[b][None], 1 / math.sqrt(D))
        assert rel_l2(out[b, 0], ro[:, 0]) < 1e-2


@pytest.mark.parametrize("causal", [False, True])
def test_prefill(causal):
    B, Lq, Lkv, Hq, Hkv, D = 2, 150, 200, 16, 4, 128
    q, k, v = randn(B, Lq, Hq, D), randn(B, Lkv, Hkv, D), randn(B, Lkv, Hkv, D)
    out, lse = kjit.attention.prefill(q, k, v, causal=causal, return_lse=True)
    assert lse.shape == (B, Hq, Lq)
    keep = torch.ones(Lq, Lkv, dtype=torch.bool, device="cuda")
    if causal:
        keep &= torch.arange(Lkv, device="cuda")[None, :] <= torch.arange(Lq, device="cuda")[:, None] + Lkv - Lq
    for b in range(B):
        ro, rl = attn_ref(q[b].transpose(0, 1), k[b].transpose(0, 1), v[b].transpose(0, 1), keep, 1 / math.sqrt(D))
        assert rel_l2(out[b].transpose(0, 1), ro) < 1e-2
        assert rel_l2(lse[b], rl) < 1e-4


def make_paged(lens, page_size, Hkv, D, extra_pages=3):
    pages = [math.ceil(n / page_size) for n in lens]
    num_pages = sum(pages) + extra_pages
    perm = torch.randperm(num_pages, device="cuda", generator=GEN).int()
    indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0)), dtype=torch.int32, device="cuda")
    page_indices = perm[:sum(pages)].contiguous()
    last = torch.tensor([n - (p - 1) * page_size if p else 0 for n, p in zip(lens, pages)], dtype=torch.int32,
                        device="cuda")
    kp, vp = randn(num_pages, page_size, Hkv, D), randn(num_pages, page_size, Hkv, D)
    return kp, vp, indptr, page_indices, last


def gather(pool, indptr, page_indices, n, b, page_size):
    ids = page_indices[indptr[b]:indptr[b + 1]].long()
    return pool[ids].reshape(-1, *pool.shape[2:])[:n]


def test_paged_decode_and_append():
    lens, ps, Hq, Hkv, D = [33, 1, 64, 100], 16, 16, 4, 128
    kp, vp, indptr, pidx, last = make_paged(lens, ps, Hkv, D)
    B = len(lens)
    # append each request's last token through the op, then decode over the pools
    newk, newv = randn(B, Hkv, D), randn(B, Hkv, D)
    append_indptr = torch.arange(B + 1, dtype=torch.int32, device="cuda")
    kjit.attention.append_paged_kv(newk, newv, kp, vp, indptr, pidx, last, append_indptr=append_indptr)
    q = randn(B, 1, Hq, D)
    out = kjit.attention.paged_decode(q, kp, vp, indptr, pidx, last)
    for b, n in enumerate(lens):
        kb, vb = gather(kp, indptr, pidx, n, b, ps), gather(vp, indptr, pidx, n, b, ps)
        assert torch.equal(kb[n - 1], newk[b]) and torch.equal(vb[n - 1], newv[b])
        keep = torch.ones(1, n, dtype=torch.bool, device="cuda")
        ro, _ = attn_ref(q[b].transpose(0, 1), kb.transpose(0, 1), vb.transpose(0, 1), keep, 1 / math.sqrt(D))
        assert rel_l2(out[b, 0], ro[:, 0]) < 1e-2


class RaggedBatch:
    """A causal ragged batch over a paged cache (Hq = Hkv = 8), its host qo_indptr and random q."""

    def __init__(self, qlens, kvlens, ps, D):
        self.qlens, self.kvlens, self.ps, self.D = qlens, kvlens, ps, D
        self.kp, self.vp, self.indptr, self.pidx, self.last = make_paged(kvlens, ps, 8, D)
        self.qo = [0]
        for n in qlens:
            self.qo.append(self.qo[-1] + n)
        self.qo_dev = torch.tensor(self.qo, dtype=torch.int32, device="cuda")
        self.q = randn(self.qo[-1], 8, D)

    def run(self, plan, **kw):
        return kjit.attention.paged_prefill(self.q, self.qo_dev, self.kp, self.vp, self.indptr, self.pidx, self.last,
                                            plan, causal=True, **kw)

    def check(self, out):
        qo, ps = self.qo, self.ps
        for b, (nq, nk) in enumerate(zip(self.qlens, self.kvlens)):
            kb = gather(self.kp, self.indptr, self.pidx, nk, b, ps)
            vb = gather(self.vp, self.indptr, self.pidx, nk, b, ps)
            keep = torch.arange(nk, device="cuda")[None, :] <= torch.arange(nq, device="cuda")[:, None] + nk - nq
            ro, _ = attn_ref(self.q[qo[b]:qo[b + 1]].transpose(0, 1), kb.transpose(0, 1), vb.transpose(0, 1), keep,
                             1 / math.sqrt(self.D))
            assert rel_l2(out[qo[b]:qo[b + 1]].transpose(0, 1), ro) < 1e-2


# wgmma: the Hopper kernel forced (it runs 128-row tiles of head_dim 64/128 on sm_90a).
# tuned: tile_rows 0 with the KV layout's host copies, planned for the device (its tuning table
# when there is one).
@pytest.mark.parametrize("variant", ["auto", "mma", "wgmma", "tuned"])
def test_paged_prefill(variant):
    if variant == "wgmma" and SM != (9, 0):
        pytest.skip("the wgmma kernel needs sm_90a")
    r = RaggedBatch([70, 10, 130], [100, 10, 130], 16, 128)
    if variant == "tuned":
        plan = kjit.attention.plan_paged_prefill(r.qo, head_dim=128, device=torch.cuda.current_device(),
                                                 kv_indptr=r.indptr.cpu(), last_page_len=r.last.cpu(), q_heads=8,
                                                 page_size=r.ps, causal=True)
        assert plan.tile_rows in (64, 128) and plan.variant in ("auto", "mma", "wgmma")
    else:
        plan = kjit.attention.plan_paged_prefill(r.qo, head_dim=128, tile_rows=128, variant=variant)
        assert plan.variant == variant
    assert plan.total_q == r.qo[-1] and plan.batch == 3
    out, lse = r.run(plan, return_lse=True)
    assert lse.shape == (8, r.qo[-1])
    r.check(out)


# The persistent schedule (where the device runs the Hopper kernel): the plan's CTAs, capped by
# max_ctas, give the same result as a CTA per work item and head.
def test_paged_prefill_persistent_schedule():
    r = RaggedBatch([70, 10, 130, 1], [100, 10, 130, 40], 16, 128)
    # 128-row tiles forced (these short requests would get the mma.sync kernel's 64).
    kv = dict(tile_rows=128, kv_indptr=r.indptr.cpu(), last_page_len=r.last.cpu(), q_heads=8, page_size=r.ps,
              causal=True)
    dev = torch.cuda.current_device()
    grid = kjit.attention.plan_paged_prefill(r.qo, head_dim=128, device=dev, persistent=False, **kv)
    assert grid.ctas == 0
    r.check(r.run(grid))
    for cap in (0, 3):
        plan = kjit.attention.plan_paged_prefill(r.qo, head_dim=128, device=dev, max_ctas=cap, **kv)
        if SM != (9, 0) or plan.variant == "mma":
            assert plan.ctas == 0
            continue
        units = plan.num_work * 8
        assert plan.ctas == (min(cap, units) if cap else min(torch.cuda.get_device_properties(dev).multi_processor_count,
                                                             units))
        r.check(r.run(plan))


# TMA page loads (pages of 16, 128-row tiles) and the gather give the same result; on a device
# without the Hopper kernel a plan that asks for TMA raises Unsupported.
def test_paged_prefill_page_loads():
    r = RaggedBatch([70, 10, 130, 1], [256, 10, 131, 40], 16, 128)
    kv = dict(kv_indptr=r.indptr.cpu(), last_page_len=r.last.cpu(), q_heads=8, page_size=r.ps, causal=True)
    dev = torch.cuda.current_device()
    for load in kjit.attention.PAGE_LOADS:
        plan = kjit.attention.plan_paged_prefill(r.qo, head_dim=128, device=dev, page_load=load, **kv)
        assert plan.page_load == load
        if load == "tma":
            assert plan.tile_rows == 128
            if SM != (9, 0):
                with pytest.raises(kjit.Unsupported, match="page_load tma runs on the sm_90a wgmma kernel"):
                    r.run(plan)
                continue
        r.check(r.run(plan))


# The Hopper kernel's 192-row tiles at head_dim 64 (three consumer warpgroups); no mma.sync kernel
# runs them, so elsewhere the call raises Unsupported.
def test_paged_prefill_192_row_tiles():
    r = RaggedBatch([200, 1, 193], [260, 1, 193], 16, 64)
    plan = kjit.attention.plan_paged_prefill(r.qo, head_dim=64, tile_rows=192)
    assert plan.tile_rows == 192 and plan.num_work == 5
    if SM != (9, 0):
        with pytest.raises(kjit.Unsupported, match="tile_rows 64 or 128, the plan has 192"):
            r.run(plan)
        return
    r.check(r.run(plan))


# ---- MLA SWA decode ----------------------------------------------------------------------------------

def test_swa_decode():
    T, NH, HD, W, BS, slots = 6, 16, 512, 128, 64, 64 * 40
    q = randn(T, NH, HD)
    kv = (torch.randn(slots // BS, BS, HD, device="cuda", generator=GEN) * 2).to(torch.float8_e4m3fn).view(torch.uint8)
    inv = torch.exp2(torch.rand(slots, 1, device="cuda", generator=GEN) * 2 - 1).to(torch.bfloat16)
    idx = torch.randint(-1, slots, (T, W), device="cuda", generator=GEN)
    lens = torch.tensor([128, 0, 5, 64, 100, 128], dtype=torch.int64, device="cuda")
    out, lse = kjit.mla.swa_decode(q, kv, inv, idx, lens, return_lse=True)
    # A forced plan (16 heads per CTA, the window in 4 splits + the merge) in a workspace of the
    # size its plan gives.
    plan = kjit.mla.swa_decode_plan(q, kv, inv, idx, lens, num_splits=4, head_group=16)
    assert (plan.head_group, plan.num_splits, plan.split_len, plan.launches) == (16, 4, 32, 2)
    assert plan.ctas == T * (NH // 16) * 4 and plan.workspace_bytes > 0
    ws = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device="cuda")
    out4 = kjit.mla.swa_decode(q, kv, inv, idx, lens, num_splits=4, head_group=16, workspace=ws)
    scale = 1 / math.sqrt(HD)
    slot = idx.clamp(min=0)
    kd = (kv[slot // BS, slot % BS].view(torch.float8_e4m3fn).float() * inv[slot].float()).double()
    s = torch.einsum("thd,tjd->thj", q.double(), kd) * scale
    valid = (torch.arange(W, device="cuda")[None, :] < lens[:, None]) & (idx >= 0)
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    rl = torch.logsumexp(s, -1)
    ro = torch.einsum("thj,tjd->thd", torch.softmax(s, -1).nan_to_num(0.0), kd)
    for t in range(T):
        if not valid[t].any():
            assert out[t].abs().max() == 0 and out4[t].abs().max() == 0 and torch.isinf(lse[t]).all()
        else:
            assert rel_l2(out[t], ro[t]) < 1e-2
            assert rel_l2(out4[t], ro[t]) < 1e-2
            assert rel_l2(lse[t], rl[t]) < 1e-3
    # A cluster split (sm_90+): 4 CTAs of 32 positions per (token, 16 heads), one launch, no workspace.
    if SM >= (9, 0):
        plan = kjit.mla.swa_decode_plan(q, kv, inv, idx, lens, cluster_split=4)
        assert (plan.head_group, plan.cluster_split, plan.num_splits, plan.split_len, plan.launches) == (16, 4, 1, 32, 1)
        assert plan.ctas == T * (NH // 16) * 4 and plan.workspace_bytes == 0
        outc, lsec = kjit.mla.swa_decode(q, kv, inv, idx, lens, cluster_split=4, return_lse=True)
        for t in range(T):
            if not valid[t].any():
                assert outc[t].abs().max() == 0 and torch.isinf(lsec[t]).all()
            else:
                assert rel_l2(outc[t], ro[t]) < 1e-2
                assert rel_l2(lsec[t], rl[t]) < 1e-3


# ---- FP8 -------------------------------------------------------------------------------------------

needs_fp8 = pytest.mark.skipif(SM < (8, 9), reason="FP8 needs sm_89+")


@needs_fp8
@pytest.mark.parametrize("granularity", ["tensor", "row", "block1x128"])
def test_quantize(granularity):
    x = randn(64, 256, dtype=torch.float32) * 3
    y, scale_inv, amax = kjit.fp8.quantize(x, granularity=granularity, dynamic=granularity == "tensor")
    assert y.dtype == torch.float8_e4m3fn and y.shape == x.shape
    if granularity == "tensor":
        assert torch.allclose(amax, x.abs().max().reshape(1))
        s = scale_inv.expand(64, 256)
    elif granularity == "row":
        s = scale_inv[:, None].expand(64, 256)
    else:
        s = scale_inv.repeat_interleave(128, 1)
    deq = y.float() * s
    assert rel_l2(deq, x) < 0.05


@needs_fp8
def test_gemm_and_linear():
    M, N, K = 100, 256, 512
    a32, b32 = randn(M, K, dtype=torch.float32), randn(N, K, dtype=torch.float32)
    a, sa, _ = kjit.fp8.quantize(a32, granularity="row")
    b, sb, _ = kjit.fp8.quantize(b32, granularity="row")
    bias = randn(N)
    d = kjit.fp8.gemm(a, b, sa, sb, bias=bias)
    ref = (a.double() * sa.double()[:, None]) @ (b.double() * sb.double()[:, None]).T + bias.double()
    assert d.shape == (M, N) and d.dtype == torch.bfloat16
    assert rel_l2(d, ref) < 1e-2
    d32 = kjit.fp8.gemm(a, b, sa, sb, d=poison(torch.empty(M, N, device="cuda")), out_dtype="f32")
    assert rel_l2(d32, ref - bias.double()) < 1e-3
    lin = kjit.fp8.Linear(b32, max_tokens=128, recipe="dynamic_row")
    y = lin.forward(a32)
    assert rel_l2(y, a32.double() @ b32.double().T) < 0.05


@needs_fp8
def test_gemm_chain_captured_with_constant_weights():
    """A decode step's chain captured from torch's current stream: quantize, GEMM (b_constant),
    quantize of its output, GEMM. On sm_90 each GEMM is launched to overlap the kernel before it
    (programmatic dependent launch) and loads its first weight stages before waiting for it; a
    replay with new inputs must give what the new inputs give."""
    M, K, N1, N2 = 16, 512, 1024, 256
    w1, sw1, _ = kjit.fp8.quantize(randn(N1, K, dtype=torch.float32), granularity="row")
    w2, sw2, _ = kjit.fp8.quantize(randn(N2, N1, dtype=torch.float32), granularity="row")
    x = randn(M, K, dtype=torch.float32)
    a1 = torch.empty(M, K, device="cuda", dtype=torch.float8_e4m3fn)
    s1 = torch.empty(M, device="cuda")
    h = torch.empty(M, N1, device="cuda")
    a2 = torch.empty(M, N1, device="cuda", dtype=torch.float8_e4m3fn)
    s2 = torch.empty(M, device="cuda")
    out = torch.empty(M, N2, device="cuda", dtype=torch.bfloat16)

    def step():
        kjit.fp8.quantize(x, y=a1, granularity="row", scale_inv=s1)
        kjit.fp8.gemm(a1, w1, s1, sw1, d=h, out_dtype="f32", b_constant=True)
        kjit.fp8.quantize(h, y=a2, granularity="row", scale_inv=s2)
        kjit.fp8.gemm(a2, w2, s2, sw2, d=out, b_constant=True)

    step()  # compiles and loads outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(2):
        x.copy_(randn(M, K, dtype=torch.float32))
        poison(a1), poison(h), poison(a2), poison(out)
        graph.replay()
        torch.cuda.synchronize()
        assert rel_l2(a1.double() * s1.double()[:, None], x) < 0.05  # this replay's x
        ref_h = (a1.double() * s1.double()[:, None]) @ (w1.double() * sw1.double()[:, None]).T
        assert rel_l2(h, ref_h) < 1e-3
        ref = (a2.double() * s2.double()[:, None]) @ (w2.double() * sw2.double()[:, None]).T
        assert rel_l2(a2.double() * s2.double()[:, None], ref_h) < 0.05
        assert rel_l2(out, ref) < 1e-2


# ---- frameworks ----------------------------------------------------------------------------------------

def test_cupy_inputs():
    cupy = pytest.importorskip("cupy")
    # float32 in, FP8 out allocated by CuPy (as uint8: CuPy has no FP8 dtype), on CuPy's stream.
    if SM >= (8, 9):
        x = randn(32, 256, dtype=torch.float32)
        s = cupy.cuda.Stream()
        with s:
            y, scale_inv, _ = kjit.fp8.quantize(cupy.from_dlpack(x), granularity="row")
        s.synchronize()
        assert type(y).__module__.startswith("cupy") and y.dtype == cupy.uint8
        deq = torch.from_dlpack(y).view(torch.float8_e4m3fn).float() * torch.from_dlpack(scale_inv)[:, None]
        assert rel_l2(deq, x) < 0.05
    T, H, D = 9, 8, 128
    cos, sin = tables(256, D)
    pos = torch.randint(0, 256, (T,), device="cuda", generator=GEN)
    q = randn(T, H, D)
    ref = rope_ref(q, cos, sin, pos)
    try:
        q_cp = cupy.from_dlpack(q.clone())
    except Exception as e:  # a CuPy without bfloat16
        pytest.skip(f"CuPy cannot hold bf16: {e}")
    s = cupy.cuda.Stream()
    with s:
        kjit.rotary(q_cp, cupy.from_dlpack(cos), cupy.from_dlpack(sin), cupy.from_dlpack(pos))
    s.synchronize()
    assert rel_l2(torch.from_dlpack(q_cp), ref) < 4e-3


def test_jax_inputs():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX has no GPU backend here")
    T, H, D = 9, 8, 128
    cos, sin = tables(256, D)
    pos = torch.randint(0, 256, (T,), device="cuda", generator=GEN)
    q = randn(T, H, D)
    ref = rope_ref(q, cos, sin, pos)
    args = [jax.dlpack.from_dlpack(t) for t in (q, cos, sin, pos)]
    qo, _ = kjit.rotary(*args, inplace=False)  # JAX arrays are immutable: out of place, allocated in JAX
    assert "jax" in type(qo).__module__
    got = torch.from_dlpack(qo)
    assert rel_l2(got, ref) < 4e-3


def test_exchange_api_and_protocol_paths_agree():
    cos, sin = tables(256, 128)
    pos = torch.randint(0, 256, (7,), device="cuda", generator=GEN)
    q = randn(7, 8, 128)
    a, _ = kjit.rotary(q, cos, sin, pos, inplace=False)
    kjit._C._set_exchange_api_disabled(True)
    try:
        b, _ = kjit.rotary(q, cos, sin, pos, inplace=False)
    finally:
        kjit._C._set_exchange_api_disabled(False)
    torch.cuda.synchronize()
    assert torch.equal(a, b)


def test_stream_argument():
    cos, sin = tables(256, 128)
    pos = torch.randint(0, 256, (7,), device="cuda", generator=GEN)
    q = randn(7, 8, 128)
    ref, _ = kjit.rotary(q, cos, sin, pos, inplace=False)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    out = torch.empty_like(q)
    kjit.rotary(q, cos, sin, pos, q_out=out, stream=s)
    s.synchronize()
    assert torch.equal(out, ref)
    out2 = torch.empty_like(q)
    kjit.rotary(q, cos, sin, pos, q_out=out2, stream=s.cuda_stream)
    s.synchronize()
    assert torch.equal(out2, ref)


# ---- user kernels --------------------------------------------------------------------------------------

SAXPY = r"""
#include "kjit/config.cuh"
struct P { float* y; const float* x; float a; int n; };
template <int B> __global__ void __launch_bounds__(B) saxpy(KJIT_PARAMS P p) {
  const int i = blockIdx.x * B + threadIdx.x;
  if (i < p.n) p.y[i] += p.a * p.x[i];
}
"""


class SaxpyParams(ctypes.Structure):
    _fields_ = [("y", ctypes.c_void_p), ("x", ctypes.c_void_p), ("a", ctypes.c_float), ("n", ctypes.c_int)]


def test_user_kernel_launch():
    mod = kjit.Program(SAXPY, ["saxpy<256>"]).load()
    k = mod.kernel("saxpy<256>")
    assert k.param_bytes == ctypes.sizeof(SaxpyParams)
    assert k.info.registers > 0 and k.max_threads_per_block >= 256
    assert mod.compiled.target == kjit.device_target(0)
    n = 10000
    x, y = torch.randn(n, device="cuda", generator=GEN), torch.randn(n, device="cuda", generator=GEN)
    # float64 reference: the kernel contracts y + a*x into one FMA, torch rounds a*x first, so
    # float32 results differ by an ulp of a*x (far beyond allclose's rtol where y + a*x cancels).
    ref = y.double() + 2.5 * x.double()
    bound = 2.0 ** -23 * (y.double().abs() + 2.5 * x.double().abs())  # one rounding of the FMA
    stream = torch.cuda.current_stream()
    k.launch(((n + 255) // 256,), (256,), SaxpyParams(y.data_ptr(), x.data_ptr(), 2.5, n), stream=stream)
    torch.cuda.synchronize()
    err = (y.double() - ref).abs()
    assert (err <= bound).all(), f"max error {err.max().item():.3g} at {err.argmax().item()}"
    with pytest.raises(kjit.InvalidArgument, match="params of saxpy<256> are 24 bytes, got 8"):
        k.launch(1, 256, bytes(8))
    with pytest.raises(kjit.InvalidArgument):
        k.launch(1, 2048, SaxpyParams(y.data_ptr(), x.data_ptr(), 2.5, n))
    with pytest.raises(kjit.InvalidArgument):
        mod.kernel("saxpy<512>")


def test_user_program_target_rule():
    # A user program keeps the device's own target unless it says it needs no arch-specific
    # instructions (then the plain sm_XY, as kjit's own ops do: ProgramSpec::target_on).
    device = kjit.device_target(0)
    assert kjit.Program(SAXPY, ["saxpy<128>"]).load().compiled.target == device
    plain = kjit.Program(SAXPY, ["saxpy<128>"], arch_specific=False).load()
    assert plain.compiled.target == device.removesuffix("a")
    assert plain.kernel("saxpy<128>").max_threads_per_block >= 128
