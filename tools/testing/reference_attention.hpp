#pragma once
/// \file reference_attention.hpp
/// Float64 references of the attention ops (include/kjit/ops/attention.hpp), the random problems
/// they check (the GPU tests, `kjit selftest`, the benchmarks and `kjit tune` all build theirs
/// here), and the case runners: poisoned, optionally strided or paged device tensors, the op run,
/// every output compared.

#include <kjit/ops/attention.hpp>
#include <kjit/runtime.hpp>

#include "tools/testing/compare.hpp"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kjit::testing {

/// A decode problem as compact host arrays of the exact values the device sees (bf16-rounded).
struct DecodeProblem {
  int64_t batch = 0;
  int64_t max_kv_len = 0;
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  std::vector<float> q;          ///< [batch][q_heads][head_dim]
  std::vector<float> k;          ///< [batch][max_kv_len][kv_heads][head_dim]
  std::vector<float> v;          ///< [batch][max_kv_len][kv_heads][head_dim]
  std::vector<int32_t> kv_lens;  ///< [batch]; empty = every sequence has max_kv_len tokens
  std::vector<uint8_t> mask;     ///< [batch][max_kv_len], nonzero = attend; empty = none
  double scale = 0;              ///< softmax scale (already resolved: never 0)
};

/// A DecodeProblem of these sizes with no data yet: every sequence max_kv_len long (no kv_lens,
/// no mask), softmax scale 1/sqrt(head_dim).
DecodeProblem decode_problem(int64_t batch, int64_t max_kv_len, int64_t q_heads, int64_t kv_heads, int64_t head_dim);

/// decode_problem's sizes with random bf16-exact data (random.hpp): q in [-q_range, q_range)
/// from `seed`, K and V in [-1, 1) from seed + 1 and seed + 2.
DecodeProblem random_decode_problem(int64_t batch, int64_t max_kv_len, int64_t q_heads, int64_t kv_heads,
                                    int64_t head_dim, uint64_t seed, float q_range = 2.f);

/// Reference outputs of a DecodeProblem.
struct DecodeReference {
  /// [batch][q_heads][head_dim]: Σ_j p_j v_j with p = softmax over attended j of scale · q·k_j,
  /// zeros for a row with no attended position.
  std::vector<double> out;
  /// [batch][q_heads]: natural-log log-sum-exp of the attended scaled scores; −inf when none.
  std::vector<double> lse;
};

/// Computes the reference in float64 (max-subtracted exponentials, GQA head h reads kv head
/// h / (q_heads / kv_heads)), over positions j < kv_lens[b] with mask[b][j] set. Multithreaded
/// over (batch, head).
DecodeReference decode_reference(const DecodeProblem& problem);

/// One randomized decode launch (see run_decode_case).
struct DecodeCase {
  int batch = 1;
  int max_kv_len = 0;
  int q_heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  /// Per-sequence lengths drawn in [0, max_kv_len] (sequence 0 gets max_kv_len, sequence 2 gets
  /// 0 when batch > 2); false: every sequence has max_kv_len tokens.
  bool ragged = false;
  /// Pass the kv_lens tensor (false and !ragged: omit it, meaning max_kv_len everywhere).
  bool pass_kv_lens = true;
  /// A random keep mask (p = 0.7), and when batch > 1 the last sequence keeps nothing.
  bool mask = false;
  bool lse = false;
  /// q, k, v, out and lse as views of larger buffers (padded batch, token and head strides);
  /// the padding is poisoned and must stay unread (k/v) and unwritten (out/lse).
  bool strided = false;
  int num_splits = 0;  ///< DecodeArgs::num_splits (0 = auto)
  attention::DecodeMerge merge = attention::DecodeMerge::kAuto;  ///< DecodeArgs::merge
  float scale = 0.f;   ///< DecodeArgs::scale (0 = 1/sqrt(head_dim))
  float q_range = 2.f; ///< q ~ U(−q_range, q_range); k, v ~ U(−1, 1)

  /// "B3 L65 Hq32/Hkv8 D128 ragged mask lse strided splits=3 merge=cluster scale=0.5".
  std::string describe() const;
};

