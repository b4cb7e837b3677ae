#!/usr/bin/env python3
"""kjit rotary against PyTorch on one GPU, in one process, on the same tensors.

kjit runs through its Python package (kjit.rotary on the torch tensors, torch's current stream).
Each shape is first checked against a float64 torch reference (max bf16 ulp distance ≤ 1,
relative L2 ≤ 4e-3), then timed with triton.testing.do_bench (median), cycling through enough
input sets to exceed L2 several times over. Peers:
  torch complex: the usual PyTorch RoPE, view_as_complex → multiply → view_as_real (pairs
                 adjacent elements, i.e. GPT-J pairing), including the freqs_cis[positions] gather;
  torch neox:    real-arithmetic NeoX (half split) with cos/sin gathered by position.
Effective bytes (same for every implementation) = q (+ k) read + written, plus the cos and sin
rows of each token read once: 2 · numel(q, k) · 2 B + tokens · rotary_dim/2 · 4 B · 2.

Usage: bench_rotary.py [--json out.json]
"""
import argparse
import json
import math
import sys

from bench_common import require_gpu
import kjit
import torch

SHAPES = [
    # name, tokens, q_heads, kv_heads, head_dim
    ("T16384 H40 D128 (q only)", 16384, 40, 0, 128),
    ("Llama-3-8B T4096 Hq32 Hkv8 D128 (q+k)", 4096, 32, 8, 128),
]


def kjit_rotary(q, k, cos, sin, pos, neox=True):
    """kjit.rotary in place on q (and k) over the first 2 · cos.shape[1] features."""
    kjit.rotary(q, cos, sin, pos, k, rotary_dim=2 * cos.shape[1], style="neox" if neox else "gptj")


def tables(max_position, rotary_dim, theta=500000.0, device="cuda"):
    inv = theta ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim)
    ang = torch.arange(max_position, dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return torch.cos(ang).float().contiguous(), torch.sin(ang).float().contiguous()


def reference(x, cos, sin, pos, neox):
    """float64 RoPE from the exact bf16 inputs and f32 tables."""
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


def bf16_key(t):
    """bf16 bits → integers monotone in the value (so differences count ulps)."""
    b = t.contiguous().view(torch.int16).to(torch.int32)
    mag = b & 0x7FFF
    return torch.where(b < 0, -mag, mag)


def check(out, ref):
    max_ulp = (bf16_key(out) - bf16_key(ref.to(torch.bfloat16))).abs().max().item()
    rel = ((out.double() - ref).norm() / ref.norm()).item()
    return max_ulp, rel


def torch_complex(x, freqs_cis, pos):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs_cis[pos].unsqueeze(1)).flatten(-2).type_as(x)


def torch_neox(x, cos, sin, pos):
    half = cos.shape[1]
    c = cos[pos].unsqueeze(1)
    s = sin[pos].unsqueeze(1)
    x0, x1 = x[..., :half].float(), x[..., half:].float()
    return torch.cat((x0 * c - x1 * s, x1 * c + x0 * s), -1).to(x.dtype)


