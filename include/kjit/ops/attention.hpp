#pragma once
/// \file ops/attention.hpp
/// GQA attention, bf16, head_dim 64/128/256, MMA
/// (mma.sync m16n8k16 bf16) kernels for sm_80+, and on Hopper (sm_90a) wgmma prefills
/// (FlashAttention-3 style) for head_dim 64/128: dense without masks (TMA), and ragged paged
/// (a page-table gather):
///
///   decode          q [batch, 1, q_heads, D] over a contiguous BLHD KV cache, split-KV + merge
///                   (a second kernel, or on sm_90+ a thread-block cluster per split group)
///   paged_decode    the same over a paged KV cache (page pools + CSR page table)
///   prefill         q [batch, q_len, q_heads, D] over contiguous BLHD K/V; causal, non-causal or a
///                   bool mask; split-Q (FlashAttention-2 style)
///   paged_prefill   ragged q [total_q, q_heads, D] (qo_indptr) over a paged KV cache, with a
///                   host-side plan step and a CUDA-graph-safe run step
///   append_paged_kv writes new K/V tokens into the page pools (the caller owns page allocation)
///   attention       one entry that picks the kernel from the call and the variant from the device
///
/// All compute
///   out[b, i, h] = softmax_j(scale · q[b, i, h] · k[b, j, h / group]ᵀ) · v[b, j, h / group]
/// with group = q_heads / kv_heads (any ratio) over the attended keys j of request b: j below its
/// kv_len, and under `causal` j ≤ i + kv_len − q_len (queries aligned to the END of the KV, as in
/// chunked prefill; for decode the one query sees every key), and where a mask is given only where
/// it is true. Online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation for
/// softmax"; FlashAttention-2, Dao 2023) in f32 from the bf16 inputs; P is rounded to bf16 for P·V
/// as FlashAttention does, the output to bf16 once. A row that attends nothing gets zeros and
/// lse = −inf (never NaN).
///
/// Paged KV cache layout (FlashInfer's "NHD" CSR layout): page pools k/v [num_pages, page_size,
/// kv_heads, head_dim]; request b owns pages page_indices[indptr[b] .. indptr[b+1]) in token
/// order, the last holding last_page_len[b] tokens, so
///   kv_len(b) = (indptr[b+1] − indptr[b] − 1) · page_size + last_page_len[b]   (0 with no pages)
/// and token j lives at slot j % page_size of page page_indices[indptr[b] + j / page_size].
/// Pool slots past a request's length are never read.
#include <kjit/names.hpp>
#include <kjit/runtime.hpp>
#include <kjit/tensor.hpp>

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kjit::attention {

/// How a split-KV decode (decode(), paged_decode()) combines the partial results of its KV splits.
/// Performance only: every mode computes the same output, by the same formula (FlashDecoding:
/// out = Σ_s 2^(lse_s − M) o_s / Σ_s 2^(lse_s − M) over the splits s in order), and needs the
/// same workspace. A plan of one split merges nothing and runs as kKernel.
enum class DecodeMerge : int32_t {
  /// kCluster where it can run (a device with thread-block clusters, sm_90+, and a plan of 2 to 8
  /// splits whose clusters the device can hold), else kKernel.
  kAuto,
  /// Each split writes its partial (f32 o and lse) to the workspace; a second kernel combines them.
  kKernel,
  /// The splits of one (request, KV head) run as one thread-block cluster and combine through
  /// distributed shared memory in the same launch: no second kernel, the workspace untouched.
  /// sm_90+ only, at most 8 splits (an automatic split count is then chosen among 1..8).
  kCluster,
};

/// DecodeMerge's names, in enumerator order (kjit/names.hpp): kjit.attention.DECODE_MERGES in
/// Python, and the decode families' `merge` parameter values (without "auto").
inline constexpr EnumName<DecodeMerge> kDecodeMergeNames[] = {
    {DecodeMerge::kAuto, "auto"}, {DecodeMerge::kKernel, "kernel"}, {DecodeMerge::kCluster, "cluster"}};

/// "auto", "kernel", "cluster" (kDecodeMergeNames).
const char* decode_merge_name(DecodeMerge merge) noexcept;

/// Arguments of decode(). All tensors on one CUDA device.
struct DecodeArgs {
  /// [batch, 1, q_heads, head_dim] bf16, head_dim contiguous, 16-byte aligned rows (pointer and
  /// batch/head strides). Query head h attends with KV head h / (q_heads / kv_heads).
  TensorRef q;
  /// [batch, max_kv_len, kv_heads, head_dim] bf16 (BLHD), head_dim contiguous, 16-byte aligned
  /// rows (pointer and batch/token/head strides: views of a larger cache are fine);
  /// q_heads % kv_heads == 0 (any ratio); head_dim 64, 128 or 256. Rows at or past kv_lens[b] are
  /// never read.
  TensorRef k;
  TensorRef v;
  /// [batch] int32 on the device, contiguous, each in [0, max_kv_len] (values outside are clamped
  /// on the device, not reported: checking would need a sync); ndim == 0 means all max_kv_len.
  TensorRef kv_lens;
  /// Optional [batch, max_kv_len] bool (or u8; nonzero = attend), any strides; ndim == 0 for none.
  TensorRef mask;
  /// [batch, 1, q_heads, head_dim] bf16, head_dim contiguous, 16-byte aligned rows. A row with no
  /// attended position (kv_len 0, or everything masked) is written as zeros.
  TensorRef out;
  /// Optional [batch, q_heads] f32 log-sum-exp (natural log) of the scaled scores; -inf for a row
  /// with no attended position; ndim == 0 for none.
  TensorRef lse;
  /// Softmax scale, finite (any sign); 0 means 1 / sqrt(head_dim).
  float scale = 0.f;
  /// Split-KV count; 0 lets the planner choose from the SM count, batch, kv_heads and max_kv_len
  /// (filling ~1–2 waves of CTAs). A positive count splits max_kv_len into that many equal
  /// ranges (fewer when max_kv_len is shorter); 1 writes out/lse directly and needs no workspace.
  int num_splits = 0;
  /// How the splits combine (DecodeMerge). kCluster takes num_splits 0 or 1..8 and throws
  /// Unsupported on a device without clusters (below sm_90) or that cannot hold the clusters.
  DecodeMerge merge = DecodeMerge::kAuto;
};

/// Bytes of device workspace decode() needs for `args` on the device of `args.q` (split-KV
/// partials: f32 o and lse per split; 0 when one split suffices). Depends only on the shapes,
/// num_splits, merge and the device's SM count and arch, so a caller can size it once per shape
/// bucket. A plan whose splits combine in a cluster (DecodeMerge::kCluster) writes none of it,
/// but the answer is the same as for the merge kernel: the call may still run the merge kernel
/// (on a device that cannot hold the clusters, or under KJIT_JIT=async while the cluster kernel
/// compiles). Throws InvalidArgument for the arguments decode() refuses, by the same rules but
/// naming kjit::attention::decode_workspace_bytes; DriverError without a driver (unless
/// num_splits == 1, which needs no device query).
size_t decode_workspace_bytes(const DecodeArgs& args);

/// Runs GQA decode on `stream`. `workspace` must hold decode_workspace_bytes(args) bytes (16-byte
/// aligned; may be null when that is 0). Never allocates or synchronizes (graph-capturable).
/// All argument checks run before the first driver call. Throws InvalidArgument naming the
/// tensor and the rule it broke (or the workspace bytes needed), Unsupported below sm_80,
/// DriverError for driver failures. Scores are accumulated in f32 from the bf16 inputs; P is
/// rounded to bf16 for P·V (as FlashAttention does), the output to bf16 at the end.
void decode(const DecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
            Runtime& runtime = Runtime::global());

// ---- Paged KV cache ------------------------------------------------------------------------------

/// A paged KV cache (see the file comment). All tensors on one CUDA device.
struct PagedKVCache {
  /// [num_pages, page_size, kv_heads, head_dim] bf16 page pools; head_dim contiguous, rows
  /// 16-byte aligned (pointer and page/slot/head strides). k and v must have the same shape and
  /// strides (separate tensors, or the two halves of one [num_pages, 2, page_size, ...] buffer);
  /// the page stride must be a multiple of the slot stride, and num_pages · (page stride / slot
  /// stride) < 2^31. page_size ≥ 1 (1 = token-level indirection).
  TensorRef k;
  TensorRef v;
  /// [batch + 1] int32, contiguous, non-decreasing from 0 (not checked on the device).
  TensorRef indptr;
  /// [nnz] int32, contiguous (nnz may exceed indptr[batch]: a fixed-capacity table). Every id
  /// must be < num_pages (the caller's contract: checking would need a sync).
  TensorRef page_indices;
  /// [batch] int32, contiguous, each in [1, page_size] for a request with pages (clamped to
  /// [0, page_size] on the device).
  TensorRef last_page_len;
};

/// Arguments of append_paged_kv(): writes new tokens' K and V rows into the page pools. The page
/// table must already cover them (the caller allocates pages and updates indptr / page_indices /
/// last_page_len first). Each new token is placed by either
///   * batch_indices[n], positions[n] (its request and its position in that request's KV), or
///   * append_indptr: request b's new tokens are rows append_indptr[b] .. append_indptr[b+1) of
///     k/v and take the LAST n_b positions of its KV: kv_len(b) − n_b + i (the usual decode /
///     chunked-prefill append).
/// A token whose position is negative or at or past its request's kv_len is skipped.
struct AppendPagedKVArgs {
  /// [num_new, kv_heads, head_dim] bf16 new keys/values; head_dim contiguous, 16-byte aligned rows.
  TensorRef k;
  TensorRef v;
  /// The cache to write into (k/v pools, and the table that locates each position).
  PagedKVCache cache;
  /// [num_new] int32 each, contiguous; give both, or neither and append_indptr.
  TensorRef batch_indices;
  TensorRef positions;
  /// [batch + 1] int32, contiguous, append_indptr[batch] = num_new.
  TensorRef append_indptr;
};

/// Appends on `stream`. Never allocates or synchronizes. num_new == 0 launches nothing. Throws
/// InvalidArgument (before any driver call) naming the tensor and rule, Unsupported below sm_80,
/// DriverError for driver failures.
void append_paged_kv(const AppendPagedKVArgs& args, CUstream stream, Runtime& runtime = Runtime::global());

// ---- Paged decode --------------------------------------------------------------------------------

/// Arguments of paged_decode(): decode (one query per request) over a PagedKVCache.
struct PagedDecodeArgs {
  /// [batch, 1, q_heads, head_dim] bf16, head_dim contiguous, 16-byte aligned rows.
  TensorRef q;
  PagedKVCache cache;
  /// [batch, 1, q_heads, head_dim] bf16, as q.
  TensorRef out;
  /// Optional [batch, q_heads] f32 natural-log LSE (−inf for an empty request); ndim 0 for none.
  TensorRef lse;
  /// Softmax scale, finite (any sign); 0 means 1 / sqrt(head_dim).
  float scale = 0.f;
  /// Split-KV count: 0 lets the planner choose; a positive count splits every request's own
  /// length into that many ranges of whole KV tiles. 1 needs no workspace.
  int num_splits = 0;
  /// The largest request length, in tokens, used only by the split planner (the host does not
  /// know the paged lengths); 0 means nnz · page_size / batch. Where it is 1.5× that mean or
  /// more (a ragged batch), the planner takes at least ceil(2 · hint / mean) splits, at most 8,
  /// so the longest requests' CTAs do not hold up the rest. Results never depend on it.
  int64_t kv_len_hint = 0;
  /// How the splits combine (DecodeMerge), as DecodeArgs::merge.
  DecodeMerge merge = DecodeMerge::kAuto;
};

/// Bytes of workspace paged_decode() needs (split partials; 0 for one split; a cluster merge
/// writes none of it but sizes it as decode_workspace_bytes says). Depends on the shapes,
/// num_splits, kv_len_hint, merge and the SM count and arch. Throws InvalidArgument for the
/// arguments paged_decode refuses, by the same rules but naming
/// kjit::attention::paged_decode_workspace_bytes; DriverError without a driver (unless
/// num_splits == 1).
size_t paged_decode_workspace_bytes(const PagedDecodeArgs& args);

/// Runs paged decode on `stream` (the decode kernel with a page-table KV source: the same
/// split-KV + merge as decode()). `workspace`: paged_decode_workspace_bytes(args) bytes,
/// 16-byte aligned. Never allocates or synchronizes. Throws InvalidArgument / Unsupported /
/// DriverError as decode().
void paged_decode(const PagedDecodeArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
                  Runtime& runtime = Runtime::global());

// ---- Prefill ---------------------------------------------------------------------------------------

/// Kernel implementations ("variants") of the attention entry (and of prefill()).
enum class AttentionVariant {
  kAuto,   ///< the best capable variant for the device and call (attention() also reads KJIT_ATTN_VARIANT)
  kMma,    ///< mma.sync m16n8k16 bf16 kernels, sm_80+, head_dim 64/128/256
  /// Hopper prefill (wgmma, warp-specialized; sm_90a): head_dim 64/128, causal or full, chunked,
  /// any GQA ratio, LSE. Dense prefill (TMA): no bool mask and no per-request kv_lens (those run
  /// on kMma unless kWgmma is requested explicitly). Ragged paged prefill (a page-table gather):
  /// plans of 128-row tiles, any page size.
  kWgmma,
};

/// AttentionVariant's names, in enumerator order (kjit/names.hpp): kjit.attention.VARIANTS in
/// Python, and what KJIT_ATTN_VARIANT takes.
inline constexpr EnumName<AttentionVariant> kAttentionVariantNames[] = {
    {AttentionVariant::kAuto, "auto"}, {AttentionVariant::kMma, "mma"}, {AttentionVariant::kWgmma, "wgmma"}};

/// "auto", "mma", "wgmma" (kAttentionVariantNames).
const char* variant_name(AttentionVariant variant) noexcept;

/// Arguments of prefill(): dense (rectangular) prefill over contiguous K/V.
struct PrefillArgs {
  /// [batch, q_len, q_heads, head_dim] bf16; head_dim contiguous, 16-byte aligned rows (pointer
  /// and batch/token/head strides). head_dim 64, 128 or 256.
  TensorRef q;
  /// [batch, max_kv_len, kv_heads, head_dim] bf16 (BLHD), same rules; q_heads % kv_heads == 0.
  TensorRef k;
  TensorRef v;
  /// Optional [batch] int32 per-request KV lengths (contiguous; clamped to [0, max_kv_len] on
  /// the device); ndim 0: every request has max_kv_len keys. Under causal each request's
  /// queries align to the end of its own kv_len.
  TensorRef kv_lens;
  /// Optional bool (or u8, nonzero = keep) mask, 2-D [batch, max_kv_len] or 3-D
  /// [batch, q_len, max_kv_len], any strides; combined with causal when both are given.
  TensorRef mask;
  bool causal = false;
  /// [batch, q_len, q_heads, head_dim] bf16, as q.
  TensorRef out;
  /// Optional [batch, q_heads, q_len] f32 natural-log LSE, any strides; ndim 0 for none.
  TensorRef lse;
  /// Softmax scale, ≥ 0; 0 means 1 / sqrt(head_dim).
  float scale = 0.f;
  /// Query rows per CTA: 0 lets kjit choose (64 for short q_len or when 128-row tiles would not
  /// fill the device, else 128); 64 or 128 forces a tile (tuning, tests). The mma.sync kernel
  /// only (the wgmma kernel's tile is 128 rows at head_dim 128, 192 at head_dim 64).
  int block_m = 0;
  /// kAuto: the wgmma kernel where it can run the call (an sm_90 device, head_dim 64/128, no
  /// mask, no kv_lens), else the mma.sync kernel. kMma / kWgmma are strict: Unsupported when that
  /// kernel cannot run the call.
  AttentionVariant variant = AttentionVariant::kAuto;
};

/// Runs prefill on `stream`: split-Q, a CTA per (64, 128 or 192 query rows, q head, request), fully
/// masked KV tiles skipped under causal. mma.sync kernel: K/V tiles through a cp.async pipeline;
/// wgmma kernel (sm_90a): a TMA producer warpgroup and two (head_dim 128) or three (head_dim 64)
/// wgmma consumer warpgroups of 64 query rows each (FlashAttention-3 style). Never allocates or synchronizes; needs no workspace. q_len == 0 or batch == 0
/// launches nothing. Throws InvalidArgument (before any driver call), Unsupported below sm_80 or
/// when an explicitly requested variant cannot run the call, DriverError.
void prefill(const PrefillArgs& args, CUstream stream, Runtime& runtime = Runtime::global());

// ---- Ragged paged prefill ------------------------------------------------------------------------

/// Whether a ragged paged prefill packs the query heads of one KV head into a work item's rows
/// (PagedPrefillPlanArgs::pack_gqa). Packing changes which CTA computes a row, never its value: a
/// packed work item is (request, KV head, tile of the request's q_len · group rows, token-major:
/// row r is token r / group, q head kv_head · group + r % group), so each K/V tile a CTA gathers
/// serves the whole group instead of one q head. Only the sm_90a wgmma kernel runs packed plans.
enum class PackGqa : int32_t {
  kAuto,  ///< pack where the group (q_heads / kv_heads) is > 1 and the planned kernel is wgmma
  kOn,    ///< pack (group > 1; paged_prefill throws Unsupported where wgmma cannot run the plan)
  kOff,   ///< one q head per work item
};

/// PackGqa's names, in enumerator order (kjit/names.hpp): kjit.attention.PACK_GQA in Python.
inline constexpr EnumName<PackGqa> kPackGqaNames[] = {{PackGqa::kAuto, "auto"}, {PackGqa::kOn, "on"}, {PackGqa::kOff, "off"}};

/// How the sm_90a wgmma paged prefill loads K and V tiles from the page pools. TMA: a 4-D tensor
/// map over each pool [num_pages, page_size, kv_heads, head_dim], one 16-row box per 16 tokens
/// of a tile (each inside one page when page_size is a multiple of 16), issued by one producer
/// warp; the tile holding a request's last key (whose rows past it must read as zeros) is still
/// gathered. Each way is its own kernel (attention.paged_prefill_sm90's page_load), at every tile
/// of the wgmma kernel (128 rows, and 192 at head_dim 64). Gather: the producer warpgroup's 128
/// threads look up each token's pool row and copy it with 16-byte cp.async (any page size). The
/// result is the same.
enum class PageLoad : int32_t {
  kAuto,    ///< TMA where the page size is a multiple of 16 and the wgmma kernel runs, else gather
  kGather,  ///< always gather
  kTma,     ///< TMA (page_size a multiple of 16, tiles of 128 rows or more; paged_prefill throws
            ///< Unsupported where the wgmma kernel does not run the plan)
};

/// PageLoad's names, in enumerator order (kjit/names.hpp): kjit.attention.PAGE_LOADS in Python.
inline constexpr EnumName<PageLoad> kPageLoadNames[] = {
    {PageLoad::kAuto, "auto"}, {PageLoad::kGather, "gather"}, {PageLoad::kTma, "tma"}};

/// The host-side plan of a ragged paged prefill: the work map (one entry per q tile of
/// tile_rows = 64, 128 or 192 query rows; 192 at head_dim 64 only, run by the sm_90a wgmma
/// kernel alone), built once per batch composition, outside the hot path.
/// For Q lengths [70, 10, 130]: q_tile_to_batch = [0, 0, 1, 2, 2, 2], q_tile_to_index =
/// [0, 1, 0, 0, 1, 2] with 64-row tiles, [0, 1, 2, 2] / [0, 0, 0, 1] with 128-row tiles.
/// Packed (pack_group 4, 128-row tiles) the same requests have 280, 40 and 520 rows: [0, 0, 0, 1, 2,
/// 2, 2, 2, 2] / [0, 1, 2, 0, 0, 1, 2, 3, 4].
struct PagedPrefillPlan {
  int64_t batch = 0;
  int64_t total_q = 0;     ///< qo_indptr[batch]
  int64_t head_dim = 0;
  int tile_rows = 0;       ///< query rows per work item
  /// Query heads packed per KV head (PackGqa): 1, a work item per (request, q tile) and q head;
  /// else the group q_heads / kv_heads the plan was made for, a work item per (request, tile of
  /// the request's q_len · pack_group rows) and KV head. paged_prefill checks it against the call.
  int64_t pack_group = 1;
  /// The kernel paged_prefill runs. kAuto (what plan_paged_prefill sets unless a tuning table
  /// chose): the Hopper kernel (TMA-free wgmma, sm_90a) where it can run the plan (head_dim 64 or
  /// 128 at tile_rows 128, head_dim 64 at 192), else mma.sync (tile_rows 64 or 128 only: a
  /// 192-row plan on a device without wgmma throws Unsupported). kMma / kWgmma are strict: paged_prefill throws
  /// Unsupported where that kernel cannot run the plan. Set it after planning to force one.
  AttentionVariant variant = AttentionVariant::kAuto;
  /// How the wgmma kernel loads K and V (PageLoad); paged_prefill checks kTma against the cache's
  /// page size. Set it after planning to force one.
  PageLoad page_load = PageLoad::kAuto;
  /// [num_work] request of each work item, and its request-local q tile.
  std::vector<int32_t> q_tile_to_batch;
  std::vector<int32_t> q_tile_to_index;
  /// The sm_90a wgmma kernel's persistent schedule, or empty: a CTA per work item and head (what
  /// the mma.sync kernel always runs). CTA c runs the units cta_work[cta_work_indptr[c] ..
  /// cta_work_indptr[c + 1]) in order, unit = work item · schedule_heads + head, where
  /// schedule_heads is the q_heads (or, packed, the kv_heads) the plan was made for: paged_prefill
  /// checks it against the call. Built by plan_paged_prefill(PagedPrefillPlanArgs) where the
  /// device runs the wgmma kernel: min(SMs, units) CTAs; the units in order (each request's last
  /// q tile first, heads fastest), each to the CTA that frees up first by its estimated cost (its
  /// KV tiles of 128 keys, plus one), so the CTAs end within about one unit of each other and each
  /// gathers its next unit's Q and K/V while it finishes the last.
  std::vector<int32_t> cta_work_indptr;
  std::vector<int32_t> cta_work;
  int64_t schedule_heads = 0;
  /// Device workspace the run step reads the map from: q_tile_to_batch at byte 0,
  /// q_tile_to_index at map_index_offset, and with a schedule cta_work_indptr at
  /// schedule_indptr_offset and cta_work at schedule_work_offset (each 256-byte aligned).
  size_t workspace_bytes = 0;
  size_t map_index_offset = 0;
  size_t schedule_indptr_offset = 0;
  size_t schedule_work_offset = 0;

  int64_t num_work() const { return static_cast<int64_t>(q_tile_to_batch.size()); }
  /// CTAs of the persistent schedule; 0 without one.
  int64_t ctas() const { return cta_work_indptr.empty() ? 0 : static_cast<int64_t>(cta_work_indptr.size()) - 1; }
};

/// Plans a ragged prefill from the host copy of qo_indptr ([batch + 1], non-decreasing from 0)
/// for `head_dim` (64, 128 or 256). `tile_rows` is 64 or 128 (a kernel exists for each), 192 at
/// head_dim 64 (the sm_90a wgmma kernel's three-consumer tile; paged_prefill throws Unsupported
/// on a device without it), or 0 to let kjit choose by its built-in rule: 64 when the non-empty
/// requests average ≤ 64 query rows (short chunks would waste most of a 128-row tile), else 128
/// (this overload knows no device, so it never picks 192). Other values (and 192 at another
/// head_dim) throw InvalidArgument. Host only: no driver call, and no tuning table is read (the
/// PagedPrefillPlanArgs overload below consults the device's).
PagedPrefillPlan plan_paged_prefill(const int32_t* qo_indptr_host, int64_t batch, int64_t head_dim,
                                    int tile_rows = 0);

/// What the tuned plan step of a ragged paged prefill reads: the host copies of the batch's
/// layout (the inputs of FlashInfer's BatchPrefillWithPagedKVCacheWrapper.plan) and the device
/// whose tuning table (`kjit tune paged_prefill`) may choose the tile.
struct PagedPrefillPlanArgs {
  /// [batch + 1] host int32, non-decreasing from 0: request b's queries are rows
  /// qo_indptr[b] .. qo_indptr[b+1) of q.
  const int32_t* qo_indptr_host = nullptr;
  /// [batch + 1] host int32, non-decreasing from 0: the host copy of PagedKVCache::indptr.
  const int32_t* kv_indptr_host = nullptr;
  /// [batch] host int32: the host copy of PagedKVCache::last_page_len (clamped to
  /// [0, page_size] as on the device).
  const int32_t* last_page_len_host = nullptr;
  int64_t batch = 0;
  int64_t q_heads = 0;    ///< ≥ 1, as q will have
  int64_t head_dim = 0;   ///< 64, 128 or 256
  int64_t page_size = 0;  ///< ≥ 1, tokens per page of the cache
  bool causal = false;    ///< as paged_prefill will be called (tuning bucket only; results never depend on it)
  /// 64, 128 or (head_dim 64, a device with sm_90a wgmma) 192 forces the tile (never tuned); 0
  /// lets kjit choose: the stored choice of the device's tuning table for this call's bucket when
  /// there is one, else the built-in rule of the overload above, which here, knowing the device,
  /// also picks 192 at head_dim 64 on sm_90a when the non-empty requests average > 128 rows.
  int tile_rows = 0;
  /// The device whose tuning table chooses: an ordinal, or -1 for the device of the calling
  /// thread's current CUDA context (device 0 when none is current). Without a CUDA driver or
  /// device, or with KJIT_TUNING=off, no table is read and the built-in rule chooses.
  int device = -1;
  /// kAuto, or the kernel paged_prefill must run (the plan's `variant`). With tile_rows 0 a forced
  /// kernel gets a tile it runs where the table or the rule chose one it does not: mma.sync at
  /// most 128 rows, the Hopper kernel at least 128.
  AttentionVariant variant = AttentionVariant::kAuto;
  /// KV heads of the cache, as paged_prefill will get it: 0 (unknown: the plan never packs) or a
  /// divisor of q_heads.
  int64_t kv_heads = 0;
  /// Packing of the group's q heads (PackGqa). kAuto packs where kv_heads gives a group > 1 and
  /// the kernel the plan names is the sm_90a wgmma one (a tuning table may choose otherwise);
  /// then the tile rule counts q_len · group rows per request and never takes 64-row tiles.
  /// kOn needs kv_heads with a group > 1, a tile of 128 or more rows and a variant other than
  /// mma; kOff never packs.
  PackGqa pack_gqa = PackGqa::kAuto;
  /// Where the device runs the sm_90a wgmma kernel and the variant is not mma: true gives the
  /// plan a persistent schedule (PagedPrefillPlan::cta_work), false a CTA per work item and head.
  /// Results never depend on it.
  bool persistent = true;
  /// The persistent schedule's CTAs at most: 0 for one per SM of the device; fewer leave SMs to
  /// kernels on other streams. ≥ 0.
  int max_ctas = 0;
  /// The plan's PagedPrefillPlan::page_load. kTma needs a page_size that is a multiple of 16, a
  /// variant other than mma and tile_rows other than 64 (with 0 the plan gets a wgmma tile).
  PageLoad page_load = PageLoad::kAuto;
};

/// Plans a ragged prefill as the overload above, with the tile chosen for the device (see
/// PagedPrefillPlanArgs; docs/tuning.md has the bucket rule). Builds no device state: upload the
/// plan with upload_paged_prefill_plan. Throws InvalidArgument naming the field and rule (null
/// host arrays, a decreasing indptr, head_dim not 64/128/256, q_heads or page_size < 1,
/// tile_rows not 0/64/128/192, 192 at a head_dim other than 64 or on a device without sm_90a
/// wgmma, kv_heads not 0 or a divisor of q_heads, pack_gqa kOn without a group > 1, with tile_rows
/// 64 or with variant mma, or on a device without sm_90a wgmma, a device ordinal out of range,
/// max_ctas < 0, page_load kTma with a page_size that is not a multiple of 16, with variant mma
/// or with tile_rows 64), DriverError when the driver fails.
PagedPrefillPlan plan_paged_prefill(const PagedPrefillPlanArgs& args);

/// Copies the plan's work map and schedule into `workspace` (≥ plan.workspace_bytes, 16-byte
/// aligned memory of CUDA device `device`; the current context is used when one is current). A
/// synchronous host-to-device copy: part of the plan step, not to be captured in a CUDA graph. A
/// caller that prefers its own (asynchronous) copy writes the arrays at the plan's offsets instead
/// (PagedPrefillPlan::workspace_bytes). Throws InvalidArgument for a short or misaligned workspace,
/// DriverError.
void upload_paged_prefill_plan(const PagedPrefillPlan& plan, void* workspace, size_t workspace_bytes,
                               int device = 0);

/// Arguments of paged_prefill().
struct PagedPrefillArgs {
  /// [total_q, q_heads, head_dim] bf16, request b's queries at rows qo_indptr[b] ..
  /// qo_indptr[b+1); head_dim contiguous, 16-byte aligned rows. total_q == plan.total_q.
  TensorRef q;
  /// [batch + 1] int32 on the device, contiguous, equal to the host copy the plan was built from.
  TensorRef qo_indptr;
  PagedKVCache cache;
  bool causal = false;
  /// [total_q, q_heads, head_dim] bf16, as q.
  TensorRef out;
  /// Optional [q_heads, total_q] f32 natural-log LSE, any strides; ndim 0 for none.
  TensorRef lse;
  /// Softmax scale, ≥ 0; 0 means 1 / sqrt(head_dim).
  float scale = 0.f;
};

/// Runs the ragged paged prefill of `plan` on `stream`: plan.num_work() × q_heads CTAs (×
/// kv_heads for a packed plan: plan.pack_group must then be the call's q_heads / kv_heads), or
/// plan.ctas() persistent CTAs on the wgmma kernel when the plan has a schedule, the work map read
/// from `workspace` (where upload_paged_prefill_plan put it). The same kernel
/// body as prefill() with a packed Q schedule and a page-table KV source. Never allocates or
/// synchronizes (graph-capturable; re-plan outside the graph with the same work count to replay
/// it for another batch). On the wgmma kernel K and V load by TMA or by gather (plan.page_load).
/// Throws InvalidArgument (naming the tensor or plan field and the rule: plan.page_load kTma with
/// a cache page size that is not a multiple of 16 or a plan of 64-row tiles among them),
/// Unsupported (plan.page_load kTma where the call runs the mma.sync kernel), DriverError.
void paged_prefill(const PagedPrefillArgs& args, const PagedPrefillPlan& plan, const void* workspace,
                   size_t workspace_bytes, CUstream stream, Runtime& runtime = Runtime::global());

// ---- One entry -----------------------------------------------------------------------------------

/// Arguments of attention(): the union of the calls above; which tensors are present picks the
/// kernel:
///   cache.indptr given (paged):  qo_indptr given → paged_prefill (plan required);
///                                else q [batch, 1, Hq, D] → paged_decode
///   contiguous k/v:              q_len == 1 → decode (a [batch, 1, kv_len] 3-D mask is read as
///                                the decode's 2-D one); else prefill
/// lse is [batch, q_heads, q_len] for the dense calls (q_len = 1 for decode) and
/// [q_heads, total_q] for the ragged one.
struct AttentionArgs {
  /// [batch, q_len, q_heads, D] (dense) or [total_q, q_heads, D] (with qo_indptr).
  TensorRef q;
  /// Contiguous [batch, max_kv_len, kv_heads, D] K/V (not paged).
  TensorRef k;
  TensorRef v;
  /// Contiguous K/V only: optional [batch] int32 lengths.
  TensorRef kv_lens;
  /// The paged cache (indptr given = paged).
  PagedKVCache cache;
  /// Ragged q: [batch + 1] int32 on the device, and the plan built from its host copy.
  TensorRef qo_indptr;
  const PagedPrefillPlan* plan = nullptr;
  /// Contiguous K/V only: optional 2-D/3-D bool mask (see PrefillArgs / DecodeArgs).
  TensorRef mask;
  bool causal = false;
  TensorRef out;
  TensorRef lse;
  /// Softmax scale as the chosen call takes it (≥ 0 for prefill; any finite value for decode);
  /// 0 means 1 / sqrt(head_dim).
  float scale = 0.f;
  /// Decode: split-KV count (0 = auto), the paged planner's length hint and the split merge.
  int num_splits = 0;
  int64_t kv_len_hint = 0;
  DecodeMerge merge = DecodeMerge::kAuto;
  /// Dense prefill: query rows per CTA (0 = choose; see PrefillArgs::block_m).
  int block_m = 0;
  /// kAuto: the runtime's RuntimeConfig::attention_variant (KJIT_ATTN_VARIANT: "auto", "mma" or
  /// "wgmma") when capable, else the best capable variant (wgmma for a prefill it can run, else
  /// mma; a ragged call's kAuto defers to its plan's variant first),
  /// falling back to the next capable one. Any other value is strict: Unsupported when that
  /// variant cannot run this call on this device.
  AttentionVariant variant = AttentionVariant::kAuto;
};

/// Which kernel attention() runs for `args`.
enum class AttentionKind { kDecode, kPagedDecode, kPrefill, kPagedPrefill };

/// The kernel attention() would run for `args`, from which tensors are present (see
/// AttentionArgs); host only, no driver call. Throws InvalidArgument when no kernel takes that
/// combination (both contiguous k/v and a cache, a ragged call without its plan, ...).
AttentionKind attention_kind(const AttentionArgs& args);

/// Bytes of workspace attention() needs (decode split partials, or the ragged plan's map).
size_t attention_workspace_bytes(const AttentionArgs& args);

/// Runs the call on `stream` through the kernel its arguments name (see AttentionArgs) and the
/// variant chosen for the device. For a ragged call `workspace` is the one the plan was uploaded
/// to. Throws InvalidArgument for arguments no kernel takes, Unsupported when the requested
/// variant (or, for kAuto, every variant) cannot run the call, DriverError.
void attention(const AttentionArgs& args, void* workspace, size_t workspace_bytes, CUstream stream,
               Runtime& runtime = Runtime::global());

}  // namespace kjit::attention
