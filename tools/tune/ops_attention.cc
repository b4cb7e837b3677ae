// `kjit tune` harnesses of the attention ops (decode, paged decode, dense prefill, ragged paged
// prefill): shapes, scratch buffers (the caller's are never touched), float64 references
// (tools/testing/reference_attention.hpp) and launches.
#include "tools/tune/op_harness.hpp"

#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>

#include "runtime/internal/driver.hpp"
#include "runtime/internal/ops.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/random.hpp"
#include "tools/testing/reference_attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

namespace kjit::tune {
namespace detail {

std::vector<int64_t> sampled_rows(const kjit::testing::PrefillProblem& p) {
  double flops = 0;
  for (int64_t b = 0; b < p.batch(); ++b) {
    const int64_t q = p.q_lens[static_cast<size_t>(b)], kv = p.kv_lens[static_cast<size_t>(b)];
    for (int64_t i = 0; i < q; ++i) {
      flops += static_cast<double>(p.causal ? std::clamp<int64_t>(i + kv - q + 1, 0, kv) : kv);
    }
  }
  flops *= 4.0 * static_cast<double>(p.q_heads * p.head_dim);
  int64_t stride = 1;
  while (stride < 64 && flops / static_cast<double>(stride) > kFullReferenceFlops) stride *= 2;
  std::vector<int64_t> rows;
  if (stride == 1) return rows;
  int64_t first = 0;
  for (int64_t b = 0; b < p.batch(); ++b) {
    for (int64_t i = 0; i < p.q_lens[static_cast<size_t>(b)]; ++i) {
      if ((i + 7 * (i / 64)) % stride == 0) rows.push_back(first + i);
    }
    first += p.q_lens[static_cast<size_t>(b)];
  }
  return rows;
}

}  // namespace detail

namespace {

using namespace kjit::tune::detail;
using kjit::testing::bf16_bits;
using kjit::testing::DeviceBuffer;
namespace ad = kjit::attention::detail;

/// Poisons `out`, runs copy 0, and compares its bf16 elements with `ref`: all of them, or, with
/// `rows`, the rows listed (`row_elems` elements each; the reference covers only those), and
/// then every element must still be finite so an output left unwritten shows wherever it is.
std::string check_bf16(const Runner& r, CUstream stream, DeviceBuffer& out, const std::vector<double>& ref,
                       const std::vector<int64_t>& rows = {}, size_t row_elems = 0) {
  out.fill(0xFF);
  r.per_copy[0](stream);
  KJIT_CU(cuStreamSynchronize(stream));
  const std::vector<uint16_t> raw = out.download<uint16_t>(ref.size());
  std::vector<float> got(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) got[i] = kjit::testing::bf16_to_float(raw[i]);
  if (rows.empty()) {
    const kjit::testing::Comparison cmp = kjit::testing::compare(got, ref);
    return cmp.ok(kBf16Tol) ? std::string() : fmt::format("wrong output: {} (tolerance {})", cmp.describe(), kBf16Tol);
  }
  std::vector<float> got_rows;
  std::vector<double> ref_rows;
  for (int64_t row : rows) {
    const size_t at = static_cast<size_t>(row) * row_elems;
    got_rows.insert(got_rows.end(), got.begin() + static_cast<ptrdiff_t>(at),
                    got.begin() + static_cast<ptrdiff_t>(at + row_elems));
    ref_rows.insert(ref_rows.end(), ref.begin() + static_cast<ptrdiff_t>(at),
                    ref.begin() + static_cast<ptrdiff_t>(at + row_elems));
  }
  const kjit::testing::Comparison cmp = kjit::testing::compare(got_rows, ref_rows);
  if (!cmp.ok(kBf16Tol)) {
    return fmt::format("wrong output on the {} checked query rows: {} (tolerance {})", rows.size(), cmp.describe(),
                       kBf16Tol);
  }
  const size_t unwritten = static_cast<size_t>(std::count_if(got.begin(), got.end(), [](float x) { return !std::isfinite(x); }));
  return unwritten == 0 ? std::string()
                        : fmt::format("wrong output: {} of {} outputs non-finite (never written?)", unwritten, got.size());
}

class DecodeHarness : public Harness {
 public:
  explicit DecodeHarness(const Shape& s)
      : b_(shape_int(s, "batch")), l_(shape_int(s, "kv_len")), hq_(shape_int(s, "q_heads")),
        hkv_(shape_int(s, "kv_heads")), d_(shape_int(s, "head_dim")) {
    if (b_ < 1 || l_ < 1 || hq_ < 1 || hkv_ < 1) throw InvalidArgument("decode shape sizes must be positive");
    dims_ = ad::validate_decode(args(fake(1), fake(2), fake(3), fake(4)));
  }

