#!/usr/bin/env python3
"""kjit prefill, paged decode and ragged paged prefill beside their peers, in one process on one GPU.

    python3 tools/bench/bench_attention.py [--json out.json] [--seed N] [--prefill-only | --paged-only]
                                           [--sweep] [--merge MODE [MODE ...]]

kjit runs through its Python package (kjit.attention.* on the torch tensors, torch's current
stream; forced kernels and split counts are the ops' variant= / num_splits= arguments and
plan_paged_prefill's variant=). The script

  1. checks kjit against float32 SDPA (math backend) on small problems: dense prefill (causal with
     q_len < kv_len, 2-D/3-D masks, GQA, LSE), paged decode (page sizes 1/16/64, against kjit's
     contiguous decode too) and the ragged paged prefill (q_len 0 / kv_len 0 requests), plus the
     paged append (a decode loop: append one token per request, decode, compare);
  2. times dense prefill at B4 H32 L4096 D128 causal and full, B1 H32 L8192 D128 causal and B8 H16
     L2048 D64 causal, kjit's Hopper wgmma kernel (on sm_90) and its mma.sync kernel side by side,
     against cuDNN and FlashAttention-2 SDPA (torch.nn.attention.sdpa_kernel, q as a [B, H, L, D]
     view of the BLHD tensor), in TFLOP/s with causal FLOPs = half of full
     (4 · B · H · Lq · Lkv · D for full);
  3. times paged decode at page sizes 1, 16 and 64 against kjit's contiguous decode at B16 Hq32 Hkv8
     D128 L4096, the pools a random permutation of pages, rotating K/V sets so every call streams
     from DRAM (target: page 16 ≥ 0.97, page 1 ≥ 0.85 of contiguous);
  4. times the ragged paged prefill (page 16) against the dense prefill (the same mma.sync kernel
     body) at the same total work (B4 H32 L4096 D128 causal as four packed requests), and a
     mixed-length batch (target ≥ 0.9).
--prefill-only runs steps 1 and 2 for the dense prefill alone, --paged-only steps 1 and 3 for the
paged decode alone; --sweep adds step 3 at every forced split count (1-4), each output checked,
and the decoder layer's mixed-length paged decode (B8/32/128, Hq64 Hkv8, page 16, lengths
layer_model.MIXED_PATTERN) at the planner's and every forced split count beside the contiguous
decode of the same lengths.
--merge forces how the decodes combine their KV splits (the ops' merge=: "auto", "kernel" (the
merge kernel) or "cluster" (thread-block clusters, sm_90+)); with several modes step 3 times each
page size under each, in this process, so the modes compare on one GPU and one set of inputs.
Every timing is a CUDA graph of the calls replayed with triton.testing.do_bench (median), so host
launch cost is excluded for everyone. A compact table is printed last.
"""
import json
import math
import sys

from bench_common import arg_parser, fmt, graph_time_us, rel_l2, require_gpu, seeded_generator  # first
import kjit
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOL = 1e-2
L2_BYTES = 60e6
ROTATE_BYTES = 4 * L2_BYTES
MAX_SETS = 16

# (batch, heads, kv_len, head_dim, causal): the issue's prefill shapes (MHA, q_len = kv_len).
PREFILL_SHAPES = [
    (4, 32, 4096, 128, True),
    (4, 32, 4096, 128, False),
    (1, 32, 8192, 128, True),
    (8, 16, 2048, 64, True),
]
DECODE_SHAPE = (16, 32, 8, 128, 4096)  # batch, q_heads, kv_heads, head_dim, kv_len
PAGE_SIZES = (1, 16, 64)


def hopper():
    return torch.cuda.get_device_capability() == (9, 0)


def wgmma_takes(D, mask_rank):
    """Whether the Hopper prefill kernel can run this call (the entry's variant_rejects rule)."""
    return hopper() and D in (64, 128) and mask_rank == 0


