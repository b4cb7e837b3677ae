"""kjit.torch: the ops as torch library ops, in a small decode step run eagerly, under
torch.compile(fullgraph=True) and captured in a CUDA graph. Skipped without torch or a device."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

import kjit  # noqa: E402
import kjit.torch  # noqa: E402,F401  (registers torch.ops.kjit)

B, HQ, HKV, D, L, MAXPOS = 4, 16, 4, 128, 512, 4096


def tables():
    inv = 500000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64, device="cuda") / D)
    ang = torch.arange(MAXPOS, dtype=torch.float64, device="cuda")[:, None] * inv[None, :]
    return torch.cos(ang).float().contiguous(), torch.sin(ang).float().contiguous()


def decode_step(x, wq, cos, sin, pos, k_cache, v_cache, lens):
    """One toy decode step: project, RoPE, attend over the cache, reduce."""
    q = (x @ wq).view(B, HQ, D).to(torch.bfloat16).contiguous()
    torch.ops.kjit.rotary_(q, cos, sin, pos)
    out = torch.ops.kjit.decode(q.view(B, 1, HQ, D), k_cache, v_cache, lens)
    return out.float().sum(dim=(1, 2)) * 0.5


@pytest.fixture
def inputs():
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(B, 256, device="cuda", generator=g)
    wq = torch.randn(256, HQ * D, device="cuda", generator=g) * 0.05
    cos, sin = tables()
    pos = torch.randint(0, MAXPOS, (B,), device="cuda", generator=g)
    k = torch.randn(B, L, HKV, D, device="cuda", generator=g).to(torch.bfloat16)
    v = torch.randn(B, L, HKV, D, device="cuda", generator=g).to(torch.bfloat16)
    lens = torch.tensor([512, 100, 1, 300], dtype=torch.int32, device="cuda")
    return x, wq, cos, sin, pos, k, v, lens


def test_ops_match_the_direct_api(inputs):
    x, wq, cos, sin, pos, k, v, lens = inputs
    q = (x @ wq).view(B, HQ, D).to(torch.bfloat16).contiguous()
    q2 = q.clone()
    torch.ops.kjit.rotary_(q, cos, sin, pos)
    kjit.rotary(q2, cos, sin, pos)
    a = torch.ops.kjit.decode(q.view(B, 1, HQ, D), k, v, lens)
    b = kjit.attention.decode(q2.view(B, 1, HQ, D), k, v, lens)
    torch.cuda.synchronize()
    assert torch.equal(q, q2) and torch.equal(a, b)
    out, lse = torch.ops.kjit.decode_lse(q.view(B, 1, HQ, D), k, v, lens)
    assert lse.shape == (B, HQ) and torch.equal(out, a)


def test_torch_compile_fullgraph(inputs):
    eager = decode_step(*inputs)
    torch._dynamo.reset()
    compiled = torch.compile(decode_step, fullgraph=True)
    got = compiled(*inputs)
    torch.cuda.synchronize()
    assert torch.allclose(got, eager, rtol=1e-3, atol=1e-3)


def test_fake_tensors_give_shapes(inputs):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = [mode.from_tensor(t) for t in inputs]
        out = decode_step(*fake)
    assert out.shape == (B, D)


def test_cuda_graph_capture(inputs):
    x, wq, cos, sin, pos, k, v, lens = inputs
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # warm-up: compiles, loads, workspaces
            decode_step(*inputs)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = decode_step(*inputs)
    # New inputs in the same buffers, replay, compare with eager.
    x.copy_(torch.randn_like(x))
    pos.copy_(torch.randint(0, MAXPOS, (B,), device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(static_out, decode_step(*inputs), rtol=1e-3, atol=1e-3)


def test_direct_api_in_cuda_graph(inputs):
    """The direct kjit calls capture too (workspace from torch's allocator, current stream)."""
    x, wq, cos, sin, pos, k, v, lens = inputs
    q = torch.randn(B, 1, HQ, D, device="cuda").to(torch.bfloat16)
    out = torch.empty_like(q)
    kjit.attention.decode(q, k, v, lens, out=out, num_splits=4)  # compile and load outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kjit.attention.decode(q, k, v, lens, out=out, num_splits=4)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, kjit.attention.decode(q, k, v, lens, num_splits=4))


def test_quantize_and_gemm_ops():
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 needs sm_89+")
    a32 = torch.randn(64, 256, device="cuda")
    b32 = torch.randn(128, 256, device="cuda")
    a, sa = torch.ops.kjit.fp8_quantize(a32, "e4m3", "row")
    b, sb = torch.ops.kjit.fp8_quantize(b32, "e4m3", "row")
    d = torch.ops.kjit.fp8_gemm(a, b, sa, sb)
    ref = a32 @ b32.T
    assert d.dtype == torch.bfloat16 and ((d.float() - ref).norm() / ref.norm()) < 0.05

    def f(a32, b32):
        a, sa = torch.ops.kjit.fp8_quantize(a32, "e4m3", "row")
        b, sb = torch.ops.kjit.fp8_quantize(b32, "e4m3", "row")
        return torch.ops.kjit.fp8_gemm(a, b, sa, sb, None, torch.float32)

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True)(a32, b32)
    assert got.dtype == torch.float32 and ((got - ref).norm() / ref.norm()) < 0.05
