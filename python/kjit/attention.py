"""GQA attention ops (kjit/ops/attention.hpp has the full contracts: shapes, dtypes, layouts).

All take DLPack tensors on one CUDA device and run on the first tensor's framework's current
stream unless `stream=` is given. Outputs not passed in are allocated in q's framework; with
`return_lse=True` (or `lse=` given) the call returns (out, lse). Split-KV workspaces are sized per
call and cached per (device, stream) unless `workspace=` (a byte tensor) is given.

decode(q, k, v, kv_lens=None, *, mask, out, lse, return_lse, scale, num_splits, merge, workspace, stream)
    q/out [batch, 1, q_heads, D] bf16, k/v [batch, max_kv_len, kv_heads, D] bf16, kv_lens [batch] i32
    num_splits: 0 lets the planner choose; n > 0 forces n KV splits per (request, KV head)
    merge {decode_merges}: how the splits combine (the same result either way). "auto" takes
    "cluster" on sm_90+ for plans of 2 to 8 splits, else "kernel"; "kernel" writes partials to the
    workspace and combines them in a second kernel; "cluster" (sm_90+, num_splits 0 or at most 8)
    runs the splits of one (request, KV head) as a thread-block cluster that combines them through
    distributed shared memory in the same launch
decode_workspace_bytes(q, k, v, kv_lens=None, *, mask, num_splits, merge) -> int
    the bytes decode's `workspace=` must hold for this call (0: none); validates as decode does
paged_decode(q, k_pages, v_pages, indptr, page_indices, last_page_len, *, out, lse, return_lse,
             scale, num_splits, kv_len_hint, merge, workspace, stream)
paged_decode_workspace_bytes(q, k_pages, v_pages, indptr, page_indices, last_page_len, *,
                             num_splits, kv_len_hint, merge) -> int
prefill(q, k, v, *, kv_lens, mask, causal, out, lse, return_lse, scale, block_m, variant, stream)
    lse [batch, q_heads, q_len]; variant {variants}
append_paged_kv(k, v, k_pages, v_pages, indptr, page_indices, last_page_len, *, batch_indices,
                positions, append_indptr, stream)
plan_paged_prefill(qo_indptr, head_dim, tile_rows=0, device=0, *, variant="auto", kv_indptr=None,
                   last_page_len=None, q_heads=0, page_size=0, causal=False, kv_heads=0,
                   pack_gqa="auto", persistent=True, max_ctas=0, page_load="auto") -> PagedPrefillPlan
    qo_indptr, kv_indptr, last_page_len: host copies (lists or CPU int32 tensors) of the batch's
    layout, as paged_prefill will get it on the device; uploads the work map (synchronous).
    With the KV layout (kv_indptr, last_page_len, q_heads, page_size, causal), tile_rows=0 takes
    the choice of `device`'s tuning table (kjit tune paged_prefill) for the call's bucket, else
    the built-in rule for `device` (64-row tiles when the requests average <= 64 query rows; at
    head_dim 64 on sm_90a, 192-row tiles when they average more than 128; else 128).
    tile_rows=64, 128 or, at head_dim 64, 192 (the Hopper kernel's three-consumer tile; no
    mma.sync kernel runs it) forces the tile, which no table overrides: only then may the KV
    layout be left out (host-only planning, as tests and benchmarks of one tile do); tile_rows=0
    without it raises InvalidArgument.
    variant "auto" (the Hopper wgmma kernel where it can run the plan: head_dim 64/128 at 128-row
    tiles, head_dim 64 at 192; else mma.sync), "mma" or "wgmma" (forced: paged_prefill raises
    Unsupported where that kernel cannot run the plan; with tile_rows=0 each gets a tile it runs:
    "mma" at most 128 rows, "wgmma" at least 128).
    kv_heads (with the KV layout; 0: unknown, never packs) and pack_gqa {pack_gqa}: "auto" packs
    the q heads of one KV head into a work item's rows (token-major: row r is token r / group,
    head kv_head * group + r % group) where the group q_heads / kv_heads is > 1 and the Hopper
    wgmma kernel runs the plan, so each gathered K/V tile serves the whole group; "on" forces it
    (group > 1, 128 or more rows), "off" plans one q head per work item. The result is the same.
    persistent (with the KV layout, where `device` runs the Hopper wgmma kernel and variant is not
    "mma"): True gives the plan a persistent schedule (`ctas` CTAs, each running a list of work
    items balanced by their KV tiles; max_ctas > 0 caps them, leaving SMs to other streams); False
    keeps a CTA per work item and head. The result is the same.
    page_load {page_loads}: how the Hopper wgmma kernel loads K and V. "tma" loads each tile's
    pages with TMA boxes of 16 slots (page_size a multiple of 16, tiles of 128 or 192 rows; a
    request's tail tile is still gathered); "gather" copies token rows with
    cp.async (any page size); "auto" takes TMA where it can. The result is the same.
    Properties: batch, total_q, head_dim, tile_rows, num_work, pack_group (1: not packed), ctas
    (0: no persistent schedule), workspace_bytes, variant, page_load, device.
DECODE_MERGES: the names `merge=` takes ({decode_merges}).
PACK_GQA: the names `pack_gqa=` takes ({pack_gqa}).
PAGE_LOADS: the names `page_load=` takes ({page_loads}).
VARIANTS: the names `variant=` takes ({variants}).
WIDE_TILE_ROWS, WIDE_TILE_HEAD_DIM: the Hopper kernel's wide tile (192 rows, at head_dim 64 only).
paged_prefill(q, qo_indptr, k_pages, v_pages, indptr, page_indices, last_page_len, plan, *,
              causal, out, lse, return_lse, scale, stream)     lse [q_heads, total_q]
"""
from ._C import PagedPrefillPlan
from ._C import attention_append_paged_kv as append_paged_kv
from ._C import attention_decode as decode
from ._C import attention_decode_workspace_bytes as decode_workspace_bytes
from ._C import attention_paged_decode as paged_decode
from ._C import attention_paged_decode_workspace_bytes as paged_decode_workspace_bytes
from ._C import attention_paged_prefill as paged_prefill
from ._C import attention_prefill as prefill
from ._C import attention_decode_merges as DECODE_MERGES
from ._C import attention_pack_gqa as PACK_GQA
from ._C import attention_page_loads as PAGE_LOADS
from ._C import attention_variants as VARIANTS
from ._C import attention_wide_tile_head_dim as WIDE_TILE_HEAD_DIM
from ._C import attention_wide_tile_rows as WIDE_TILE_ROWS
from ._names import fill_doc

__doc__ = fill_doc(__doc__, variants=VARIANTS, pack_gqa=PACK_GQA, page_loads=PAGE_LOADS, decode_merges=DECODE_MERGES)

plan_paged_prefill = PagedPrefillPlan

__all__ = ["DECODE_MERGES", "PACK_GQA", "PAGE_LOADS", "PagedPrefillPlan", "VARIANTS", "WIDE_TILE_HEAD_DIM", "WIDE_TILE_ROWS", "append_paged_kv", "decode",
           "decode_workspace_bytes", "paged_decode",
           "paged_decode_workspace_bytes", "paged_prefill", "plan_paged_prefill", "prefill"]
