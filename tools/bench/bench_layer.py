#!/usr/bin/env python3
"""One FP8 decoder layer of a 70B-class model, kjit's stack beside the best peer stack, in one
process on one GPU: the whole layer captured in one CUDA graph per stack, and every op alone.

    python3 tools/bench/bench_layer.py [--json out.json] [--seed N] [--batches 1,8,32,128]
        [--mixed-batches 8,32,128] [--kv-len 4096] [--prefill-cached 2048] [--no-decode] [--no-prefill]
        [--no-ops] [--no-fi] [--no-fast-accum] [--reps 200] [--op-reps 100]
    python3 tools/bench/bench_layer.py --prebuild     # FlashInfer's modules for this script, then exit

The layer (tools/bench/layer_model.py has the shapes, the cases and the floors): hidden 8192, 64
query / 8 KV heads of 128, FFN 28672, e4m3 weights with a per-tensor scale, activations quantized
per tensor at run time, a paged bf16 KV cache of 16-token pages (random page order, spare pages,
unused slots and the slots of this step's tokens NaN before the step). Cases: decode steps at
batch 1, 8, 32, 128 with 4096 tokens attended per request (4095 cached + the one appended), the
same at mixed lengths (mean 4096), and a prefill chunk of 8 requests × 512 new tokens on 2048
cached (ragged paged prefill, causal, 2560 keys per request), whose GEMMs run at M = 4096.

Per step, in order (the same work in both stacks):
  op            kjit stack                              peer stack
  RMSNorm       torch F.rms_norm                        the same
  quantize      kjit.fp8.quantize (dynamic, per tensor) torch: amax → 448 / amax → x · scale, clamp,
                                                        cast to float8_e4m3fn (≈ 9 kernels)
  QKV GEMM      kjit.fp8.gemm (b_constant: PDL prologue) torch._scaled_mm (cuBLASLt), per-tensor
                                                        scales, use_fast_accum=True (kjit's wgmma
                                                        kernel accumulates without promotion too;
                                                        --no-fast-accum: torch's default)
  rotary        kjit.rotary in place on q, k (NeoX)     torch: the NeoX rotation in f32 over q ‖ k as
                                                        one [M, 72, 128] view, cos/sin gathered by
                                                        position, cast to bf16
  append k, v   kjit.attention.append_paged_kv          torch index_copy_ into the page pools (the
                                                        FlashInfer kit has no page-append module)
  attention     kjit.attention.paged_decode /           FlashInfer: decode the faster of
                plan_paged_prefill + paged_prefill      BatchDecodeWithPagedKVCacheWrapper with
                                                        use_tensor_cores False / True (backend fa2,
                                                        each timed alone, both reported); prefill
                                                        BatchPrefillWithPagedKVCacheWrapper fa3
  O GEMM, residual + RMSNorm, quantize, gate/up GEMM (57344 × 8192), SiLU · mul (torch in both),
  quantize, down GEMM (8192 × 28672), residual: as above.
Each stack appends into its own copy of the pages; every plan() runs before the capture. Without
FlashInfer (not importable, or --no-fi) the peer's attention is kjit's, and the tables say so: the
GEMM, quantize and rotary comparison still stands.

Checks, after one replay of each layer graph (relative L2 of kjit's tensor against the peer's,
tolerances in layer_model.TOLERANCES): q and k after rotary, the k/v rows written into the pages,
the attention output, the O projection, and out − x. A NaN anywhere fails them.

Timing: CUDA events around each replay of a layer graph, the L2 flushed (a write of twice its size)
before every replay, as the other layers' weights would leave it; median of --reps replays after
warm-up. Op by op: each op alone in its own graph, timed by events recorded inside the graph
around the op (so without the graph launch; around the replay where this torch lacks external
events), the L2 flushed before each, median of --op-reps. The sum of the ops beside the layer
shows what running them back to back (PDL, warm activations) saves. Floors: layer_model (bytes
over the DRAM bandwidth or FLOPs over the dense peak, the device's row: H200 if its name says
so, else H100). ratio = peer µs / kjit µs (> 1: kjit faster).

--prebuild builds the FlashInfer modules the script uses (decode on CUDA cores and on tensor
cores, fa3 prefill; head_dim 128, bf16) by planning a tiny call of each, in three child processes
side by side; run it first where FlashInfer's JIT workspace is cold (h200_session.sh does).

Prints one table per case and a summary; --json writes every figure (rewritten after each case).
Exit status 0 when every check agreed and every case ran.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

from bench_common import arg_parser, cannot_run, capture_graph, rel_l2, require_gpu, seeded_generator  # first
import kjit
import torch
import torch.nn.functional as F

import layer_model as lm
from layer_model import E4M3_MAX, FFN, HEAD_DIM, HIDDEN, KV_HEADS, PAGE, Q_HEADS, QKV_N

BF16, F32, E4M3 = torch.bfloat16, torch.float32, torch.float8_e4m3fn
QD = Q_HEADS * HEAD_DIM    # 8192: q columns of the QKV output
QKD = QD + KV_HEADS * HEAD_DIM  # 9216: q and k columns
FI_WS_BYTES = 256 << 20
SPARE_PAGES = 4
NORM_EPS = 1e-5
FI_DECODE_VARIANTS = ("decode", "decode-tc")  # CUDA cores, tensor cores (backend fa2 both)


def log(*a):
    print(*a, flush=True)


def short_err(e):
    s = f"{type(e).__name__}: {e}"
    return s if len(s) < 400 else s[:400] + " ..."


# ---- timing ---------------------------------------------------------------------------------------

class Timer:
    """CUDA-graph timing with the L2 flushed before every replay (see the module doc)."""

    def __init__(self, reps, op_reps, warmup):
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        l2 = getattr(props, "L2_cache_size", 50 << 20)
        self.flush_buf = torch.empty(max(2 * l2, 64 << 20), dtype=torch.uint8, device="cuda")
        self.reps, self.op_reps, self.warmup = reps, op_reps, warmup
        self.in_graph_events, self.why_not = self._probe_in_graph_events()

    def flush(self):
        self.flush_buf.zero_()

    @staticmethod
    def capture(fn):
        """fn() captured into a CUDA graph (bench_common.capture_graph)."""
        return capture_graph(fn)

    def _probe_in_graph_events(self):
        """Whether events recorded inside a graph (torch.cuda.Event(external=True)) time what lies
        between them on each replay: the events are first recorded around 200 kernels outside the
        graph, then one replay around one kernel must leave a much shorter interval."""
        try:
            x = torch.zeros(1 << 20, device="cuda")
            a = torch.cuda.Event(enable_timing=True, external=True)
            b = torch.cuda.Event(enable_timing=True, external=True)

            def body():
                a.record()
                x.add_(1.0)
                b.record()

            g = self.capture(body)
            a.record()
            for _ in range(200):
                x.add_(1.0)
            b.record()
            torch.cuda.synchronize()
            stale = a.elapsed_time(b)
            g.replay()
            torch.cuda.synchronize()
            t = a.elapsed_time(b)
            if not (math.isfinite(t) and 0 < t < stale / 4):
                return False, f"a replay left {t:.4f} ms between the events (200 kernels outside: {stale:.4f} ms)"
            return True, ""
        except Exception as e:  # an older torch: time around the replay instead
            return False, short_err(e)

    def time_graph(self, graph, reps):
        """Median µs of graph.replay() between events recorded around it."""
        for _ in range(self.warmup):
            self.flush()
            graph.replay()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for a, b in events:
            self.flush()
            a.record()
            graph.replay()
            b.record()
        torch.cuda.synchronize()
        return statistics.median(a.elapsed_time(b) * 1e3 for a, b in events)

    def time_layer(self, graph):
        return self.time_graph(graph, self.reps)

    def time_op(self, fn):
        """Median µs of fn() alone, captured in its own graph (see the module doc)."""
        if not self.in_graph_events:
            graph = self.capture(fn)
            us = self.time_graph(graph, self.op_reps)
            del graph
            return us
        a = torch.cuda.Event(enable_timing=True, external=True)
        b = torch.cuda.Event(enable_timing=True, external=True)

        def body():
            a.record()
            fn()
            b.record()

        graph = self.capture(body)
        times = []
        for i in range(self.warmup + self.op_reps):
            self.flush()
            graph.replay()
            torch.cuda.synchronize()
            if i >= self.warmup:
                times.append(a.elapsed_time(b) * 1e3)
        del graph
        return statistics.median(times)


# ---- inputs ----------------------------------------------------------------------------------------

class Weights:
    """The layer's four weights, e4m3 [N, K] with a [1] f32 dequant scale each (bf16 N(0, 1/K)
    quantized by amax / 448), and the two RMSNorm weights (bf16, 1 + N(0, 0.1))."""

    def __init__(self, gen):
        self.fp8, self.scale = {}, {}
        for name, (n, k) in lm.GEMMS.items():
            w = torch.randn(n, k, device="cuda", dtype=BF16, generator=gen).mul_(1.0 / math.sqrt(k))
            scale = (w.abs().amax().float() / E4M3_MAX).reshape(1).contiguous()
            self.fp8[name] = (w.float() / scale).clamp_(-E4M3_MAX, E4M3_MAX).to(E4M3)
            self.scale[name] = scale
            del w
            torch.cuda.empty_cache()
        self.norm1 = (1 + 0.1 * torch.randn(HIDDEN, device="cuda", generator=gen)).to(BF16)
        self.norm2 = (1 + 0.1 * torch.randn(HIDDEN, device="cuda", generator=gen)).to(BF16)


def rope_tables(max_position):
    """cos, sin [max_position, HEAD_DIM / 2] f32 (theta 500000), computed in float64."""
    inv = lm.ROPE_THETA ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64, device="cuda") / HEAD_DIM)
    ang = torch.arange(max_position, dtype=torch.float64, device="cuda")[:, None] * inv[None, :]
    return torch.cos(ang).float().contiguous(), torch.sin(ang).float().contiguous()


class Paged:
    """The page table of `case` (kv_lens[b] tokens for request b, its q_lens[b] new tokens the last
    ones) and one pair of K/V pools per stack, equal before the step: the cached tokens random, every
    other slot (spare pages, the tails of last pages, the new tokens' slots) NaN."""

    def __init__(self, case, gen):
        page = PAGE
        pages_per = [(n + page - 1) // page for n in case.kv_lens]
        total = sum(pages_per)
        self.num_pages = total + SPARE_PAGES
        perm = torch.randperm(self.num_pages, device="cuda", generator=gen).to(torch.int32)
        self.indices = perm[:total].contiguous()
        self.indptr_host = [0]
        for p in pages_per:
            self.indptr_host.append(self.indptr_host[-1] + p)
        self.last_host = [n - (p - 1) * page for n, p in zip(case.kv_lens, pages_per)]
        self.qo_indptr_host = [0]
        for q in case.q_lens:
            self.qo_indptr_host.append(self.qo_indptr_host[-1] + q)
        dev = dict(device="cuda", dtype=torch.int32)
        self.indptr = torch.tensor(self.indptr_host, **dev)
        self.last = torch.tensor(self.last_host, **dev)
        self.qo_indptr = torch.tensor(self.qo_indptr_host, **dev)  # also append_paged_kv's append_indptr
        self.max_kv = max(case.kv_lens)
        # Pool row (page id · page + slot) of every token, requests in order.
        ids = self.indices.long()
        cached, new, positions = [], [], []
        for b, (n, q) in enumerate(zip(case.kv_lens, case.q_lens)):
            j = torch.arange(n, device="cuda")
            rows = ids[self.indptr_host[b] + j // page] * page + j % page
            cached.append(rows[:n - q])
            new.append(rows[n - q:])
            positions.append(j[n - q:])
        self.new_rows = torch.cat(new)             # [tokens] int64, the step's tokens in order
        self.positions = torch.cat(positions)      # [tokens] int64, their positions (rotary)
        cached = torch.cat(cached)
        shape = (self.num_pages, page, KV_HEADS, HEAD_DIM)
        self.pools = {}
        k = torch.full(shape, float("nan"), device="cuda", dtype=BF16)
        v = torch.full(shape, float("nan"), device="cuda", dtype=BF16)
        for pool in (k, v):
            pool.view(-1, KV_HEADS, HEAD_DIM)[cached] = torch.randn(len(cached), KV_HEADS, HEAD_DIM, device="cuda",
                                                                    dtype=BF16, generator=gen)
        self.pools["kjit"] = (k, v)
        self.pools["peer"] = (k.clone(), v.clone())

    def rows(self, stack):
        """The k and v rows of the step's tokens in `stack`'s pools: [2 · tokens, KV_HEADS, HEAD_DIM]."""
        k, v = self.pools[stack]
        return torch.cat([k.view(-1, KV_HEADS, HEAD_DIM)[self.new_rows], v.view(-1, KV_HEADS, HEAD_DIM)[self.new_rows]])


def rms_norm(x, w):
    return F.rms_norm(x, (HIDDEN,), w, NORM_EPS)


# ---- attention implementations -----------------------------------------------------------------------

class KjitAttention:
    """kjit's paged decode (decode cases) or ragged paged prefill (prefill cases), q [M, Hq, D] and
    out [M, Hq, D] (views allowed), over the pools given to run()."""

    def __init__(self, case, paged, label="kjit"):
        self.case, self.paged, self.label, self.variant = case, paged, label, "kjit"
        m = case.tokens
        k, v = paged.pools["kjit"]
        if case.kind == "decode":
            q = torch.empty(m, 1, Q_HEADS, HEAD_DIM, device="cuda", dtype=BF16)  # shapes only
            nbytes = kjit.attention.paged_decode_workspace_bytes(q, k, v, paged.indptr, paged.indices, paged.last,
                                                                 kv_len_hint=paged.max_kv)
            self.ws = torch.empty(max(nbytes, 16), dtype=torch.uint8, device="cuda")
        else:
            self.plan = kjit.attention.plan_paged_prefill(
                paged.qo_indptr_host, HEAD_DIM, 0, torch.cuda.current_device(), kv_indptr=paged.indptr_host,
                last_page_len=paged.last_host, q_heads=Q_HEADS, page_size=PAGE, causal=True, kv_heads=KV_HEADS)

    def describe(self):
        if self.case.kind == "decode":
            return f"{self.label} (workspace {self.ws.numel()} B)"
        return (f"{self.label} (plan: {self.plan.variant}, {self.plan.tile_rows}-row tiles, {self.plan.num_work} items, "
                f"q heads packed by {self.plan.pack_group})")

    def run(self, q, kp, vp, out):
        p = self.paged
        if self.case.kind == "decode":
            kjit.attention.paged_decode(q.unsqueeze(1), kp, vp, p.indptr, p.indices, p.last, out=out.unsqueeze(1),
                                        kv_len_hint=p.max_kv, workspace=self.ws)
        else:
            kjit.attention.paged_prefill(q, p.qo_indptr, kp, vp, p.indptr, p.indices, p.last, self.plan, causal=True,
                                         out=out)


class FlashInferAttention:
    """FlashInfer's paged decode ("decode": CUDA cores, "decode-tc": tensor cores, backend fa2) or
    ragged paged prefill (backend "fa3" or "fa2"), planned here (before any capture)."""

    LABELS = {"decode": "FlashInfer decode (CUDA cores)", "decode-tc": "FlashInfer decode (tensor cores)",
              "fa3": "FlashInfer fa3", "fa2": "FlashInfer fa2"}

    def __init__(self, fi, ws, case, paged, variant):
        self.variant, self.label = variant, self.LABELS[variant]
        if variant in FI_DECODE_VARIANTS:
            self.w = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=variant == "decode-tc",
                                                           backend="fa2")
            self.w.plan(paged.indptr, paged.indices, paged.last, Q_HEADS, KV_HEADS, HEAD_DIM, PAGE,
                        q_data_type=BF16, kv_data_type=BF16)
        else:
            self.w = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=variant)
            self.w.plan(paged.qo_indptr, paged.indptr, paged.indices, paged.last, Q_HEADS, KV_HEADS, HEAD_DIM, PAGE,
                        causal=True, q_data_type=BF16, kv_data_type=BF16)

    def describe(self):
        return self.label

    def run(self, q, kp, vp, out):
        self.w.run(q, (kp, vp), out=out)


# ---- the two stacks ----------------------------------------------------------------------------------

class Stack:
    """A layer as the ops of layer_model.OPS, each a method op_<key>(env) reading what earlier ops
    left in `env` (a dict) or in the stack's own buffers."""

    def run(self, env, keys=lm.OP_KEYS):
        for key in keys:
            getattr(self, "op_" + key)(env)
        return env

    def op(self, key):
        return getattr(self, "op_" + key)


class KjitStack(Stack):
    name = "kjit"

    def __init__(self, case, x, weights, rope, paged, attention):
        m = case.tokens
        self.m, self.x, self.w, self.paged, self.attention = m, x, weights, paged, attention
        self.cos, self.sin = rope

        def empty(*shape, dtype=BF16):
            return torch.empty(*shape, device="cuda", dtype=dtype)

        self.qkv = empty(m, QKV_N)
        self.q = self.qkv[:, :QD].view(m, Q_HEADS, HEAD_DIM)
        self.k = self.qkv[:, QD:QKD].view(m, KV_HEADS, HEAD_DIM)
        self.v = self.qkv[:, QKD:].view(m, KV_HEADS, HEAD_DIM)
        self.kp, self.vp = paged.pools["kjit"]
        self.attn = empty(m, Q_HEADS, HEAD_DIM)
        self.o, self.gu, self.down = empty(m, HIDDEN), empty(m, 2 * FFN), empty(m, HIDDEN)
        # quantized activation, its scale_inv and amax, per quantize point
        self.fp8 = {key: (empty(m, cols, dtype=E4M3), empty(1, dtype=F32), empty(1, dtype=F32))
                    for key, cols in (("h", HIDDEN), ("attn", HIDDEN), ("h2", HIDDEN), ("act", FFN))}

    def quantize(self, key, x):
        y, scale_inv, amax = self.fp8[key]
        kjit.fp8.quantize(x, y=y, scale_inv=scale_inv, amax=amax, dynamic=True)

    def gemm(self, key, name, d):
        a, scale_inv, _ = self.fp8[key]
        kjit.fp8.gemm(a, self.w.fp8[name], scale_inv, self.w.scale[name], d=d, b_constant=True)

    def op_norm1(self, env):
        env["h"] = rms_norm(self.x, self.w.norm1)

    def op_quant_x(self, env):
        self.quantize("h", env["h"])

    def op_qkv(self, env):
        self.gemm("h", "qkv", self.qkv)

    def op_rotary(self, env):
        kjit.rotary(self.q, self.cos, self.sin, self.paged.positions, self.k, rotary_dim=HEAD_DIM, style="neox")

    def op_append(self, env):
        p = self.paged
        kjit.attention.append_paged_kv(self.k, self.v, self.kp, self.vp, p.indptr, p.indices, p.last,
                                       append_indptr=p.qo_indptr)

    def op_attention(self, env):
        self.attention.run(self.q, self.kp, self.vp, self.attn)

    def op_quant_attn(self, env):
        self.quantize("attn", self.attn.view(self.m, HIDDEN))

    def op_o(self, env):
        self.gemm("attn", "o", self.o)

    def op_norm2(self, env):
        env["x2"] = self.x + self.o
        env["h2"] = rms_norm(env["x2"], self.w.norm2)

    def op_quant_h2(self, env):
        self.quantize("h2", env["h2"])

    def op_gate_up(self, env):
        self.gemm("h2", "gate_up", self.gu)

    def op_act(self, env):
        env["act"] = F.silu(self.gu[:, :FFN]) * self.gu[:, FFN:]

    def op_quant_act(self, env):
        self.quantize("act", env["act"])

    def op_down(self, env):
        self.gemm("act", "down", self.down)

    def op_residual(self, env):
        env["out"] = env["x2"] + self.down

    def checkpoints(self, env):
        return {"qk_rotary": self.qkv[:, :QKD], "kv_append": self.paged.rows("kjit"),
                "attention": self.attn.view(self.m, HIDDEN), "o_proj": self.o,
                "layer_delta": env["out"].float() - self.x.float()}


class PeerStack(Stack):
    name = "peer"

    def __init__(self, case, x, weights, rope, paged, attention, fast_accum):
        m = case.tokens
        self.m, self.x, self.w, self.paged, self.attention = m, x, weights, paged, attention
        self.cos, self.sin = rope
        self.fast_accum = fast_accum
        self.kp, self.vp = paged.pools["peer"]
        self.attn = torch.empty(m, Q_HEADS, HEAD_DIM, device="cuda", dtype=BF16)
        self.fp8_max = torch.full((1,), E4M3_MAX, device="cuda", dtype=F32)
        self.pad = self._padding(m)

    def _padding(self, m):
        """None where torch._scaled_mm takes M rows as they are; else {K: a zeroed [M rounded up to
        16, K] e4m3 buffer} the activations are copied into (some torch versions want M % 16 == 0)."""
        a = torch.zeros(m, 32, device="cuda", dtype=E4M3)
        b = torch.zeros(32, 32, device="cuda", dtype=E4M3)
        one = torch.ones(1, device="cuda", dtype=F32)
        try:
            torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=BF16)
            return None
        except RuntimeError:
            mp = (m + 15) // 16 * 16
            return {k: torch.zeros(mp, k, device="cuda", dtype=E4M3) for k in {k for _, k in lm.GEMMS.values()}}

    def quantize(self, x):
        """Per-tensor e4m3 as a straightforward torch implementation does it: (y, scale_inv)."""
        amax = x.abs().amax().float().clamp_min(1e-12).reshape(1)
        scale = torch.div(self.fp8_max, amax)  # IEEE division, as kjit's multiplier
        y = torch.mul(x, scale).clamp_(-E4M3_MAX, E4M3_MAX).to(E4M3)  # bf16 · f32 [1] -> f32
        return y, torch.reciprocal(scale)

    def gemm(self, a, scale_inv, name):
        w, m = self.w.fp8[name], self.m
        if self.pad is not None:
            buf = self.pad[w.shape[1]]
            buf[:m].copy_(a)
            a = buf
        out = torch._scaled_mm(a, w.t(), scale_a=scale_inv, scale_b=self.w.scale[name], out_dtype=BF16,
                               use_fast_accum=self.fast_accum)
        out = out[0] if isinstance(out, tuple) else out
        return out if self.pad is None else out[:m]

    def op_norm1(self, env):
        env["h"] = rms_norm(self.x, self.w.norm1)

    def op_quant_x(self, env):
        env["hq"], env["hs"] = self.quantize(env["h"])

    def op_qkv(self, env):
        env["qkv"] = self.gemm(env["hq"], env["hs"], "qkv")

    def op_rotary(self, env):
        m, half = self.m, HEAD_DIM // 2
        qk = env["qkv"][:, :QKD].view(m, Q_HEADS + KV_HEADS, HEAD_DIM)
        pos = self.paged.positions
        c, s = self.cos[pos].unsqueeze(1), self.sin[pos].unsqueeze(1)  # [M, 1, D/2] f32
        x0, x1 = qk[..., :half], qk[..., half:]
        env["qk"] = torch.cat((x0 * c - x1 * s, x1 * c + x0 * s), dim=-1).to(BF16)
        env["q"], env["k"] = env["qk"][:, :Q_HEADS], env["qk"][:, Q_HEADS:]
        env["v"] = env["qkv"][:, QKD:].view(m, KV_HEADS, HEAD_DIM)

    def op_append(self, env):
        rows = self.paged.new_rows
        self.kp.view(-1, KV_HEADS, HEAD_DIM).index_copy_(0, rows, env["k"])
        self.vp.view(-1, KV_HEADS, HEAD_DIM).index_copy_(0, rows, env["v"])

    def op_attention(self, env):
        self.attention.run(env["q"], self.kp, self.vp, self.attn)

    def op_quant_attn(self, env):
        env["aq"], env["as"] = self.quantize(self.attn.view(self.m, HIDDEN))

    def op_o(self, env):
        env["o"] = self.gemm(env["aq"], env["as"], "o")

    def op_norm2(self, env):
        env["x2"] = self.x + env["o"]
        env["h2"] = rms_norm(env["x2"], self.w.norm2)

    def op_quant_h2(self, env):
        env["h2q"], env["h2s"] = self.quantize(env["h2"])

    def op_gate_up(self, env):
        env["gu"] = self.gemm(env["h2q"], env["h2s"], "gate_up")

    def op_act(self, env):
        env["act"] = F.silu(env["gu"][:, :FFN]) * env["gu"][:, FFN:]

    def op_quant_act(self, env):
        env["cq"], env["cs"] = self.quantize(env["act"])

    def op_down(self, env):
        env["down"] = self.gemm(env["cq"], env["cs"], "down")

    def op_residual(self, env):
        env["out"] = env["x2"] + env["down"]

    def checkpoints(self, env):
        return {"qk_rotary": env["qk"].reshape(self.m, QKD), "kv_append": self.paged.rows("peer"),
                "attention": self.attn.view(self.m, HIDDEN), "o_proj": env["o"],
                "layer_delta": env["out"].float() - self.x.float()}