/// What run_decode_case found.
struct DecodeCaseResult {
  Comparison out;           ///< bf16 output vs reference (poisoned = NaN counts as non-finite)
  Comparison lse;           ///< when the case asks for lse
  size_t padding_written = 0;  ///< out/lse padding elements that lost their poison
  uint64_t seed = 0;
  /// What the op wrote, in the reference's order: out [batch][q_heads][head_dim] and (when the
  /// case asks for it) lse [batch][q_heads], for comparing two runs of one case (compare_runs).
  std::vector<float> out_values;
  std::vector<float> lse_values;
  /// True when out.rel_l2 ≤ out_tol, lse.rel_l2 ≤ lse_tol, nothing non-finite, no padding written.
  bool ok(double out_tol, double lse_tol) const;
  std::string describe() const;
};

/// Two runs of one case and seed (e.g. the two split merges): `run`'s out and lse compared with
/// `baseline`'s as compare() does, the baseline as the reference (an lse of −inf in both
/// matches); padding_written is the sum of both runs'.
DecodeCaseResult compare_runs(const DecodeCaseResult& run, const DecodeCaseResult& baseline);

/// Builds `c` from `seed` (k/v tokens at or past each kv_len, and all padding, hold NaN; outputs
/// and the workspace are 0xFF-poisoned), runs kjit::attention::decode on the default stream,
/// synchronizes and compares with decode_reference. Runs on the current context's device, as
/// every case runner here does (testing::current_device).
/// Throws what decode throws.
DecodeCaseResult run_decode_case(const DecodeCase& c, uint64_t seed, Runtime& runtime = Runtime::global());

// ---- Prefill (dense and ragged) ---------------------------------------------------------------

/// A prefill problem in compact, packed host arrays of the exact values the device sees
/// (bf16-rounded). Request b has q_lens[b] queries and kv_lens[b] keys; queries are aligned to
/// the end of the KV under causal (query i sees keys j ≤ i + kv_lens[b] − q_lens[b]).
struct PrefillProblem {
  int64_t q_heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  std::vector<int32_t> q_lens;   ///< [batch]
  std::vector<int32_t> kv_lens;  ///< [batch]
  std::vector<float> q;          ///< [Σ q_lens][q_heads][head_dim], requests in order
  std::vector<float> k;          ///< [Σ kv_lens][kv_heads][head_dim]
  std::vector<float> v;          ///< [Σ kv_lens][kv_heads][head_dim]
  bool causal = false;
  /// Optional keep mask, per request [q_lens[b]][kv_lens[b]] (nonzero = attend), requests in
  /// order; empty = none.
  std::vector<uint8_t> mask;
  double scale = 0;  ///< resolved softmax scale (never 0)

  int64_t batch() const { return static_cast<int64_t>(q_lens.size()); }
  int64_t total_q() const;
  int64_t total_kv() const;
};

/// A packed PrefillProblem of these lengths with random bf16-exact data (random.hpp): q in
/// [-q_range, q_range) from `seed`, K and V in [-1, 1) from seed + 1 and seed + 2; no mask,
/// softmax scale 1/sqrt(head_dim).
PrefillProblem random_prefill_problem(std::vector<int32_t> q_lens, std::vector<int32_t> kv_lens, int64_t q_heads,
                                      int64_t kv_heads, int64_t head_dim, bool causal, uint64_t seed,
                                      float q_range = 2.f);

/// Reference outputs of a PrefillProblem.
struct PrefillReference {
  std::vector<double> out;  ///< [Σ q_lens][q_heads][head_dim]; zeros for rows that attend nothing
  std::vector<double> lse;  ///< [Σ q_lens][q_heads], natural log; −inf for rows that attend nothing
};

/// Float64 reference (max-subtracted exponentials; GQA head h reads kv head h / group).
/// Multithreaded over (request, row, head). With `q_rows`, only those packed query rows (every
/// head) are computed; the others stay zero with lse −inf (for problems too large to compute in
/// full, checked on a sample of rows).
PrefillReference prefill_reference(const PrefillProblem& problem, const std::vector<int64_t>* q_rows = nullptr);