def bench(fn, sets):
    """Median ms of fn(set) over calls that cycle through `sets`."""
    state = {"i": 0}

    def step():
        fn(sets[state["i"] % len(sets)])
        state["i"] += 1

    try:
        import triton.testing
        return triton.testing.do_bench(step, warmup=25, rep=200, return_mode="median")
    except ImportError:
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        times = []
        for _ in range(100):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        times.sort()
        return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    require_gpu()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"device: {props.name}, L2 {l2 / 2**20:.0f} MiB, torch {torch.__version__}")

    results = []
    failures = 0
    for name, tokens, q_heads, kv_heads, head_dim in SHAPES:
        rd = head_dim
        max_pos = max(tokens, 8192)
        cos, sin = tables(max_pos, rd)
        freqs_cis = torch.complex(cos, sin)  # complex64 with the very same table values
        pos_t = torch.arange(tokens, device=dev, dtype=torch.int64)  # prefill: positions 0..T-1

        # Correctness, both pairings, random unsorted positions.
        pos_r = torch.randint(0, max_pos, (tokens,), device=dev, dtype=torch.int64)
        for neox in (True, False):
            q0 = torch.randn(tokens, q_heads, head_dim, device=dev).to(torch.bfloat16)
            k0 = torch.randn(tokens, kv_heads, head_dim, device=dev).to(torch.bfloat16) if kv_heads else None
            q1, k1 = q0.clone(), None if k0 is None else k0.clone()
            kjit_rotary(q1, k1, cos, sin, pos_r, neox=neox)
            torch.cuda.synchronize()
            for label, out, x in (("q", q1, q0), ("k", k1, k0)):
                if x is None:
                    continue
                max_ulp, rel = check(out, reference(x, cos, sin, pos_r, neox))
                ok = max_ulp <= 1 and rel <= 4e-3
                failures += 0 if ok else 1
                print(f"  check {name} {'neox' if neox else 'gptj'} {label}: max {max_ulp} ulp, "
                      f"rel_l2 {rel:.2e} {'ok' if ok else 'FAIL'}")
        # The complex-multiply peer computes the same GPT-J rotation (sanity check of the peer).
        q0 = torch.randn(tokens, q_heads, head_dim, device=dev).to(torch.bfloat16)
        _, rel = check(torch_complex(q0, freqs_cis, pos_r), reference(q0, cos, sin, pos_r, False))
        print(f"  check torch complex vs float64: rel_l2 {rel:.2e}")

        set_bytes = tokens * (q_heads + kv_heads) * head_dim * 2
        n_sets = max(2, min(64, math.ceil(4 * l2 / set_bytes)))
        sets = []
        for _ in range(n_sets):
            q = torch.randn(tokens, q_heads, head_dim, device=dev).to(torch.bfloat16)
            k = torch.randn(tokens, kv_heads, head_dim, device=dev).to(torch.bfloat16) if kv_heads else None
            sets.append((q, k))
        eff_bytes = 2 * set_bytes + tokens * (rd // 2) * 4 * 2

        def run_kjit(s):
            kjit_rotary(s[0], s[1], cos, sin, pos_t, neox=True)

        def run_complex(s):
            torch_complex(s[0], freqs_cis, pos_t)
            if s[1] is not None:
                torch_complex(s[1], freqs_cis, pos_t)

        def run_neox(s):
            torch_neox(s[0], cos, sin, pos_t)
            if s[1] is not None:
                torch_neox(s[1], cos, sin, pos_t)

        t_kjit = bench(run_kjit, sets)
        t_complex = bench(run_complex, sets)
        t_neox = bench(run_neox, sets)
        tbs = lambda ms: eff_bytes / (ms * 1e-3) / 1e12
        r = {
            "shape": name, "tokens": tokens, "q_heads": q_heads, "kv_heads": kv_heads,
            "head_dim": head_dim, "rotary_dim": rd, "input_sets": n_sets,
            "effective_bytes": eff_bytes,
            "kjit_us": t_kjit * 1e3, "kjit_tbs": tbs(t_kjit),
            "torch_complex_us": t_complex * 1e3, "torch_complex_tbs": tbs(t_complex),
            "torch_neox_us": t_neox * 1e3, "torch_neox_tbs": tbs(t_neox),
            "ratio_vs_torch_complex": t_complex / t_kjit,
            "ratio_vs_torch_neox": t_neox / t_kjit,
        }
        results.append(r)

    print()
    print(f"{'shape':<40} {'kjit us':>9} {'kjit TB/s':>10} {'complex TB/s':>13} {'neox TB/s':>10} "
          f"{'x complex':>10} {'x neox':>8}")
    for r in results:
        print(f"{r['shape']:<40} {r['kjit_us']:>9.1f} {r['kjit_tbs']:>10.2f} {r['torch_complex_tbs']:>13.3f} "
              f"{r['torch_neox_tbs']:>10.3f} {r['ratio_vs_torch_complex']:>10.1f} {r['ratio_vs_torch_neox']:>8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "results": results, "check_failures": failures}, f, indent=2)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