  std::vector<Candidate> candidates(const DeviceInfo& info) override { return candidates_of<ad::DecodeOp>(dims_, info); }
  bool bucket(std::vector<int64_t>* out) const override { return bucket_of<ad::DecodeOp>(dims_, out); }
  size_t input_bytes() const override { return static_cast<size_t>(2 * b_ * l_ * hkv_ * d_ * 2 + b_ * hq_ * d_ * 2); }

  void prepare(int copies, uint64_t seed) override {
    const kjit::testing::DecodeProblem p = kjit::testing::random_decode_problem(b_, l_, hq_, hkv_, d_, seed);
    ref_ = kjit::testing::decode_reference(p).out;
    const std::vector<uint16_t> q = bf16_bits(p.q), k = bf16_bits(p.k), v = bf16_bits(p.v);
    for (int c = 0; c < copies; ++c) {
      q_.push_back(kjit::testing::to_device(q));
      k_.push_back(kjit::testing::to_device(k));
      v_.push_back(kjit::testing::to_device(v));
    }
    out_ = DeviceBuffer(static_cast<size_t>(b_ * hq_ * d_ * 2));
  }

  Runner runner(const Candidate& c, Runtime& runtime) override {
    const ad::DecodePlan plan = plan_of<ad::DecodeOp>(c, dims_);
    return runner_of<ad::DecodeOp>(plan, q_.size(), plan.workspace_bytes, [this](size_t i) {
      return args(q_[i].get(), k_[i].get(), v_[i].get(), out_.get());
    }, runtime);
  }

  std::string check(const Runner& r, CUstream stream) override { return check_bf16(r, stream, out_, ref_); }

 private:
  kjit::attention::DecodeArgs args(void* q, void* k, void* v, void* out) const {
    kjit::attention::DecodeArgs a;
    a.q = TensorRef(q, DType::kBF16, {b_, 1, hq_, d_});
    a.k = TensorRef(k, DType::kBF16, {b_, l_, hkv_, d_});
    a.v = TensorRef(v, DType::kBF16, {b_, l_, hkv_, d_});
    a.out = TensorRef(out, DType::kBF16, {b_, 1, hq_, d_});
    return a;
  }

  int64_t b_, l_, hq_, hkv_, d_;
  ad::DecodeDims dims_;
  std::vector<double> ref_;
  std::vector<DeviceBuffer> q_, k_, v_;
  DeviceBuffer out_;
};

// ---- paged decode -----------------------------------------------------------------------------

/// Every request holds kv_len tokens in ceil(kv_len / page_size) pages, the page ids a random
/// permutation of the pool; the slots past a request's length are NaN (a read past it shows).
class PagedDecodeHarness : public Harness {
 public:
  explicit PagedDecodeHarness(const Shape& s)
      : b_(shape_int(s, "batch")), l_(shape_int(s, "kv_len")), hq_(shape_int(s, "q_heads")),
        hkv_(shape_int(s, "kv_heads")), d_(shape_int(s, "head_dim")), page_(shape_int(s, "page_size")) {
    if (b_ < 1 || l_ < 1 || hq_ < 1 || hkv_ < 1 || page_ < 1) throw InvalidArgument("paged_decode shape sizes must be positive");
    ppr_ = (l_ + page_ - 1) / page_;
    pages_ = b_ * ppr_;
    dims_ = ad::validate_paged_decode(args(fake(1), fake(2), fake(3), fake(4), fake(5), fake(6), fake(7)));
  }