/// What the attention case runners below report (the same checks as run_decode_case).
using AttentionCaseResult = DecodeCaseResult;

/// One randomized dense prefill (kjit::attention::prefill, or the attention() entry).
struct PrefillCase {
  int batch = 1;
  int q_len = 0;
  int kv_len = 0;  ///< max_kv_len (k/v dim 1)
  int q_heads = 8;
  int kv_heads = 2;
  int head_dim = 128;
  bool causal = false;
  /// 0: none; 2: [batch, kv_len]; 3: [batch, q_len, kv_len]. Random keep (p = 0.7); with a 3-D
  /// mask query row 1 of request 0 keeps nothing, with a 2-D mask and batch > 1 the last request
  /// keeps nothing.
  int mask = 0;
  /// Pass kv_lens with lengths drawn in [0, kv_len] (request 0 gets kv_len, request 2 gets 0).
  bool ragged_kv = false;
  bool lse = false;
  /// q, k, v, out, lse (and the mask) as views of larger poisoned buffers.
  bool strided = false;
  float scale = 0.f;
  float q_range = 2.f;
  int block_m = 0;  ///< PrefillArgs::block_m (0 = choose)
  /// Run through kjit::attention::attention instead of prefill() (either with `variant`).
  bool use_entry = false;
  attention::AttentionVariant variant = attention::AttentionVariant::kAuto;

  std::string describe() const;
};

/// Builds `c` from `seed` (dead K/V rows and all padding NaN, outputs 0xFF-poisoned), runs it on
/// the default stream, synchronizes and compares with prefill_reference. Needs a GPU.
AttentionCaseResult run_prefill_case(const PrefillCase& c, uint64_t seed, Runtime& runtime = Runtime::global());

/// A PrefillCase of `batch` sequences of `q_len` queries over `kv_len` keys, LSE asked for;
/// everything else the defaults.
PrefillCase prefill_case(int batch, int q_len, int kv_len, int q_heads, int kv_heads, int head_dim, bool causal);

/// The paged layout of a test cache.
struct PagedLayout {
  int page_size = 16;
  /// K and V as the two halves of one [num_pages, 2, page_size, kv_heads, head_dim] buffer
  /// (else two pools).
  bool interleaved = false;
  /// Spare pages (all NaN) in the pool and trailing spare entries in page_indices pointing at
  /// them: a read past a request's pages reads NaN.
  int spare_pages = 3;
  /// Fill the pools with append_paged_kv (append_indptr mode, in two chunks per request) instead
  /// of a host-side scatter.
  bool via_append = false;
};

/// A paged KV cache built on the host (what the paged case runners and `kjit tune` upload):
/// request b's tokens fill its pages in order, the pages a random permutation of the pool; slots
/// no token owns, and the spare pages, hold bf16 NaN (a read past a request's length shows).
struct PagedKVImage {
  int page_size = 1;
  int64_t num_pages = 0;  ///< the requests' pages and the layout's spare pages
  int64_t kv_heads = 0, head_dim = 0;
  bool interleaved = false;
  std::vector<int32_t> indptr;   ///< [batch + 1] into indices
  std::vector<int32_t> indices;  ///< the requests' page ids in order, then one per spare page
  std::vector<int32_t> last;     ///< [batch] tokens in each request's last page (page_size when it has none)
  /// bf16 bits: [num_pages][2][page_size][kv_heads][head_dim] when interleaved, else the K pool
  /// [num_pages][page_size][kv_heads][head_dim] followed by the V pool.
  std::vector<uint16_t> pool;

  /// Element offset in `pool` of (page, which: 0 K / 1 V, slot, head, d).
  size_t offset(int64_t page, int which, int64_t slot, int64_t h, int64_t d) const;
};

/// The pages of requests of `lens` tokens (page ids drawn from `rng`). With `k` and `v` (packed
/// [Σ lens][kv_heads][head_dim], request by request), their rows are scattered into the pool;
/// without, the pool stays NaN (to be appended).
PagedKVImage paged_kv_image(const std::vector<int>& lens, int64_t kv_heads, int64_t head_dim, const PagedLayout& layout,
                            std::mt19937_64& rng, const std::vector<float>* k = nullptr,
                            const std::vector<float>* v = nullptr);