# ---- one case ----------------------------------------------------------------------------------------

def peer_attention_candidates(case, paged, fi, fi_ws, args, res):
    """The FlashInfer attentions to try for the peer (planned), or [kjit's] when there are none."""
    if fi is None:
        return [KjitAttention(case, paged, label=f"kjit ({args.fi_missing})")]
    variants = FI_DECODE_VARIANTS if case.kind == "decode" else tuple(args.fi_prefill.split(","))
    cands = []
    for v in variants:
        try:
            cands.append(FlashInferAttention(fi, fi_ws, case, paged, v))
        except Exception as e:
            res["errors"].append(f"FlashInfer {v} plan: {short_err(e)}")
            log(f"  FlashInfer {v} plan failed: {short_err(e)}")
    return cands or [KjitAttention(case, paged, label="kjit (every FlashInfer plan failed)")]


def run_case(case, args, weights, rope, fi, fi_ws, timer, gen):
    res = dict(case=case.name, kind=case.kind, batch=case.batch, tokens=case.tokens, q_lens=case.q_lens,
               kv_lens=case.kv_lens, floors_us=lm.floors(case), ops=[], checks={}, errors=[], agree=False)
    t0 = time.time()
    paged = Paged(case, gen)
    x = torch.randn(case.tokens, HIDDEN, device="cuda", dtype=BF16, generator=gen)
    kj = KjitStack(case, x, weights, rope, paged, KjitAttention(case, paged))
    res["kjit_attention"] = kj.attention.describe()
    cands = peer_attention_candidates(case, paged, fi, fi_ws, args, res)
    peer = PeerStack(case, x, weights, rope, paged, cands[0], not args.no_fast_accum)
    res["peer_gemm_m_padded"] = peer.pad is not None

    # Eager runs: every kernel compiled / module built, and each peer attention tried.
    env_k = kj.run(dict())
    env_p = peer.run(dict(), lm.OP_KEYS[:lm.OP_KEYS.index("attention")])
    working = []
    for c in cands:
        try:
            peer.attention = c
            peer.op_attention(env_p)
            torch.cuda.synchronize()
            working.append(c)
        except Exception as e:
            res["errors"].append(f"{c.label} run: {short_err(e)}")
            log(f"  {c.label} failed: {short_err(e)}")
    if not working:
        working = [KjitAttention(case, paged, label="kjit (every FlashInfer run failed)")]
        peer.attention = working[0]
        peer.op_attention(env_p)
    peer.attention = working[0]
    peer.run(env_p, lm.OP_KEYS[lm.OP_KEYS.index("attention"):])
    torch.cuda.synchronize()

    # The peer's attention: the fastest that ran, each timed alone.
    variants_us = {}
    if len(working) > 1:
        for c in working:
            peer.attention = c
            variants_us[c.variant] = timer.time_op(lambda: peer.op_attention(dict(env_p)))
        peer.attention = min(working, key=lambda c: variants_us[c.variant])
    res["peer_attention"] = peer.attention.describe()
    res["peer_attention_variants_us"] = variants_us

    # One graph per stack; one replay each, then the checks.
    env_gk, env_gp = {}, {}
    graph_k = timer.capture(lambda: kj.run(env_gk))
    graph_p = timer.capture(lambda: peer.run(env_gp))
    graph_k.replay()
    graph_p.replay()
    torch.cuda.synchronize()
    ck, cp = kj.checkpoints(env_gk), peer.checkpoints(env_gp)
    res["checks"] = {name: rel_l2(ck[name], cp[name]) for name in lm.TOLERANCES}
    res["agree"] = all(math.isfinite(v) and v <= lm.TOLERANCES[n] for n, v in res["checks"].items())
    del ck, cp

    k_us = timer.time_layer(graph_k)
    p_us = timer.time_layer(graph_p)
    res["layer"] = {"kjit_us": k_us, "peer_us": p_us, "ratio_peer_over_kjit": p_us / k_us}
    del graph_k, graph_p
    env_gk.clear()  # the graphs' tensors
    env_gp.clear()

    if not args.no_ops:
        for op in lm.OPS:
            row = {"op": op.key, "label": op.label, "kjit_impl": op.kjit, "peer_impl": op.peer,
                   "floor_us": {d: res["floors_us"][d][op.key] for d in lm.DEVICES}}
            if op.key == "attention":
                row["kjit_impl"], row["peer_impl"] = kj.attention.label, peer.attention.label
                if variants_us:
                    row["peer_variants_us"] = variants_us
            nbytes, flops, _ = lm.op_cost(op.key, case)
            row.update(bytes=nbytes, flops=flops)
            for stack, env in ((kj, env_k), (peer, env_p)):
                if op.key == "attention" and stack is peer and variants_us:
                    row["peer_us"] = variants_us[peer.attention.variant]
                    continue
                try:
                    f = stack.op(op.key)
                    row[f"{stack.name}_us"] = timer.time_op(lambda: f(dict(env)))
                except Exception as e:
                    res["errors"].append(f"{stack.name} {op.key} alone: {short_err(e)}")
            res["ops"].append(row)
    res["seconds"] = time.time() - t0
    return res