  std::vector<Candidate> candidates(const DeviceInfo& info) override {
    return candidates_of<ad::PagedDecodeOp>(dims_, info);
  }
  bool bucket(std::vector<int64_t>* out) const override { return bucket_of<ad::PagedDecodeOp>(dims_, out); }
  size_t input_bytes() const override { return static_cast<size_t>(2 * pages_ * page_ * hkv_ * d_ * 2 + b_ * hq_ * d_ * 2); }

  void prepare(int copies, uint64_t seed) override {
    const kjit::testing::DecodeProblem p = kjit::testing::random_decode_problem(b_, l_, hq_, hkv_, d_, seed);
    ref_ = kjit::testing::decode_reference(p).out;
    // Every request holds l_ tokens: the problem's [batch][kv_len] rows are already packed.
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);  // the page order
    const kjit::testing::PagedKVImage image = kjit::testing::paged_kv_image(
        std::vector<int>(static_cast<size_t>(b_), static_cast<int>(l_)), hkv_, d_, {static_cast<int>(page_), false, 0},
        rng, &p.k, &p.v);
    const std::vector<uint16_t> q = bf16_bits(p.q);
    for (int c = 0; c < copies; ++c) {
      q_.push_back(kjit::testing::to_device(q));
      pool_.push_back(kjit::testing::to_device(image.pool));
    }
    v_offset_ = image.offset(0, 1, 0, 0, 0);
    indptr_ = kjit::testing::to_device(image.indptr);
    ids_ = kjit::testing::to_device(image.indices);
    last_ = kjit::testing::to_device(image.last);
    out_ = DeviceBuffer(static_cast<size_t>(b_ * hq_ * d_ * 2));
  }

  Runner runner(const Candidate& c, Runtime& runtime) override {
    const ad::DecodePlan plan = plan_of<ad::PagedDecodeOp>(c, dims_);
    return runner_of<ad::PagedDecodeOp>(
        plan, q_.size(), plan.workspace_bytes,
        [this](size_t i) {
          return args(q_[i].get(), pool_[i].get(), static_cast<uint16_t*>(pool_[i].get()) + v_offset_, indptr_.get(),
                      ids_.get(), last_.get(), out_.get());
        },
        runtime);
  }

  std::string check(const Runner& r, CUstream stream) override { return check_bf16(r, stream, out_, ref_); }

 private:
  kjit::attention::PagedDecodeArgs args(void* q, void* k, void* v, void* indptr, void* ids, void* last, void* out) const {
    kjit::attention::PagedDecodeArgs a;
    a.q = TensorRef(q, DType::kBF16, {b_, 1, hq_, d_});
    a.cache.k = TensorRef(k, DType::kBF16, {pages_, page_, hkv_, d_});
    a.cache.v = TensorRef(v, DType::kBF16, {pages_, page_, hkv_, d_});
    a.cache.indptr = TensorRef(indptr, DType::kI32, {b_ + 1});
    a.cache.page_indices = TensorRef(ids, DType::kI32, {pages_});
    a.cache.last_page_len = TensorRef(last, DType::kI32, {b_});
    a.out = TensorRef(out, DType::kBF16, {b_, 1, hq_, d_});
    return a;
  }

  int64_t b_, l_, hq_, hkv_, d_, page_, ppr_ = 0, pages_ = 0;
  ad::PagedDecodeDims dims_;
  std::vector<double> ref_;
  std::vector<DeviceBuffer> q_, pool_;  ///< per copy: q, and the K pool followed by the V pool
  size_t v_offset_ = 0;                 ///< the V pool's first element in a pool buffer
  DeviceBuffer indptr_, ids_, last_, out_;
};

// ---- prefill ----------------------------------------------------------------------------------

class PrefillHarness : public Harness {
 public:
  explicit PrefillHarness(const Shape& s)
      : b_(shape_int(s, "batch")), lq_(shape_int(s, "q_len")), lkv_(shape_int(s, "kv_len")),
        hq_(shape_int(s, "q_heads")), hkv_(shape_int(s, "kv_heads")), d_(shape_int(s, "head_dim")),
        causal_(shape_int(s, "causal") != 0) {
    if (b_ < 1 || lq_ < 1 || lkv_ < 1 || hq_ < 1 || hkv_ < 1) throw InvalidArgument("prefill shape sizes must be positive");
    dims_ = ad::validate_prefill(args(fake(1), fake(2), fake(3), fake(4)));
  }

