#!/usr/bin/env python3
"""The decoder layer that tools/bench/bench_layer.py measures: its shapes, its cases, the byte and
FLOP floor of every op, and the tables the benchmark prints. Pure Python (no torch, no GPU), so the
floors can be printed and checked on any machine:

    python3 tools/bench/layer_model.py        # the floor tables (markdown), H100 and H200

The layer: one FP8 decoder layer of a 70B-class model (Llama-3-70B's shapes): hidden 8192, 64
query heads and 8 KV heads of 128, FFN 28672 (SiLU-gated), weights e4m3 with one f32 scale per
tensor, activations quantized per tensor at run time, a paged bf16 KV cache of 16-token pages.
One step, M = the tokens of the step:

    h   = RMSNorm(x)                       x [M, 8192] bf16
    qkv = quantize(h) · W_qkvᵀ            W_qkv [10240, 8192]: q 64×128 | k 8×128 | v 8×128
    q, k = rotary(q, k) at each token's position (NeoX pairing, theta 500000)
    append k, v to the pages; o = paged attention(q) over each request's KV (causal, the new
          tokens at the end)
    x2  = x + quantize(o) · W_oᵀ          W_o [8192, 8192]
    g|u = quantize(RMSNorm(x2)) · W_guᵀ   W_gu [57344, 8192]: gate | up
    out = x2 + quantize(SiLU(g) · u) · W_downᵀ      W_down [8192, 28672]

Floors: each op's bytes (every operand read once, every result written once) over the DRAM
bandwidth, or its FLOPs over the dense tensor-core peak (fp8 for the GEMMs, bf16 for attention),
whichever is larger; the layer's floor is the sum over its ops (they run one after another).
"""
from dataclasses import dataclass