def run_case_guarded(case, args, weights, rope, fi, fi_ws, timer, gen):
    try:
        return run_case(case, args, weights, rope, fi, fi_ws, timer, gen)
    except Exception as e:
        import traceback
        traceback.print_exc()
        return dict(case=case.name, kind=case.kind, batch=case.batch, tokens=case.tokens, q_lens=case.q_lens,
                    kv_lens=case.kv_lens, floors_us=lm.floors(case), ops=[], checks={}, agree=False,
                    errors=[short_err(e)])
    finally:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# ---- FlashInfer's modules ------------------------------------------------------------------------------

def prebuild_one(variant):
    """Builds (or finds) FlashInfer's module of one variant by planning a tiny call of it."""
    import flashinfer
    gen = torch.Generator(device="cuda").manual_seed(0)
    case = lm.decode_case(1, 32) if variant in FI_DECODE_VARIANTS else lm.prefill_case(1, 16, 16)
    ws = torch.empty(FI_WS_BYTES, dtype=torch.uint8, device="cuda")
    t = time.time()
    try:
        FlashInferAttention(flashinfer, ws, case, Paged(case, gen), variant)
        log(f"prebuild: FlashInfer {variant} hd{HEAD_DIM}: {time.time() - t:.0f} s")
        return 0
    except Exception as e:
        log(f"prebuild: FlashInfer {variant} failed after {time.time() - t:.0f} s: {short_err(e)}")
        return 1