  std::vector<Candidate> candidates(const DeviceInfo& info) override { return candidates_of<ad::PrefillOp>(dims_, info); }
  bool bucket(std::vector<int64_t>* out) const override { return bucket_of<ad::PrefillOp>(dims_, out); }
  size_t input_bytes() const override {
    return static_cast<size_t>((2 * b_ * lkv_ * hkv_ + 2 * b_ * lq_ * hq_) * d_ * 2);
  }

  void prepare(int copies, uint64_t seed) override {
    const kjit::testing::PrefillProblem p = kjit::testing::random_prefill_problem(
        std::vector<int32_t>(static_cast<size_t>(b_), static_cast<int32_t>(lq_)),
        std::vector<int32_t>(static_cast<size_t>(b_), static_cast<int32_t>(lkv_)), hq_, hkv_, d_, causal_, seed);
    rows_ = sampled_rows(p);
    ref_ = kjit::testing::prefill_reference(p, rows_.empty() ? nullptr : &rows_).out;
    const std::vector<uint16_t> q = bf16_bits(p.q), k = bf16_bits(p.k), v = bf16_bits(p.v);
    for (int c = 0; c < copies; ++c) {
      q_.push_back(kjit::testing::to_device(q));
      k_.push_back(kjit::testing::to_device(k));
      v_.push_back(kjit::testing::to_device(v));
    }
    out_ = DeviceBuffer(q.size() * 2);
  }

  Runner runner(const Candidate& c, Runtime& runtime) override {
    const ad::PrefillPlan plan = plan_of<ad::PrefillOp>(c, dims_);
    return runner_of<ad::PrefillOp>(
        plan, q_.size(), 0, [this](size_t i) { return args(q_[i].get(), k_[i].get(), v_[i].get(), out_.get()); },
        runtime);
  }

  std::string check(const Runner& r, CUstream stream) override {
    return check_bf16(r, stream, out_, ref_, rows_, static_cast<size_t>(hq_ * d_));
  }

 private:
  kjit::attention::PrefillArgs args(void* q, void* k, void* v, void* out) const {
    kjit::attention::PrefillArgs a;
    a.q = TensorRef(q, DType::kBF16, {b_, lq_, hq_, d_});
    a.k = TensorRef(k, DType::kBF16, {b_, lkv_, hkv_, d_});
    a.v = TensorRef(v, DType::kBF16, {b_, lkv_, hkv_, d_});
    a.out = TensorRef(out, DType::kBF16, {b_, lq_, hq_, d_});
    a.causal = causal_;
    return a;
  }