class PagedCache:
    """Pools [num_pages, page_size, Hkv, D] holding contiguous k/v [B, L, Hkv, D] (per-request
    lengths `lens`) on a random permutation of pages, with spare NaN pages."""

    def __init__(self, k, v, lens, page_size, gen, spare=2):
        B, L, H, D = k.shape
        self.page_size = page_size
        pages_per = [(int(n) + page_size - 1) // page_size for n in lens]
        total = sum(pages_per)
        self.num_pages = total + spare
        perm = torch.randperm(self.num_pages, device="cuda", generator=gen)
        self.k = torch.full((self.num_pages, page_size, H, D), float("nan"), device="cuda", dtype=torch.bfloat16)
        self.v = torch.full_like(self.k, float("nan"))
        indices, indptr, last = [], [0], []
        used = 0
        for b in range(B):
            n, p = int(lens[b]), pages_per[b]
            ids = perm[used:used + p]
            used += p
            if p:
                pad = p * page_size - n
                kb = torch.cat([k[b, :n], k.new_full((pad, H, D), float("nan"))]).view(p, page_size, H, D)
                vb = torch.cat([v[b, :n], v.new_full((pad, H, D), float("nan"))]).view(p, page_size, H, D)
                self.k[ids] = kb
                self.v[ids] = vb
            indices.append(ids)
            indptr.append(indptr[-1] + p)
            last.append(n - (p - 1) * page_size if p else 0)
        self.indices = torch.cat(indices + [perm[used:]]).to(torch.int32)  # spare capacity at the end
        self.indptr = torch.tensor(indptr, device="cuda", dtype=torch.int32)
        self.last = torch.tensor(last, device="cuda", dtype=torch.int32)
        self.nnz = self.indices.numel()


class Kjit:
    """The kjit calls of this script through the Python package, on torch tensors and torch's
    current stream; split-KV workspaces are explicit tensors of the size the package's queries give."""

    def prefill(self, q, k, v, out, lse=None, mask=None, causal=False, block_m=0, variant="auto"):
        """variant: "auto", "mma" (mma.sync kernel) or "wgmma" (the Hopper kernel)."""
        kjit.attention.prefill(q, k, v, mask=mask, causal=causal, out=out, lse=lse, block_m=block_m, variant=variant)

    def paged_decode_workspace(self, q, cache, hint=0, splits=0, merge="auto"):
        n = kjit.attention.paged_decode_workspace_bytes(q, cache.k, cache.v, cache.indptr, cache.indices, cache.last,
                                                        num_splits=splits, kv_len_hint=hint, merge=merge)
        return torch.empty(max(n, 16), dtype=torch.uint8, device="cuda")

    def paged_decode(self, q, cache, out, ws, lse=None, hint=0, splits=0, merge="auto"):
        kjit.attention.paged_decode(q, cache.k, cache.v, cache.indptr, cache.indices, cache.last, out=out, lse=lse,
                                    num_splits=splits, kv_len_hint=hint, merge=merge, workspace=ws)

    def decode_workspace(self, q, k, v, merge="auto"):
        n = kjit.attention.decode_workspace_bytes(q, k, v, merge=merge)
        return torch.empty(max(n, 16), dtype=torch.uint8, device="cuda")

    def decode(self, q, k, v, lens, out, ws, merge="auto"):
        kjit.attention.decode(q, k, v, lens, out=out, merge=merge, workspace=ws)

    def plan(self, q_lens, D, tile_rows=0, variant="auto", cache=None, q_heads=0, causal=False, kv_heads=0,
             pack_gqa=None, persistent=None, page_load="auto"):
        """variant: "auto" (the run step chooses), "mma" or "wgmma" (strict). tile_rows 0 plans
        for the device (its tuning table), from `cache`'s layout, q_heads and causal. kv_heads and
        pack_gqa ("auto", "on", "off"), when given, are passed to plan_paged_prefill (packing the
        group's q heads needs the KV heads); so is persistent (True or False: the wgmma kernel's
        persistent schedule or a CTA per work item and head; with the layout, the default True).
        page_load ("auto", "gather", "tma") is the plan's: how the wgmma kernel loads K/V pages."""
        indptr = [0]
        for n in q_lens:
            indptr.append(indptr[-1] + int(n))
        layout = {}
        if tile_rows == 0 or persistent is not None:
            layout = dict(kv_indptr=cache.indptr.cpu(), last_page_len=cache.last.cpu(), q_heads=q_heads,
                          page_size=cache.page_size, causal=causal)
        if pack_gqa is not None:
            layout.update(kv_heads=kv_heads, pack_gqa=pack_gqa)
        if persistent is not None:
            layout.update(persistent=persistent)
        p = kjit.attention.plan_paged_prefill(indptr, D, tile_rows, torch.cuda.current_device(), variant=variant,
                                              page_load=page_load, **layout)
        return {"plan": p, "bytes": p.workspace_bytes, "work": p.num_work,
                "qo_indptr": torch.tensor(indptr, device="cuda", dtype=torch.int32), "total_q": indptr[-1],
                "batch": len(q_lens)}

    def free_plan(self, plan):
        plan.pop("plan", None)  # the plan object frees its device work map

    def paged_prefill(self, plan, q, cache, out, lse=None, causal=False):
        kjit.attention.paged_prefill(q, plan["qo_indptr"], cache.k, cache.v, cache.indptr, cache.indices, cache.last,
                                     plan["plan"], causal=causal, out=out, lse=lse)

    def append(self, k_new, v_new, append_indptr, cache):
        kjit.attention.append_paged_kv(k_new, v_new, cache.k, cache.v, cache.indptr, cache.indices, cache.last,
                                       append_indptr=append_indptr)


# ---- references ---------------------------------------------------------------------------------

def reference(q, k, v, kv_len=None, mask=None, causal=False):
    """float32 SDPA (math) for one request: q [Lq, Hq, D], k/v [Lkv, Hkv, D]; queries aligned to the
    end of the KV under causal; mask [Lq, Lkv] bool (True = keep). Returns out [Lq, Hq, D], lse
    [Hq, Lq]; rows that keep nothing are zeros / -inf."""
    Lq, Hq, D = q.shape
    Lkv, Hkv = k.shape[0], k.shape[1]
    if kv_len is not None:
        k, v, Lkv = k[:kv_len], v[:kv_len], kv_len
        if mask is not None:
            mask = mask[:, :kv_len]
    keep = torch.ones(Lq, Lkv, dtype=torch.bool, device=q.device)
    if causal:
        keep &= torch.arange(Lkv, device=q.device)[None, :] <= torch.arange(Lq, device=q.device)[:, None] + Lkv - Lq
    if mask is not None:
        keep &= mask
    g = Hq // Hkv
    qf = q.float().permute(1, 0, 2)  # [Hq, Lq, D]
    kf = k.float().permute(1, 0, 2).repeat_interleave(g, 0)
    vf = v.float().permute(1, 0, 2).repeat_interleave(g, 0)
    s = (qf @ kf.transpose(1, 2)) / math.sqrt(D)
    s = s.masked_fill(~keep[None], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [Hq, Lq]
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    out = (p @ vf).permute(1, 0, 2)
    return out, lse


def lse_err(a, b):
    fin = torch.isfinite(b)
    same_inf = bool(((a == b) | fin).all())
    return rel_l2(a[fin], b[fin]) if same_inf else float("inf")


# ---- checks -------------------------------------------------------------------------------------

def check_prefill(kj, gen):
    results = []
    for (B, Lq, Lkv, Hq, Hkv, D, causal, mask_rank) in ((2, 300, 300, 8, 2, 128, True, 0), (2, 37, 500, 8, 1, 64, True, 3),
                                                         (2, 200, 200, 8, 8, 256, False, 2),
                                                         (2, 129, 129, 12, 4, 128, False, 0),
                                                         (1, 1000, 1000, 4, 4, 128, True, 0)):
        q = torch.randn(B, Lq, Hq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(B, Lkv, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(B, Lkv, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        mask = None
        if mask_rank == 3:
            mask = torch.rand(B, Lq, Lkv, device="cuda", generator=gen) < 0.7
        elif mask_rank == 2:
            mask = torch.rand(B, Lkv, device="cuda", generator=gen) < 0.7
        runs = [("mma", block_m) for block_m in (0, 64, 128)]
        if wgmma_takes(D, mask_rank):
            runs.append(("wgmma", 0))
        for variant, block_m in runs:
            out = torch.full_like(q, float("nan"))
            lse = torch.full((B, Hq, Lq), float("nan"), device="cuda")
            kj.prefill(q, k, v, out, lse, mask, causal, block_m, variant)
            torch.cuda.synchronize()
            eo, el = 0.0, 0.0
            for b in range(B):
                m = None if mask is None else (mask[b] if mask_rank == 3 else mask[b][None, :].expand(Lq, Lkv))
                ro, rl = reference(q[b], k[b], v[b], mask=m, causal=causal)
                eo = max(eo, rel_l2(out[b], ro))
                el = max(el, lse_err(lse[b], rl))
            ok = eo <= TOL and el <= 1e-4 and bool(torch.isfinite(out).all())
            results.append({"check": f"prefill B{B} Lq{Lq} Lkv{Lkv} Hq{Hq}/Hkv{Hkv} D{D} causal={causal} "
                                     f"mask={mask_rank}d {variant} block_m={block_m or 'auto'}",
                            "rel_l2_out": eo, "rel_l2_lse": el, "ok": ok})
    return results


def check_paged(kj, gen):
    results = []
    B, Hq, Hkv, D = 5, 16, 4, 128
    for ps in PAGE_SIZES:
        lens = torch.tensor([1, max(ps - 1, 1), ps, ps + 1, 700], device="cuda", dtype=torch.int32)
        L = int(lens.max())
        q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        cache = PagedCache(k, v, lens.tolist(), ps, gen)
        for splits in (1, 3, 0):
            out = torch.full_like(q, float("nan"))
            lse = torch.full((B, Hq), float("nan"), device="cuda")
            ws = kj.paged_decode_workspace(q, cache, splits=splits)
            kj.paged_decode(q, cache, out, ws, lse, splits=splits)
            ref_c = torch.empty_like(q)
            kj.decode(q, k, v, lens, ref_c, kj.decode_workspace(q, k, v))
            torch.cuda.synchronize()
            eo, el = 0.0, 0.0
            for b in range(B):
                ro, rl = reference(q[b], k[b], v[b], kv_len=int(lens[b]))
                eo = max(eo, rel_l2(out[b], ro))
                el = max(el, lse_err(lse[b], rl[:, 0]))
            ec = rel_l2(out, ref_c)
            ok = eo <= TOL and el <= 1e-4 and ec <= TOL and bool(torch.isfinite(out).all())
            results.append({"check": f"paged decode page={ps} lens={lens.tolist()} splits={splits or 'auto'}",
                            "rel_l2_out": eo, "rel_l2_lse": el, "vs_contiguous": ec, "ok": ok})
    # A decode loop through the append op: grow every request by one token, decode, compare.
    ps, steps = 16, 5
    lens = [3, 16, 40]
    cap = max(lens) + steps
    k = torch.randn(3, cap, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(3, cap, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    worst = 0.0
    for step in range(steps):
        lens = [n + 1 for n in lens]
        full = PagedCache(k, v, lens, ps, gen)  # the table after the append
        # Blank the new tokens, then append them through kjit.
        for b, n in enumerate(lens):
            pages = full.indices[full.indptr[b]:full.indptr[b + 1]]
            full.k[pages[(n - 1) // ps], (n - 1) % ps] = float("nan")
            full.v[pages[(n - 1) // ps], (n - 1) % ps] = float("nan")
        new_k = torch.stack([k[b, n - 1] for b, n in enumerate(lens)])
        new_v = torch.stack([v[b, n - 1] for b, n in enumerate(lens)])
        kj.append(new_k, new_v, torch.arange(4, device="cuda", dtype=torch.int32), full)
        q = torch.randn(3, 1, Hq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        out = torch.full_like(q, float("nan"))
        kj.paged_decode(q, full, out, kj.paged_decode_workspace(q, full), None)
        torch.cuda.synchronize()
        for b in range(3):
            ro, _ = reference(q[b], k[b], v[b], kv_len=lens[b])
            worst = max(worst, rel_l2(out[b], ro))
    results.append({"check": f"append + paged decode loop ({steps} steps, page 16)", "rel_l2_out": worst,
                    "ok": worst <= TOL})
    return results


def check_ragged(kj, gen):
    results = []
    Hq, Hkv, D = 8, 2, 128
    for (q_lens, kv_lens, ps, causal) in (([70, 10, 130], [70, 60, 130], 16, True),
                                          ([1, 0, 200, 5], [1, 10, 300, 0], 1, True),
                                          ([64, 65], [64, 65], 64, False)):
        B = len(q_lens)
        Lk = max(kv_lens)
        k = torch.randn(B, Lk, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(B, Lk, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        cache = PagedCache(k, v, kv_lens, ps, gen)
        total = sum(q_lens)
        q = torch.randn(total, Hq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        for tile_rows in (64, 128):
            plan = kj.plan(q_lens, D, tile_rows)
            out = torch.full_like(q, float("nan"))
            lse = torch.full((Hq, total), float("nan"), device="cuda")
            kj.paged_prefill(plan, q, cache, out, lse, causal)
            torch.cuda.synchronize()
            kj.free_plan(plan)
            eo, el, first = 0.0, 0.0, 0
            for b in range(B):
                n = q_lens[b]
                if n:
                    ro, rl = reference(q[first:first + n], k[b], v[b], kv_len=kv_lens[b], causal=causal)
                    eo = max(eo, rel_l2(out[first:first + n], ro) if ro.norm() > 0 else out[first:first + n].abs().max().item())
                    el = max(el, lse_err(lse[:, first:first + n], rl))
                first += n
            ok = eo <= TOL and el <= 1e-4 and bool(torch.isfinite(out).all())
            results.append({"check": f"ragged paged prefill q={q_lens} kv={kv_lens} page={ps} causal={causal} "
                                     f"tile={tile_rows}", "rel_l2_out": eo, "rel_l2_lse": el, "ok": ok})
    return results


# ---- timing -------------------------------------------------------------------------------------

def flops(B, H, Lq, Lkv, D, causal):
    return 4.0 * B * H * Lq * Lkv * D * (0.5 if causal else 1.0)


def bench_prefill(kj, B, H, L, D, causal, gen):
    q = torch.randn(B, L, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(B, L, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(B, L, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.empty_like(q)
    f = flops(B, H, L, L, D, causal)
    row = {"shape": f"B{B} H{H} L{L} D{D} {'causal' if causal else 'full'}", "flops": f}
    # Both kjit kernels (the mma.sync one everywhere, the Hopper wgmma one on sm_90), each
    # spot-checked on a few heads against the float32 reference (the full one is expensive).
    ro, _ = reference(q[0, :, :2], k[0, :, :2], v[0, :, :2], causal=causal)
    row["ok"] = True
    for variant in ("mma", "wgmma") if wgmma_takes(D, 0) else ("mma",):
        out.fill_(float("nan"))
        kj.prefill(q, k, v, out, causal=causal, variant=variant)
        torch.cuda.synchronize()
        err = rel_l2(out[0, :, :2], ro)
        row[f"{variant}_rel_l2"] = err
        row["ok"] = row["ok"] and err <= TOL and bool(torch.isfinite(out).all())
        row[f"{variant}_us"] = graph_time_us(lambda i, variant=variant: kj.prefill(q, k, v, out, causal=causal,
                                                                                 variant=variant), 3)
    # "kjit" is what the automatic choice runs on this device.
    row["kjit_us"] = row["wgmma_us"] if "wgmma_us" in row else row["mma_us"]
    row["rel_l2"] = row.get("wgmma_rel_l2", row["mma_rel_l2"])
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
        def step(i, backend=backend):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        try:
            step(0)
            torch.cuda.synchronize()
            row[f"{name}_us"] = graph_time_us(step, 3)
        except Exception as e:  # a backend that does not take this shape
            row[f"{name}_us"] = None
            row[f"{name}_error"] = str(e).splitlines()[0][:200]
    for name in ("kjit", "mma", "wgmma", "cudnn", "fa2"):
        us = row.get(f"{name}_us")
        row[f"{name}_tflops"] = f / (us * 1e-6) / 1e12 if us else None
    row["kjit_over_fa2"] = row["kjit_tflops"] / row["fa2_tflops"] if row.get("fa2_tflops") else None
    row["kjit_over_cudnn"] = row["kjit_tflops"] / row["cudnn_tflops"] if row.get("cudnn_tflops") else None
    row["mma_over_fa2"] = row["mma_tflops"] / row["fa2_tflops"] if row.get("fa2_tflops") else None
    return row


def bench_paged_decode(kj, gen, sweep=False, merges=("auto",)):
    """Step 3 under each merge of `merges` (the contiguous baseline under the first)."""
    B, Hq, Hkv, D, L = DECODE_SHAPE
    kv_bytes = 2 * B * L * Hkv * D * 2
    io_bytes = kv_bytes + 2 * B * Hq * D * 2
    n_sets = int(min(MAX_SETS, max(2, math.ceil(ROTATE_BYTES / kv_bytes))))
    q = torch.randn(B, 1, Hq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    ks = [torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(n_sets)]
    vs = [torch.randn(B, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(n_sets)]
    lens = torch.full((B,), L, device="cuda", dtype=torch.int32)
    out = torch.empty_like(q)
    ws = kj.decode_workspace(q, ks[0], vs[0], merges[0])
    rows = []
    contig_us = graph_time_us(lambda i: kj.decode(q, ks[i], vs[i], lens, out, ws, merges[0]), n_sets)
    ref = torch.empty_like(q)
    kj.decode(q, ks[0], vs[0], lens, ref, ws, merges[0])
    named = len(merges) > 1 or merges[0] != "auto"  # name the merge in the rows
    rows.append({"shape": f"B{B} Hq{Hq} Hkv{Hkv} D{D} L{L} contiguous" + (f" merge={merges[0]}" if named else ""),
                 "us": contig_us, "gbps": io_bytes / (contig_us * 1e-6) / 1e9, "vs_contiguous": 1.0, "ok": True})
    for ps in PAGE_SIZES:
        caches = []
        for i in range(n_sets):
            caches.append(PagedCache(ks[i], vs[i], [L] * B, ps, gen, spare=0))
        for merge in merges:
            shape = f"B{B} Hq{Hq} Hkv{Hkv} D{D} L{L} page {ps}" + (f" merge={merge}" if named else "")
            try:
                pws = kj.paged_decode_workspace(q, caches[0], merge=merge)
                kj.paged_decode(q, caches[0], out, pws, merge=merge)
            except kjit.Unsupported as e:  # merge="cluster" below sm_90
                print(f"paged decode {shape}: {str(e).splitlines()[0]}")
                continue
            torch.cuda.synchronize()
            err = rel_l2(out, ref)
            us = graph_time_us(lambda i, pws=pws, merge=merge: kj.paged_decode(q, caches[i], out, pws, merge=merge),
                               n_sets)
            target = 0.85 if ps == 1 else 0.97
            row = {"shape": shape, "merge": merge, "us": us, "gbps": io_bytes / (us * 1e-6) / 1e9,
                   "vs_contiguous": contig_us / us, "target": target, "rel_l2_vs_contiguous": err, "ok": err <= TOL}
            if sweep:  # every forced split count, each checked against the contiguous output
                row["splits_us"] = {}
                for sp in (1, 2, 3, 4):
                    sws = kj.paged_decode_workspace(q, caches[0], splits=sp, merge=merge)
                    kj.paged_decode(q, caches[0], out, sws, splits=sp, merge=merge)
                    torch.cuda.synchronize()
                    row["ok"] = row["ok"] and rel_l2(out, ref) <= TOL
                    row["splits_us"][sp] = graph_time_us(
                        lambda i, sp=sp, sws=sws, merge=merge: kj.paged_decode(q, caches[i], out, sws, splits=sp,
                                                                               merge=merge), n_sets)
                print(f"paged decode page {ps} merge={merge} (contiguous {contig_us:.1f} us, planner {us:.1f} us): "
                      + ", ".join(f"{sp} splits {t:.1f} us" for sp, t in row["splits_us"].items()))
            rows.append(row)
        del caches
        torch.cuda.empty_cache()
    return rows


def bench_paged_decode_mixed(kj, gen, batch, merge="auto"):
    """The decoder layer's mixed-length paged decode (layer_model.MIXED_PATTERN lengths, mean
    4096; 64 query heads, 8 KV heads, head_dim 128, page 16, kv_len_hint = the longest request),
    at the planner's split count and every forced one under `merge`, each checked against the
    contiguous decode of the same lengths."""
    import layer_model as lm
    Hq, Hkv, D, ps = 64, 8, 128, 16
    lens = [lm.MIXED_PATTERN[i % len(lm.MIXED_PATTERN)] for i in range(batch)]
    L = max(lens)
    q = torch.randn(batch, 1, Hq, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(batch, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(batch, L, Hkv, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    lens_t = torch.tensor(lens, device="cuda", dtype=torch.int32)
    ref, out = torch.empty_like(q), torch.empty_like(q)
    ws = kj.decode_workspace(q, k, v)
    kj.decode(q, k, v, lens_t, ref, ws)
    contig_us = graph_time_us(lambda i: kj.decode(q, k, v, lens_t, out, ws), 1)
    cache = PagedCache(k, v, lens, ps, gen, spare=0)
    row = {"shape": f"B{batch} Hq{Hq} Hkv{Hkv} D{D} mixed (max {L}) page {ps} merge {merge}",
           "contiguous_us": contig_us, "splits_us": {}, "ok": True}
    for sp in (0, 1, 2, 3, 4, 6, 8):
        pws = kj.paged_decode_workspace(q, cache, hint=L, splits=sp, merge=merge)
        out.fill_(float("nan"))
        kj.paged_decode(q, cache, out, pws, hint=L, splits=sp, merge=merge)
        torch.cuda.synchronize()
        row["ok"] = row["ok"] and rel_l2(out, ref) <= TOL
        row["splits_us"][sp] = graph_time_us(lambda i, sp=sp, pws=pws: kj.paged_decode(q, cache, out, pws, hint=L,
                                                                                       splits=sp, merge=merge), 1)
    print(f"paged decode {row['shape']} (contiguous {contig_us:.1f} us): " +
          ", ".join(f"{'planner' if sp == 0 else f'{sp} splits'} {t:.1f} us" for sp, t in row["splits_us"].items()) +
          ("" if row["ok"] else " FAIL"))
    return row


def bench_ragged(kj, gen):
    rows = []
    H, D = 32, 128
    for (name, q_lens, causal) in (("B4 H32 L4096 D128 causal as 4 packed requests", [4096] * 4, True),
                                   ("B4 H32 L4096 D128 full as 4 packed requests", [4096] * 4, False),
                                   ("mixed [7000, 3000, 2000, 4384] causal", [7000, 3000, 2000, 4384], True)):
        B = len(q_lens)
        L = max(q_lens)
        k = torch.randn(B, L, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(B, L, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        cache = PagedCache(k, v, q_lens, 16, gen, spare=0)
        total = sum(q_lens)
        q = torch.randn(total, H, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        out = torch.empty_like(q)
        plan = kj.plan(q_lens, D, cache=cache, q_heads=H, causal=causal)
        f = sum(flops(1, H, n, n, D, causal) for n in q_lens)
        kj.paged_prefill(plan, q, cache, out, causal=causal)
        torch.cuda.synchronize()
        ro, _ = reference(q[:q_lens[0], :2], k[0, :q_lens[0], :2], v[0, :q_lens[0], :2], causal=causal)
        err = rel_l2(out[:q_lens[0], :2], ro)
        us = graph_time_us(lambda i: kj.paged_prefill(plan, q, cache, out, causal=causal), 3)
        row = {"shape": name, "paged_us": us, "paged_tflops": f / (us * 1e-6) / 1e12, "rel_l2": err,
               "ok": err <= TOL}
        if len(set(q_lens)) == 1:
            # The same work as one dense prefill over contiguous K/V.
            qd = q.view(B, L, H, D)
            od = torch.empty_like(qd)
            dus = graph_time_us(lambda i: kj.prefill(qd, k, v, od, causal=causal, variant="mma"), 3)
            row["dense_us"] = dus
            row["dense_tflops"] = f / (dus * 1e-6) / 1e12
            row["paged_over_dense"] = dus / us
        kj.free_plan(plan)
        rows.append(row)
        del k, v, cache, q, out
        torch.cuda.empty_cache()
    return rows


def main():
    ap = arg_parser(__doc__)
    ap.add_argument("--prefill-only", action="store_true", help="dense prefill checks and timings only")
    ap.add_argument("--paged-only", action="store_true", help="paged decode checks and timings only")
    ap.add_argument("--sweep", action="store_true",
                    help="also time paged decode at every forced split count, and at mixed lengths")
    ap.add_argument("--merge", nargs="+", default=["auto"], choices=kjit.attention.DECODE_MERGES, metavar="MODE",
                    help="how the decodes of step 3 combine their splits: " + ", ".join(kjit.attention.DECODE_MERGES)
                    + " (several: each page size under each; the contiguous baseline under the first)")
    args = ap.parse_args()
    require_gpu()
    kj = Kjit()
    gen, seed = seeded_generator(args)

    checks = ([] if args.paged_only else check_prefill(kj, gen)) + \
        ([] if args.prefill_only else check_paged(kj, gen) + ([] if args.paged_only else check_ragged(kj, gen)))
    for c in checks:
        extra = "".join(f", {k} {c[k]:.2e}" for k in ("rel_l2_lse", "vs_contiguous") if k in c)
        print(f"check {c['check']}: out rel_l2 {c['rel_l2_out']:.2e}{extra} {'ok' if c['ok'] else 'FAIL'}")

    prefill_rows = []
    for shape in ([] if args.paged_only else PREFILL_SHAPES):
        prefill_rows.append(bench_prefill(kj, *shape, gen))
        r = prefill_rows[-1]
        print(f"prefill {r['shape']}: kjit {r['kjit_us']:.0f} us, rel_l2 {r['rel_l2']:.2e}"
              + "".join(f"; {n} error: {r[n + '_error']}" for n in ("cudnn", "fa2") if r.get(n + "_error")))
        torch.cuda.empty_cache()
    decode_rows = [] if args.prefill_only else bench_paged_decode(kj, gen, args.sweep, tuple(args.merge))
    mixed_rows = [bench_paged_decode_mixed(kj, gen, b, m) for b in (8, 32, 128) for m in args.merge] \
        if args.sweep and not args.prefill_only else []
    ragged_rows = [] if args.prefill_only or args.paged_only else bench_ragged(kj, gen)

    print()
    head = (f"{'prefill':<30} {'wgmma TF/s':>10} {'mma TF/s':>9} {'cuDNN TF/s':>11} {'FA2 TF/s':>9} "
            f"{'wgmma/cuDNN':>12} {'mma/FA2':>8} {'ok':>4}")
    print(head)
    print("-" * len(head))
    for r in prefill_rows:
        wg = r.get("wgmma_tflops")
        print(f"{r['shape']:<30} {fmt(wg, '10.1f')} {fmt(r['mma_tflops'], '9.1f')} {fmt(r['cudnn_tflops'], '11.1f')} "
              f"{fmt(r['fa2_tflops'], '9.1f')} "
              f"{fmt(wg / r['cudnn_tflops'] if wg and r.get('cudnn_tflops') else None, '12.2f')} "
              f"{fmt(r['mma_over_fa2'], '8.2f')} {'yes' if r['ok'] else 'NO':>4}")
    print()
    head = f"{'paged decode':<56} {'us':>8} {'GB/s':>7} {'vs contig':>10} {'target':>7} {'ok':>4}"
    print(head)
    print("-" * len(head))
    for r in decode_rows:
        print(f"{r['shape']:<56} {r['us']:8.1f} {r['gbps']:7.0f} {r['vs_contiguous']:10.2f} "
              f"{fmt(r.get('target'), '7.2f')} {'yes' if r['ok'] else 'NO':>4}")
    print()
    head = f"{'ragged paged prefill (page 16)':<48} {'paged TF/s':>11} {'dense TF/s':>11} {'paged/dense':>12} {'ok':>4}"
    print(head)
    print("-" * len(head))
    for r in ragged_rows:
        print(f"{r['shape']:<48} {r['paged_tflops']:11.1f} {fmt(r.get('dense_tflops'), '11.1f')} "
              f"{fmt(r.get('paged_over_dense'), '12.2f')} {'yes' if r['ok'] else 'NO':>4}")
    all_ok = all(c["ok"] for c in checks) and all(r["ok"] for r in prefill_rows + decode_rows + ragged_rows
                                                  + mixed_rows)
    print(f"\nchecks: {sum(c['ok'] for c in checks)}/{len(checks)} ok")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "seed": seed,
                       "checks": checks, "prefill": prefill_rows, "paged_decode": decode_rows,
                       "ragged": ragged_rows, "paged_decode_mixed": mixed_rows, "ok": all_ok}, f, indent=2)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