def prebuild(variants):
    children = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--prebuild-one", v]) for v in variants]
    return max(c.wait() for c in children)


# ---- main ----------------------------------------------------------------------------------------------

def int_list(text):
    return [int(v) for v in text.split(",") if v.strip()] if text else []


def main():
    ap = arg_parser(__doc__)
    ap.add_argument("--batches", default=",".join(map(str, lm.DECODE_BATCHES)), help="decode batches, uniform lengths")
    ap.add_argument("--mixed-batches", default=",".join(map(str, lm.MIXED_BATCHES)),
                    help="decode batches at mixed lengths ('' for none)")
    ap.add_argument("--kv-len", type=int, default=lm.DECODE_KV_LEN, help="tokens attended per decode request")
    ap.add_argument("--prefill-cached", type=int, default=lm.PREFILL_CACHED, help="cached tokens per prefill request")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--no-prefill", action="store_true")
    ap.add_argument("--no-ops", action="store_true", help="the whole layer only, no op-by-op breakdown")
    ap.add_argument("--no-fi", action="store_true", help="no FlashInfer: the peer's attention is kjit's")
    ap.add_argument("--fi-prefill", default="fa3", help="FlashInfer prefill backends to try (comma-separated)")
    ap.add_argument("--no-fast-accum", action="store_true", help="cuBLASLt without FAST_ACCUM (torch's default)")
    ap.add_argument("--reps", type=int, default=200, help="layer replays timed per stack")
    ap.add_argument("--op-reps", type=int, default=100, help="replays timed per op alone")
    ap.add_argument("--warmup", type=int, default=10, help="untimed replays first")
    ap.add_argument("--prebuild", action="store_true", help="build FlashInfer's modules and exit")
    ap.add_argument("--prebuild-one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.prebuild_one:
        return prebuild_one(args.prebuild_one)
    if args.prebuild:
        return prebuild(FI_DECODE_VARIANTS + tuple(args.fi_prefill.split(",")))
    require_gpu()
    if torch.cuda.get_device_capability() < (8, 9):
        cannot_run("FP8 GPU", "an sm_89+ GPU (e4m3 GEMMs)",
                   f"{torch.cuda.get_device_name()} is sm_{''.join(map(str, torch.cuda.get_device_capability()))}")
    gen, seed = seeded_generator(args)
    dev_name = torch.cuda.get_device_name()
    dev = lm.device_key(dev_name)
    fi, args.fi_missing = None, "--no-fi"
    if not args.no_fi:
        try:
            import flashinfer
            fi = flashinfer
            log(f"flashinfer {flashinfer.__version__} ({getattr(flashinfer, 'KIT', 'full')})")
        except Exception as e:
            args.fi_missing = "FlashInfer not importable"
            log(f"FlashInfer not importable ({short_err(e)}): the peer's attention is kjit's")
    cases = [] if args.no_decode else (
        [lm.decode_case(b, args.kv_len) for b in int_list(args.batches)] + [lm.mixed_case(b) for b in
                                                                            int_list(args.mixed_batches)])
    if not args.no_prefill:
        cases.append(lm.prefill_case(cached=args.prefill_cached))
    timer = Timer(args.reps, args.op_reps, args.warmup)
    log(f"kjit {kjit.__version__}; floors for {dev}; op timing: "
        + ("events inside each op's graph" if timer.in_graph_events
           else f"events around each replay (in-graph events unavailable: {timer.why_not})"))
    t = time.time()
    weights = Weights(gen)
    max_pos = max(max(c.kv_lens) for c in cases) if cases else 1
    rope = rope_tables(max_pos)
    fi_ws = torch.empty(FI_WS_BYTES, dtype=torch.uint8, device="cuda") if fi is not None else None
    log(f"weights and tables: {time.time() - t:.1f} s")
    out = dict(device=dev_name, floors_device=dev, torch=torch.__version__, kjit=kjit.__version__,
               flashinfer=None if fi is None else fi.__version__, seed=seed, fast_accum=not args.no_fast_accum,
               reps=args.reps, op_reps=args.op_reps, op_timing="in-graph events" if timer.in_graph_events
               else "events around the replay", tolerances=lm.TOLERANCES, devices=lm.DEVICES, results=[])
    for case in cases:
        log(f"\n== {case.name}")
        r = run_case_guarded(case, args, weights, rope, fi, fi_ws, timer, gen)
        out["results"].append(r)
        log(f"   ({r.get('seconds', 0):.1f} s)")
        log("\n".join(lm.case_table(r, dev)))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
    log("\nkjit stack: kjit.fp8.quantize + kjit.fp8.gemm, kjit.rotary, kjit append_paged_kv, kjit paged decode / "
        "paged prefill; peer stack: torch quantize + torch._scaled_mm (cuBLASLt" +
        (", fast accum" if not args.no_fast_accum else "") + "), torch rotary, torch index_copy_, " +
        ("FlashInfer" if fi is not None else f"kjit attention ({args.fi_missing})") +
        "; RMSNorm, residuals and SiLU · mul torch in both. ratio = peer µs / kjit µs.\n")
    log("\n".join(lm.summary_table(out["results"], dev)))
    ok = all(r.get("agree") and not r.get("errors") for r in out["results"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