  int64_t b_, lq_, lkv_, hq_, hkv_, d_;
  bool causal_;
  ad::PrefillDims dims_;
  std::vector<int64_t> rows_;  ///< the query rows the reference covers (empty: all)
  std::vector<double> ref_;
  std::vector<DeviceBuffer> q_, k_, v_;
  DeviceBuffer out_;
};

// ---- ragged paged prefill ---------------------------------------------------------------------

/// Request 0 has q_len queries over kv_len keys (the shape's maxima); with ragged=1 every other
/// request draws its query rows in [q_len / 2, q_len] and its keys in [max(rows, kv_len / 2),
/// kv_len] from a fixed seed (the shape alone decides the lengths, so its bucket is known before
/// any data exists), else all are equal. Pages are a random permutation of the pool; slots past
/// a request's length are NaN (a read past it shows).
class PagedPrefillHarness : public Harness {
 public:
  explicit PagedPrefillHarness(const Shape& s)
      : b_(shape_int(s, "batch")), lq_(shape_int(s, "q_len")), lkv_(shape_int(s, "kv_len")),
        hq_(shape_int(s, "q_heads")), hkv_(shape_int(s, "kv_heads")), d_(shape_int(s, "head_dim")),
        page_(shape_int(s, "page_size")), causal_(shape_int(s, "causal") != 0) {
    if (b_ < 1 || lq_ < 1 || lkv_ < 1 || hq_ < 1 || hkv_ < 1 || page_ < 1) {
      throw InvalidArgument("paged_prefill shape sizes must be positive");
    }
    const bool ragged = shape_int(s, "ragged") != 0;
    std::mt19937_64 rng(0x7061676564ull);
    qo_.push_back(0);
    kv_indptr_.push_back(0);
    for (int64_t b = 0; b < b_; ++b) {
      int64_t q = lq_, kv = lkv_;
      if (ragged && b > 0) {
        q = std::uniform_int_distribution<int64_t>(std::max<int64_t>(1, lq_ / 2), lq_)(rng);
        kv = std::uniform_int_distribution<int64_t>(std::min(lkv_, std::max(q, lkv_ / 2)), lkv_)(rng);
      }
      q_lens_.push_back(static_cast<int32_t>(q));
      kv_lens_.push_back(static_cast<int32_t>(kv));
      qo_.push_back(static_cast<int32_t>(qo_.back() + q));
      const int64_t pages = (kv + page_ - 1) / page_;
      kv_indptr_.push_back(static_cast<int32_t>(kv_indptr_.back() + pages));
      last_.push_back(static_cast<int32_t>(kv - (pages - 1) * page_));
    }
    pages_ = kv_indptr_.back();
    kjit::attention::PagedPrefillPlanArgs a;
    a.qo_indptr_host = qo_.data();
    a.kv_indptr_host = kv_indptr_.data();
    a.last_page_len_host = last_.data();
    a.batch = b_;
    a.q_heads = hq_;
    a.head_dim = d_;
    a.page_size = page_;
    a.causal = causal_;
    a.kv_heads = hkv_;
    dims_ = ad::paged_prefill_plan_dims(a);
    // The run step's rules too (GQA ratio, cache shape), host-side, before any GPU work.
    const kjit::attention::PagedPrefillPlan plan = ad::paged_prefill_work_map(qo_.data(), dims_, 64);
    const kjit::attention::PagedPrefillArgs fake_args =
        args(fake(1), fake(2), fake(3), fake(4), fake(5), fake(6), fake(7), fake(8));
    ad::validate_paged_prefill(fake_args, plan);
  }

  std::vector<Candidate> candidates(const DeviceInfo& info) override {
    return candidates_of<ad::PagedPrefillPlanner>(dims_, info);
  }
  bool bucket(std::vector<int64_t>* out) const override { return bucket_of<ad::PagedPrefillPlanner>(dims_, out); }
  size_t input_bytes() const override {
    return static_cast<size_t>((2 * pages_ * page_ * hkv_ + dims_.total_q * hq_) * d_ * 2);
  }

  void prepare(int copies, uint64_t seed) override {
    const kjit::testing::PrefillProblem p =
        kjit::testing::random_prefill_problem(q_lens_, kv_lens_, hq_, hkv_, d_, causal_, seed);
    rows_ = sampled_rows(p);
    ref_ = kjit::testing::prefill_reference(p, rows_.empty() ? nullptr : &rows_).out;
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);  // the page order
    const kjit::testing::PagedKVImage image = kjit::testing::paged_kv_image(
        {kv_lens_.begin(), kv_lens_.end()}, hkv_, d_, {static_cast<int>(page_), false, 0}, rng, &p.k, &p.v);
    const std::vector<uint16_t> q = bf16_bits(p.q);
    for (int c = 0; c < copies; ++c) {
      q_.push_back(kjit::testing::to_device(q));
      pool_.push_back(kjit::testing::to_device(image.pool));
    }
    v_offset_ = image.offset(0, 1, 0, 0, 0);
    d_qo_ = kjit::testing::to_device(qo_);
    d_indptr_ = kjit::testing::to_device(kv_indptr_);
    d_ids_ = kjit::testing::to_device(image.indices);
    d_last_ = kjit::testing::to_device(last_);
    out_ = DeviceBuffer(q.size() * 2);
  }