/// One randomized paged decode (kjit::attention::paged_decode, or the entry).
struct PagedDecodeCase {
  std::vector<int> kv_lens;  ///< per request (batch = size)
  int q_heads = 8;
  int kv_heads = 2;
  int head_dim = 128;
  PagedLayout layout;
  bool lse = false;
  int num_splits = 0;
  int64_t kv_len_hint = 0;
  attention::DecodeMerge merge = attention::DecodeMerge::kAuto;
  bool use_entry = false;

  std::string describe() const;
};

AttentionCaseResult run_paged_decode_case(const PagedDecodeCase& c, uint64_t seed,
                                          Runtime& runtime = Runtime::global());

/// One randomized ragged paged prefill (plan_paged_prefill + upload + paged_prefill, or the entry).
struct PagedPrefillCase {
  std::vector<int> q_lens;   ///< per request
  std::vector<int> kv_lens;  ///< per request
  int q_heads = 8;
  int kv_heads = 2;
  int head_dim = 128;
  PagedLayout layout;
  bool causal = false;
  bool lse = false;
  int tile_rows = 0;  ///< the plan's choice when 0
  /// Set on the plan after planning; kAuto keeps the plan's own (kAuto, where the run step
  /// chooses for the device, unless a tuning table chose the kernel).
  attention::AttentionVariant variant = attention::AttentionVariant::kAuto;
  /// The packing request of a PagedPrefillPlanArgs plan (kv_heads given, the current device); kOn
  /// fails the case unless the plan packs the whole group.
  attention::PackGqa pack_gqa = attention::PackGqa::kOff;
  /// PagedPrefillPlanArgs::persistent (a schedule where the device runs the wgmma kernel). false
  /// with pack_gqa kOff plans with the overload that knows no KV layout (no schedule, no packing).
  bool persistent = true;
  int max_ctas = 0;  ///< PagedPrefillPlanArgs::max_ctas: few CTAs run many units each
  /// Set on the plan after planning (PagedPrefillPlan::page_load): kTma loads K/V pages with TMA
  /// (page sizes that are multiples of 16, 128-row tiles), kGather gathers them.
  attention::PageLoad page_load = attention::PageLoad::kAuto;
  bool use_entry = false;

  std::string describe() const;
};

AttentionCaseResult run_paged_prefill_case(const PagedPrefillCase& c, uint64_t seed,
                                           Runtime& runtime = Runtime::global());

/// A PagedPrefillCase of requests with `q_lens` query tokens over `kv_lens` keys (pages of
/// `page_size`), LSE asked for; everything else the defaults.
PagedPrefillCase paged_prefill_case(std::vector<int> q_lens, std::vector<int> kv_lens, int q_heads, int kv_heads,
                                    int head_dim, int page_size, bool causal);

/// One append_paged_kv check: random pools (NaN) and table for `kv_lens`, then the last
/// `new_counts[b]` tokens of each request appended, either by append_indptr or by per-token
/// positions (shuffled token order). Every appended slot must hold its token bit for bit and
/// every other pool element must be unchanged.
struct AppendCase {
  std::vector<int> kv_lens;     ///< per request, after the append
  std::vector<int> new_counts;  ///< per request, ≤ kv_lens[b]
  int kv_heads = 2;
  int head_dim = 128;
  PagedLayout layout;
  bool indptr_mode = true;
  /// Per-token mode: add tokens whose position is out of range (negative / ≥ kv_len), which must
  /// be skipped.
  bool stray_tokens = false;

  std::string describe() const;
};

struct AppendCaseResult {
  size_t wrong = 0;      ///< appended slots that do not hold their token
  size_t clobbered = 0;  ///< other pool elements that changed
  size_t checked = 0;
  uint64_t seed = 0;
  bool ok() const { return wrong == 0 && clobbered == 0 && checked > 0; }
  std::string describe() const;
};

AppendCaseResult run_append_case(const AppendCase& c, uint64_t seed, Runtime& runtime = Runtime::global());

}  // namespace kjit::testing