HIDDEN = 8192
Q_HEADS = 64
KV_HEADS = 8
HEAD_DIM = 128
FFN = 28672
PAGE = 16
QKV_N = (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM  # 10240
ROPE_THETA = 500000.0
E4M3_MAX = 448.0

# GEMM name: (N, K) of the weight [N, K] (D = A · Wᵀ).
GEMMS = {"qkv": (QKV_N, HIDDEN), "o": (HIDDEN, Q_HEADS * HEAD_DIM), "gate_up": (2 * FFN, HIDDEN),
         "down": (HIDDEN, FFN)}

# Peak figures of the devices the floors are given for (dense, no sparsity).
DEVICES = {
    "H100": {"tbps": 3.35, "bf16_tflops": 989.0, "fp8_tflops": 1979.0},
    "H200": {"tbps": 4.8, "bf16_tflops": 989.0, "fp8_tflops": 1979.0},
}

DECODE_BATCHES = (1, 8, 32, 128)
MIXED_BATCHES = (8, 32, 128)
DECODE_KV_LEN = 4096
# KV lengths (the new token included) of a mixed batch, cycled: mean 4096, a partial page, a
# request of one page and a few, lengths that are not multiples of the page.
MIXED_PATTERN = (8191, 33, 4096, 1500, 6000, 700, 7000, 5248)
PREFILL_REQUESTS, PREFILL_NEW, PREFILL_CACHED = 8, 512, 2048


@dataclass(frozen=True)
class Op:
    key: str
    label: str
    kjit: str  # what the kjit stack runs
    peer: str  # what the peer stack runs


OPS = (
    Op("norm1", "RMSNorm", "torch", "torch"),
    Op("quant_x", "quantize h", "kjit.fp8.quantize", "torch"),
    Op("qkv", "QKV GEMM 10240×8192", "kjit.fp8.gemm", "cuBLASLt"),
    Op("rotary", "rotary q, k", "kjit.rotary", "torch"),
    Op("append", "append k, v", "kjit append_paged_kv", "torch index_copy_"),
    Op("attention", "paged attention", "kjit paged decode / prefill", "FlashInfer"),
    Op("quant_attn", "quantize attn", "kjit.fp8.quantize", "torch"),
    Op("o", "O GEMM 8192×8192", "kjit.fp8.gemm", "cuBLASLt"),
    Op("norm2", "residual + RMSNorm", "torch", "torch"),
    Op("quant_h2", "quantize h2", "kjit.fp8.quantize", "torch"),
    Op("gate_up", "gate/up GEMM 57344×8192", "kjit.fp8.gemm", "cuBLASLt"),
    Op("act", "SiLU · mul", "torch", "torch"),
    Op("quant_act", "quantize act", "kjit.fp8.quantize", "torch"),
    Op("down", "down GEMM 8192×28672", "kjit.fp8.gemm", "cuBLASLt"),
    Op("residual", "residual", "torch", "torch"),
)
OP_KEYS = tuple(op.key for op in OPS)

# Agreement of the two stacks (relative L2 of kjit's tensor against the peer's), per checkpoint.
# Both quantize the same bf16 tensors to e4m3, so the first differences come from the GEMMs' and
# rotary's last bf16 bit and from attention's summation order; an e4m3 step is 6-12% of a value,
# so a tensor whose bf16 input moved by an ulp here and there moves by ~1-3% after quantize + GEMM.
TOLERANCES = {
    "qk_rotary": 1e-2,    # q and k after rotary (kjit in place in its qkv, the peer's copy)
    "kv_append": 1e-2,    # the k, v rows the step wrote into each stack's pages
    "attention": 2e-2,    # the attention output
    "o_proj": 5e-2,       # the O projection (after the attention output's quantize)
    "layer_delta": 5e-2,  # out - x: the layer's contribution to the residual stream
}


@dataclass
class Case:
    """One batch composition: q_lens[b] new tokens of request b, whose KV then holds kv_lens[b]
    tokens (the new ones at the end: positions kv_lens[b] - q_lens[b] .. kv_lens[b] - 1)."""
    name: str
    short: str  # a column heading
    kind: str  # "decode" or "prefill"
    q_lens: list
    kv_lens: list

    @property
    def batch(self):
        return len(self.q_lens)

    @property
    def tokens(self):
        return sum(self.q_lens)

    def attended_pairs(self):
        """(query, key) pairs attended per head, causal with the queries at the end of the KV."""
        return sum(q * (kv - q) + q * (q + 1) // 2 for q, kv in zip(self.q_lens, self.kv_lens))


def decode_case(batch, kv_len=DECODE_KV_LEN):
    return Case(f"decode B{batch} kv{kv_len}", f"B{batch}", "decode", [1] * batch, [kv_len] * batch)


def mixed_case(batch):
    lens = [MIXED_PATTERN[i % len(MIXED_PATTERN)] for i in range(batch)]
    return Case(f"decode B{batch} mixed kv (mean {sum(lens) // batch})", f"B{batch} mixed", "decode", [1] * batch,
                lens)


def prefill_case(requests=PREFILL_REQUESTS, new=PREFILL_NEW, cached=PREFILL_CACHED):
    return Case(f"prefill {requests}x{new} on {cached} cached", "prefill", "prefill", [new] * requests,
                [cached + new] * requests)


def default_cases(batches=DECODE_BATCHES, mixed_batches=MIXED_BATCHES, kv_len=DECODE_KV_LEN, prefill=True,
                  prefill_cached=PREFILL_CACHED):
    cases = [decode_case(b, kv_len) for b in batches] + [mixed_case(b) for b in mixed_batches]
    if prefill:
        cases.append(prefill_case(cached=prefill_cached))
    return cases


def op_cost(key, case):
    """(bytes, flops, peak) of op `key` for `case`: every operand read once and every result
    written once; peak names the tensor-core rate its FLOPs count against ("fp8", "bf16", None)."""
    m = case.tokens
    qd, kvd = Q_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    if key in GEMMS:
        n, k = GEMMS[key]
        return n * k + m * k + 2 * m * n, 2 * m * n * k, "fp8"
    if key == "norm1":
        return 2 * 2 * m * HIDDEN + 2 * HIDDEN, 0, None
    if key in ("quant_x", "quant_h2", "quant_attn"):
        return 3 * m * HIDDEN, 0, None  # bf16 in, e4m3 out
    if key == "quant_act":
        return 3 * m * FFN, 0, None
    if key == "rotary":  # q and k read and written, each token's cos and sin rows (f32) read
        return 2 * 2 * m * (qd + kvd) + 2 * 4 * m * HEAD_DIM // 2, 0, None
    if key == "append":  # the new k and v read, written into the pages
        return 2 * 2 * 2 * m * kvd, 0, None
    if key == "attention":
        kv_bytes = 2 * 2 * kvd * sum(case.kv_lens)
        return kv_bytes + 2 * 2 * m * qd, 4 * HEAD_DIM * Q_HEADS * case.attended_pairs(), "bf16"
    if key == "norm2":  # x and o read, x2 and h2 written
        return 4 * 2 * m * HIDDEN + 2 * HIDDEN, 0, None
    if key == "act":  # gate and up read, act written
        return 3 * 2 * m * FFN, 0, None
    if key == "residual":
        return 3 * 2 * m * HIDDEN, 0, None
    raise KeyError(key)


def floor_us(key, case, device):
    nbytes, flops, peak = op_cost(key, case)
    d = DEVICES[device]
    t = nbytes / (d["tbps"] * 1e12)
    if peak:
        t = max(t, flops / (d[f"{peak}_tflops"] * 1e12))
    return t * 1e6


def layer_floor_us(case, device):
    return sum(floor_us(k, case, device) for k in OP_KEYS)


def floors(case):
    """{device: {op key: µs, ..., "layer": µs}} for every device of DEVICES."""
    out = {}
    for dev in DEVICES:
        f = {k: floor_us(k, case, dev) for k in OP_KEYS}
        f["layer"] = sum(f.values())
        out[dev] = f
    return out


def device_key(name):
    """The DEVICES entry whose floors describe a GPU named `name` (H100 unless it says H200)."""
    return "H200" if "H200" in (name or "") else "H100"


# ---- tables -----------------------------------------------------------------------------------------

def _f(x, spec):
    return "-" if x is None else format(x, spec)


def _us(x):
    """A floor in µs: two decimals below 1 µs, one above."""
    return f"{x:.2f}" if x < 1 else f"{x:.1f}"


def _ratio(peer, kjit):
    return None if not peer or not kjit else peer / kjit


def case_table(r, device):
    """Markdown lines for one case's result `r` (bench_layer.py's JSON row): every op alone, their
    sum, the whole layer in one graph, the floors of `device` and the agreement checks."""
    lines = [f"### {r['case']}: M = {r['tokens']} tokens, peer attention = {r.get('peer_attention', '-')}", "",
             f"| op | kjit µs | peer µs | peer / kjit | floor µs ({device}) | kjit % floor | peer % floor | peer runs |",
             "|---|---|---|---|---|---|---|---|"]
    fl = r["floors_us"][device]
    ops = {o["op"]: o for o in r.get("ops", [])}
    sum_k = sum_p = 0.0
    complete_k = complete_p = True
    for op in OPS:
        o = ops.get(op.key, {})
        k, p = o.get("kjit_us"), o.get("peer_us")
        complete_k &= k is not None
        complete_p &= p is not None
        sum_k += k or 0.0
        sum_p += p or 0.0
        f = fl[op.key]
        lines.append(f"| {op.label} | {_f(k, '.1f')} | {_f(p, '.1f')} | {_f(_ratio(p, k), '.2f')} | {_us(f)} | "
                     f"{_f(k and 100 * f / k, '.0f')} | {_f(p and 100 * f / p, '.0f')} | {o.get('peer_impl', op.peer)} |")
    if ops:
        sk, sp = (sum_k if complete_k else None), (sum_p if complete_p else None)
        lines.append(f"| Σ ops, each alone | {_f(sk, '.1f')} | {_f(sp, '.1f')} | {_f(_ratio(sp, sk), '.2f')} | "
                     f"{fl['layer']:.1f} | {_f(sk and 100 * fl['layer'] / sk, '.0f')} | "
                     f"{_f(sp and 100 * fl['layer'] / sp, '.0f')} | |")
    lay = r.get("layer", {})
    k, p = lay.get("kjit_us"), lay.get("peer_us")
    lines.append(f"| **layer, one graph** | **{_f(k, '.1f')}** | **{_f(p, '.1f')}** | **{_f(_ratio(p, k), '.3f')}** | "
                 f"{fl['layer']:.1f} | {_f(k and 100 * fl['layer'] / k, '.0f')} | "
                 f"{_f(p and 100 * fl['layer'] / p, '.0f')} | |")
    checks = r.get("checks", {})
    if checks:
        parts = [f"{name} {_f(v, '.1e')} (≤ {TOLERANCES.get(name, 0):.0e})" for name, v in checks.items()]
        lines += ["", "kjit against the peer, relative L2: " + ", ".join(parts) +
                  ("" if r.get("agree") else "  **DISAGREE**")]
    for e in r.get("errors", []):
        lines.append(f"error: {e}")
    return lines


def summary_table(results, device):
    lines = ["Whole layer, one CUDA graph per stack (ratio = peer µs / kjit µs; > 1: kjit faster):", "",f"| case | M | kjit µs | peer µs | peer / kjit | floor µs ({device}) | kjit % floor | peer attention | "
             "agree |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lay = r.get("layer", {})
        k, p = lay.get("kjit_us"), lay.get("peer_us")
        fl = r["floors_us"][device]["layer"]
        lines.append(f"| {r['case']} | {r['tokens']} | {_f(k, '.1f')} | {_f(p, '.1f')} | {_f(_ratio(p, k), '.3f')} | "
                     f"{fl:.1f} | {_f(k and 100 * fl / k, '.0f')} | {r.get('peer_attention', '-')} | "
                     f"{'yes' if r.get('agree') else 'NO'} |")
    return lines


def floor_tables(cases=None):
    """Markdown: each op's floor for every case, µs on each device of DEVICES ("H100 / H200")."""
    cases = cases or default_cases()
    devs = list(DEVICES)
    lines = ["Floors, µs, " + " / ".join(f"{d} ({DEVICES[d]['tbps']} TB/s)" for d in devs) + f"; dense peaks "
             f"{DEVICES[devs[0]]['bf16_tflops']:.0f} TFLOP/s bf16, {DEVICES[devs[0]]['fp8_tflops']:.0f} fp8:", "",
             "| op | " + " | ".join(c.short for c in cases) + " |", "|---|" + "---|" * len(cases)]

    def cell(values, bold=False):
        text = " / ".join(_us(v) for v in values)
        return f"**{text}**" if bold else text

    for op in OPS:
        lines.append(f"| {op.label} | " + " | ".join(cell([floor_us(op.key, c, d) for d in devs]) for c in cases) + " |")
    lines.append("| **layer** | " + " | ".join(cell([layer_floor_us(c, d) for d in devs], True) for c in cases) + " |")
    return lines


if __name__ == "__main__":
    print("\n".join(floor_tables()))