  Runner runner(const Candidate& c, Runtime& runtime) override {
    const DeviceInfo& info = device_info(0);
    ad::PagedPrefillOpPlan tile = ad::PagedPrefillPlanner::plan(dims_, info);
    if (!c.is_default && !ad::PagedPrefillPlanner::apply_tuned(dims_, info, c.choice, &tile)) {
      throw InvalidArgument("the candidate does not apply to this shape");
    }
    // The candidate's own work map, in a scratch workspace of its own.
    auto plan = std::make_shared<kjit::attention::PagedPrefillPlan>(
        ad::paged_prefill_work_map(qo_.data(), dims_, tile.tile_rows, tile.pack_group));
    plan->variant = tile.variant;
    // With the persistent schedule plan_paged_prefill gives it.
    const std::vector<int64_t> kv_lens(kv_lens_.begin(), kv_lens_.end());
    ad::paged_prefill_device_schedule(*plan, qo_.data(), kv_lens, causal_, hq_, info);
    auto ws = std::make_shared<DeviceBuffer>(std::max<size_t>(plan->workspace_bytes, 16));
    kjit::attention::upload_paged_prefill_plan(*plan, ws->get(), ws->bytes(), 0);
    auto launches = std::make_shared<std::vector<ad::PagedPrefillOp::Launch>>();
    for (size_t i = 0; i < q_.size(); ++i) {
      const kjit::attention::PagedPrefillArgs a =
          args(q_[i].get(), d_qo_.get(), pool_[i].get(), static_cast<uint16_t*>(pool_[i].get()) + v_offset_,
               d_indptr_.get(), d_ids_.get(), d_last_.get(), out_.get());
      launches->push_back(kjit::detail::launch_value<ad::PagedPrefillOp>({a, *plan, ws->get(), ws->bytes()}, {}, runtime));
    }
    Runner r;
    resources_of(launches->front(), &r);
    for (size_t i = 0; i < launches->size(); ++i) {
      r.per_copy.push_back([launches, i](CUstream st) { (*launches)[i].launch(st); });
    }
    r.keep = std::make_shared<std::tuple<decltype(plan), decltype(ws), decltype(launches)>>(plan, ws, launches);
    return r;
  }

  std::string check(const Runner& r, CUstream stream) override {
    return check_bf16(r, stream, out_, ref_, rows_, static_cast<size_t>(hq_ * d_));
  }

 private:
  kjit::attention::PagedPrefillArgs args(void* q, void* qo, void* k, void* v, void* indptr, void* ids, void* last,
                                         void* out) const {
    kjit::attention::PagedPrefillArgs a;
    const int64_t total_q = dims_.total_q;
    a.q = TensorRef(q, DType::kBF16, {total_q, hq_, d_});
    a.qo_indptr = TensorRef(qo, DType::kI32, {b_ + 1});
    a.cache.k = TensorRef(k, DType::kBF16, {pages_, page_, hkv_, d_});
    a.cache.v = TensorRef(v, DType::kBF16, {pages_, page_, hkv_, d_});
    a.cache.indptr = TensorRef(indptr, DType::kI32, {b_ + 1});
    a.cache.page_indices = TensorRef(ids, DType::kI32, {pages_});
    a.cache.last_page_len = TensorRef(last, DType::kI32, {b_});
    a.causal = causal_;
    a.out = TensorRef(out, DType::kBF16, {total_q, hq_, d_});
    return a;
  }

  int64_t b_, lq_, lkv_, hq_, hkv_, d_, page_;
  bool causal_;
  int64_t pages_ = 0;
  std::vector<int32_t> q_lens_, kv_lens_, qo_, kv_indptr_, last_;
  ad::PagedPrefillPlanDims dims_;
  std::vector<int64_t> rows_;  ///< the query rows the reference covers (empty: all)
  std::vector<double> ref_;
  std::vector<DeviceBuffer> q_, pool_;  ///< per copy: q, and the K pool followed by the V pool
  size_t v_offset_ = 0;                 ///< the V pool's first element in a pool buffer
  DeviceBuffer d_qo_, d_indptr_, d_ids_, d_last_, out_;
};

}  // namespace

void register_attention_ops() {
  register_spec_op<DecodeHarness>(ad::DecodeOp::tune_spec());
  register_spec_op<PagedDecodeHarness>(ad::PagedDecodeOp::tune_spec());
  register_spec_op<PrefillHarness>(ad::PrefillOp::tune_spec());
  register_spec_op<PagedPrefillHarness>(ad::PagedPrefillPlanner::tune_spec());
}

}  // namespace kjit::tune
