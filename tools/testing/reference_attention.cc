#include "tools/testing/reference_attention.hpp"

#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/tensor.hpp>

#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/random.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cmath>
#include <limits>
#include <random>
#include <thread>

namespace kjit::testing {

DecodeReference decode_reference(const DecodeProblem& p) {
  DecodeReference r;
  const int64_t B = p.batch, L = p.max_kv_len, Hq = p.q_heads, Hkv = p.kv_heads, D = p.head_dim;
  r.out.assign(static_cast<size_t>(B * Hq * D), 0.0);
  r.lse.assign(static_cast<size_t>(B * Hq), -std::numeric_limits<double>::infinity());
  if (B == 0 || Hq == 0) return r;
  const int64_t group = Hq / Hkv;
  const int64_t rows = B * Hq;

  std::atomic<int64_t> next{0};
  auto worker = [&] {
    std::vector<double> s(static_cast<size_t>(std::max<int64_t>(L, 1)));
    std::vector<double> acc(static_cast<size_t>(D));
    for (int64_t row; (row = next.fetch_add(1)) < rows;) {
      const int64_t b = row / Hq, h = row % Hq, kvh = h / group;
      const int64_t len = p.kv_lens.empty() ? L : std::clamp<int64_t>(p.kv_lens[b], 0, L);
      const float* q = p.q.data() + row * D;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < len; ++j) {
        if (!p.mask.empty() && p.mask[b * L + j] == 0) {
          s[j] = -std::numeric_limits<double>::infinity();
          continue;
        }
        const float* k = p.k.data() + ((b * L + j) * Hkv + kvh) * D;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[d];
        s[j] = dot * p.scale;
        m = std::max(m, s[j]);
      }
      if (m == -std::numeric_limits<double>::infinity()) continue;  // nothing attended
      std::fill(acc.begin(), acc.end(), 0.0);
      double l = 0;
      for (int64_t j = 0; j < len; ++j) {
        if (s[j] == -std::numeric_limits<double>::infinity()) continue;
        const double w = std::exp(s[j] - m);
        l += w;
        const float* v = p.v.data() + ((b * L + j) * Hkv + kvh) * D;
        for (int64_t d = 0; d < D; ++d) acc[d] += w * v[d];
      }
      for (int64_t d = 0; d < D; ++d) r.out[row * D + d] = acc[d] / l;
      r.lse[row] = m + std::log(l);
    }
  };
  const unsigned n = std::max(1u, std::min<unsigned>(16, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < n && static_cast<int64_t>(i) < rows; ++i) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return r;
}

DecodeProblem decode_problem(int64_t batch, int64_t max_kv_len, int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
  DecodeProblem p{batch, max_kv_len, q_heads, kv_heads, head_dim};  // the sizes, in declaration order
  p.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  return p;
}

DecodeProblem random_decode_problem(int64_t batch, int64_t max_kv_len, int64_t q_heads, int64_t kv_heads,
                                    int64_t head_dim, uint64_t seed, float q_range) {
  DecodeProblem p = decode_problem(batch, max_kv_len, q_heads, kv_heads, head_dim);
  const size_t kv = static_cast<size_t>(batch * max_kv_len * kv_heads * head_dim);
  p.q = random_bf16_values(static_cast<size_t>(batch * q_heads * head_dim), q_range, seed);
  p.k = random_bf16_values(kv, 1.f, seed + 1);
  p.v = random_bf16_values(kv, 1.f, seed + 2);
  return p;
}

PrefillProblem random_prefill_problem(std::vector<int32_t> q_lens, std::vector<int32_t> kv_lens, int64_t q_heads,
                                      int64_t kv_heads, int64_t head_dim, bool causal, uint64_t seed, float q_range) {
  PrefillProblem p;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.q_lens = std::move(q_lens);
  p.kv_lens = std::move(kv_lens);
  p.causal = causal;
  p.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  p.q = random_bf16_values(static_cast<size_t>(p.total_q() * q_heads * head_dim), q_range, seed);
  p.k = random_bf16_values(static_cast<size_t>(p.total_kv() * kv_heads * head_dim), 1.f, seed + 1);
  p.v = random_bf16_values(p.k.size(), 1.f, seed + 2);
  return p;
}

size_t PagedKVImage::offset(int64_t page, int which, int64_t slot, int64_t h, int64_t d) const {
  const int64_t row = kv_heads * head_dim;
  if (interleaved) return static_cast<size_t>(((page * 2 + which) * page_size + slot) * row + h * head_dim + d);
  return static_cast<size_t>((which * num_pages + page) * page_size * row + slot * row + h * head_dim + d);
}

PagedKVImage paged_kv_image(const std::vector<int>& lens, int64_t kv_heads, int64_t head_dim, const PagedLayout& layout,
                            std::mt19937_64& rng, const std::vector<float>* k, const std::vector<float>* v) {
  PagedKVImage c;
  c.page_size = layout.page_size;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.interleaved = layout.interleaved;
  int64_t pages = 0;
  for (int len : lens) pages += (len + c.page_size - 1) / c.page_size;
  c.num_pages = pages + layout.spare_pages;
  std::vector<int32_t> order(static_cast<size_t>(c.num_pages));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), rng);  // scattered pages, as in a real pool
  // The table, request by request over the shuffled ids.
  c.indptr.assign(1, 0);
  std::vector<size_t> slot_of;  // per packed token: its K row's offset in the pool
  size_t next = 0;
  for (int len : lens) {
    const int n = (len + c.page_size - 1) / c.page_size;
    for (int i = 0; i < n; ++i) c.indices.push_back(order[next++]);
    for (int j = 0; k != nullptr && j < len; ++j) {
      slot_of.push_back(c.offset(c.indices[c.indptr.back() + j / c.page_size], 0, j % c.page_size, 0, 0));
    }
    c.indptr.push_back(static_cast<int32_t>(c.indices.size()));
    // No pages: the value is ignored; give a non-zero one to make sure it is.
    c.last.push_back(n > 0 ? len - (n - 1) * c.page_size : c.page_size);
  }
  // Fixed-capacity table: trailing entries point at spare (all-NaN) pages.
  for (int i = 0; i < layout.spare_pages; ++i) c.indices.push_back(order[order.size() - 1 - i]);
  constexpr uint16_t kNaN = 0xFFFF;  // bf16 NaN
  c.pool.assign(static_cast<size_t>(2 * c.num_pages * c.page_size * kv_heads * head_dim), kNaN);
  if (k == nullptr) return c;
  const size_t row = static_cast<size_t>(kv_heads * head_dim);
  const size_t v_from_k = c.offset(0, 1, 0, 0, 0) - c.offset(0, 0, 0, 0, 0);  // V's row beside K's
  parallel_for(slot_of.size() * row, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) {
      const size_t at = slot_of[i / row] + i % row;
      c.pool[at] = float_to_bf16((*k)[i]);
      c.pool[at + v_from_k] = float_to_bf16((*v)[i]);
    }
  });
  return c;
}

int64_t PrefillProblem::total_q() const {
  int64_t n = 0;
  for (int32_t l : q_lens) n += l;
  return n;
}

int64_t PrefillProblem::total_kv() const {
  int64_t n = 0;
  for (int32_t l : kv_lens) n += l;
  return n;
}

PrefillReference prefill_reference(const PrefillProblem& p, const std::vector<int64_t>* q_rows) {
  PrefillReference r;
  const int64_t Hq = p.q_heads, Hkv = p.kv_heads, D = p.head_dim, B = p.batch();
  const int64_t total_q = p.total_q();
  r.out.assign(static_cast<size_t>(total_q * Hq * D), 0.0);
  r.lse.assign(static_cast<size_t>(total_q * Hq), -std::numeric_limits<double>::infinity());
  if (total_q == 0 || Hq == 0) return r;
  const int64_t group = Hq / Hkv;
  // Per request: first q row, first kv row, first mask element.
  std::vector<int64_t> q_first(B + 1, 0), kv_first(B + 1, 0), mask_first(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) {
    q_first[b + 1] = q_first[b] + p.q_lens[b];
    kv_first[b + 1] = kv_first[b] + p.kv_lens[b];
    mask_first[b + 1] = mask_first[b] + int64_t{p.q_lens[b]} * p.kv_lens[b];
  }
  const int64_t rows = (q_rows ? static_cast<int64_t>(q_rows->size()) : total_q) * Hq;
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    std::vector<double> s;
    std::vector<double> acc(static_cast<size_t>(D));
    int64_t b = 0;
    for (int64_t item; (item = next.fetch_add(1)) < rows;) {
      const int64_t row = q_rows ? (*q_rows)[static_cast<size_t>(item / Hq)] * Hq + item % Hq : item;
      const int64_t qi = row / Hq, h = row % Hq, kvh = h / group;
      while (q_first[b + 1] <= qi) ++b;
      while (q_first[b] > qi) --b;
      const int64_t i = qi - q_first[b];
      const int64_t len = p.kv_lens[b];
      int64_t limit = len;
      if (p.causal) limit = std::clamp<int64_t>(i + len - p.q_lens[b] + 1, 0, len);
      s.assign(static_cast<size_t>(std::max<int64_t>(len, 1)), -std::numeric_limits<double>::infinity());
      const float* q = p.q.data() + row * D;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < limit; ++j) {
        if (!p.mask.empty() && p.mask[mask_first[b] + i * len + j] == 0) continue;
        const float* k = p.k.data() + ((kv_first[b] + j) * Hkv + kvh) * D;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[d];
        s[j] = dot * p.scale;
        m = std::max(m, s[j]);
      }
      if (m == -std::numeric_limits<double>::infinity()) continue;  // nothing attended
      std::fill(acc.begin(), acc.end(), 0.0);
      double l = 0;
      for (int64_t j = 0; j < limit; ++j) {
        if (s[j] == -std::numeric_limits<double>::infinity()) continue;
        const double w = std::exp(s[j] - m);
        l += w;
        const float* v = p.v.data() + ((kv_first[b] + j) * Hkv + kvh) * D;
        for (int64_t d = 0; d < D; ++d) acc[d] += w * v[d];
      }
      for (int64_t d = 0; d < D; ++d) r.out[row * D + d] = acc[d] / l;
      r.lse[row] = m + std::log(l);
    }
  };
  const unsigned n = std::max(1u, std::min<unsigned>(16, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < n && static_cast<int64_t>(i) < rows; ++i) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return r;
}

std::string DecodeCase::describe() const {
  std::string s = fmt::format("B{} L{} Hq{}/Hkv{} D{}", batch, max_kv_len, q_heads, kv_heads, head_dim);
  if (ragged) s += " ragged";
  if (!ragged && !pass_kv_lens) s += " no-kv_lens";
  if (mask) s += " mask";
  if (lse) s += " lse";
  if (strided) s += " strided";
  s += num_splits == 0 ? " splits=auto" : fmt::format(" splits={}", num_splits);
  if (merge != attention::DecodeMerge::kAuto) s += fmt::format(" merge={}", attention::decode_merge_name(merge));
  if (scale != 0.f) s += fmt::format(" scale={}", scale);
  if (q_range != 2.f) s += fmt::format(" q_range={}", q_range);
  return s;
}

DecodeCaseResult compare_runs(const DecodeCaseResult& run, const DecodeCaseResult& baseline) {
  DecodeCaseResult r;
  r.seed = run.seed;
  r.out = compare(run.out_values, std::vector<double>(baseline.out_values.begin(), baseline.out_values.end()));
  if (!run.lse_values.empty() || !baseline.lse_values.empty()) {
    r.lse = compare(run.lse_values, std::vector<double>(baseline.lse_values.begin(), baseline.lse_values.end()));
  }
  r.padding_written = run.padding_written + baseline.padding_written;
  return r;
}

bool DecodeCaseResult::ok(double out_tol, double lse_tol) const {
  return out.ok(out_tol) && lse.ok(lse_tol) && padding_written == 0;
}

std::string DecodeCaseResult::describe() const {
  std::string s = fmt::format("seed={} out: {}", seed, out.describe());
  if (lse.count) s += fmt::format("; lse: {}", lse.describe());
  if (padding_written) s += fmt::format("; {} padding elements written", padding_written);
  return s;
}

DecodeCaseResult run_decode_case(const DecodeCase& c, uint64_t seed, Runtime& runtime) {
  DecodeCaseResult result;
  result.seed = seed;
  std::mt19937_64 rng(seed);
  const int64_t B = c.batch, L = c.max_kv_len, Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
  constexpr uint16_t kPoison = 0xFFFF;  // bf16 NaN

  DecodeProblem pr = random_decode_problem(B, L, Hq, Hkv, D, rng(), c.q_range);
  if (c.scale != 0.f) pr.scale = c.scale;
  if (c.ragged || c.pass_kv_lens) {
    pr.kv_lens.assign(static_cast<size_t>(B), static_cast<int32_t>(L));
    if (c.ragged) {
      std::uniform_int_distribution<int32_t> len(0, static_cast<int32_t>(L));
      for (int64_t b = 1; b < B; ++b) pr.kv_lens[b] = len(rng);
      if (B > 2) pr.kv_lens[2] = 0;
    }
  }
  if (c.mask) {
    std::bernoulli_distribution keep(0.7);
    pr.mask.resize(static_cast<size_t>(B * L));
    for (auto& m : pr.mask) m = keep(rng) ? 1 : 0;
    if (B > 1) std::fill(pr.mask.begin() + (B - 1) * L, pr.mask.end(), 0);
  }

  // Device layouts: padded strides when strided; padding and dead tokens hold NaN.
  const int64_t q_heads_cap = Hq + (c.strided ? 3 : 0);
  const int64_t kv_len_cap = L + (c.strided ? 5 : 0);
  const int64_t kv_heads_cap = Hkv + (c.strided ? 1 : 0);
  const int64_t out_heads_cap = Hq + (c.strided ? 2 : 0);
  const int64_t lse_cap = Hq + (c.strided ? 1 : 0);
  const int64_t mask_cap = L + (c.strided ? 3 : 0);

  std::vector<uint16_t> hq(static_cast<size_t>(B * q_heads_cap * D), kPoison);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t d = 0; d < D; ++d) hq[(b * q_heads_cap + h) * D + d] = float_to_bf16(pr.q[(b * Hq + h) * D + d]);
  std::vector<uint16_t> hk(static_cast<size_t>(B * kv_len_cap * kv_heads_cap * D), kPoison);
  std::vector<uint16_t> hv(hk.size(), kPoison);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = pr.kv_lens.empty() ? L : pr.kv_lens[b];
    for (int64_t t = 0; t < len; ++t)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const size_t dst = static_cast<size_t>(((b * kv_len_cap + t) * kv_heads_cap + h) * D + d);
          const size_t src = static_cast<size_t>(((b * L + t) * Hkv + h) * D + d);
          hk[dst] = float_to_bf16(pr.k[src]);
          hv[dst] = float_to_bf16(pr.v[src]);
        }
  }
  std::vector<uint8_t> hmask;
  if (c.mask) {
    hmask.assign(static_cast<size_t>(B * mask_cap), 1);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < L; ++t) hmask[b * mask_cap + t] = pr.mask[b * L + t];
  }

  DeviceBuffer dq = to_device(hq);
  DeviceBuffer dk = to_device(hk);
  DeviceBuffer dv = to_device(hv);
  DeviceBuffer dlens = to_device(pr.kv_lens);
  DeviceBuffer dmask = to_device(hmask);
  DeviceBuffer dout(static_cast<size_t>(std::max<int64_t>(B * out_heads_cap * D * 2, 16)));
  dout.fill(0xFF);
  DeviceBuffer dlse(static_cast<size_t>(std::max<int64_t>(B * lse_cap * 4, 16)));
  dlse.fill(0xFF);

  attention::DecodeArgs args;
  args.q = TensorRef(dq.get(), DType::kBF16, {B, 1, Hq, D}, {q_heads_cap * D, q_heads_cap * D, D, 1}, current_device());
  args.k = TensorRef(dk.get(), DType::kBF16, {B, L, Hkv, D},
                     {kv_len_cap * kv_heads_cap * D, kv_heads_cap * D, D, 1}, current_device());
  args.v = TensorRef(dv.get(), DType::kBF16, {B, L, Hkv, D},
                     {kv_len_cap * kv_heads_cap * D, kv_heads_cap * D, D, 1}, current_device());
  if (!pr.kv_lens.empty()) args.kv_lens = TensorRef(dlens.get(), DType::kI32, {B}, {1}, current_device());
  if (c.mask) args.mask = TensorRef(dmask.get(), DType::kBool, {B, L}, {mask_cap, 1}, current_device());
  args.out = TensorRef(dout.get(), DType::kBF16, {B, 1, Hq, D}, {out_heads_cap * D, out_heads_cap * D, D, 1}, current_device());
  if (c.lse) args.lse = TensorRef(dlse.get(), DType::kF32, {B, Hq}, {lse_cap, 1}, current_device());
  args.scale = c.scale;
  args.num_splits = c.num_splits;
  args.merge = c.merge;

  const size_t ws_bytes = attention::decode_workspace_bytes(args);
  DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
  ws.fill(0xFF);  // unwritten partials would surface as NaN
  attention::decode(args, ws.get(), ws_bytes, nullptr, runtime);
  synchronize();

  const DecodeReference ref = decode_reference(pr);
  const auto out_bits = dout.download<uint16_t>(static_cast<size_t>(B * out_heads_cap * D));
  std::vector<float> out(static_cast<size_t>(B * Hq * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < out_heads_cap; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const uint16_t bits = out_bits[(b * out_heads_cap + h) * D + d];
        if (h < Hq) {
          out[(b * Hq + h) * D + d] = bf16_to_float(bits);
        } else if (bits != kPoison) {
          ++result.padding_written;
        }
      }
  result.out = compare(out, ref.out);
  result.out_values = std::move(out);

  const auto lse_bits = dlse.download<uint32_t>(static_cast<size_t>(B * lse_cap));
  if (c.lse) {
    std::vector<float> lse(static_cast<size_t>(B * Hq));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < lse_cap; ++h) {
        const uint32_t bits = lse_bits[b * lse_cap + h];
        if (h < Hq) {
          float f;
          std::memcpy(&f, &bits, 4);
          lse[b * Hq + h] = f;
        } else if (bits != 0xFFFFFFFFu) {
          ++result.padding_written;
        }
      }
    result.lse = compare(lse, ref.lse);
    result.lse_values = std::move(lse);
  } else {
    // No lse requested: the buffer must be untouched.
    for (uint32_t bits : lse_bits) result.padding_written += bits != 0xFFFFFFFFu;
  }
  return result;
}

}  // namespace kjit::testing

// ---- Prefill, paged decode, ragged paged prefill and append runners ---------------------------

namespace kjit::testing {
namespace {

constexpr uint16_t kPoison16 = 0xFFFF;  // bf16 NaN
constexpr uint32_t kPoison32 = 0xFFFFFFFFu;

/// `n` bf16-exact values in [-range, range): random_bf16_values with a seed drawn from `rng`.
std::vector<float> random_values(std::mt19937_64& rng, size_t n, float range) {
  return random_bf16_values(n, range, rng());
}

float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// A paged cache built on the host (paged_kv_image) and uploaded, or filled through
/// append_paged_kv.
struct TestCache : PagedKVImage {
  DeviceBuffer d_pool, d_indptr, d_indices, d_last;
  attention::PagedKVCache cache;
};

/// Uploads the pools for `lens` (K/V rows from the packed k/v of those lengths). With `scatter`
/// the rows are written on the host; else the pools stay NaN (to be appended).
TestCache make_cache(const std::vector<int>& lens, int64_t Hkv, int64_t D, const PagedLayout& layout,
                     const std::vector<float>& k, const std::vector<float>& v, std::mt19937_64& rng, bool scatter) {
  TestCache c;
  static_cast<PagedKVImage&>(c) =
      paged_kv_image(lens, Hkv, D, layout, rng, scatter ? &k : nullptr, scatter ? &v : nullptr);
  c.d_pool = to_device(c.pool);
  c.d_indptr = to_device(c.indptr);
  c.d_indices = to_device(c.indices);
  c.d_last = to_device(c.last);
  const int64_t P = c.num_pages, S = c.page_size;
  auto* base = static_cast<uint16_t*>(c.d_pool.get());
  if (c.interleaved) {
    const std::initializer_list<int64_t> strides = {2 * S * Hkv * D, Hkv * D, D, 1};
    c.cache.k = TensorRef(base, DType::kBF16, {P, S, Hkv, D}, strides, 0);
    c.cache.v = TensorRef(base + S * Hkv * D, DType::kBF16, {P, S, Hkv, D}, strides, 0);
  } else {
    c.cache.k = TensorRef(base, DType::kBF16, {P, S, Hkv, D}, {}, current_device());
    c.cache.v = TensorRef(base + P * S * Hkv * D, DType::kBF16, {P, S, Hkv, D}, {}, current_device());
  }
  const int64_t B = static_cast<int64_t>(lens.size());
  c.cache.indptr = TensorRef(c.d_indptr.get(), DType::kI32, {B + 1}, {}, current_device());
  c.cache.page_indices = TensorRef(c.d_indices.get(), DType::kI32, {static_cast<int64_t>(c.indices.size())}, {}, current_device());
  c.cache.last_page_len = TensorRef(c.d_last.get(), DType::kI32, {B}, {}, current_device());
  return c;
}

/// Fills an empty (NaN) cache through append_paged_kv in two chunks per request, as a serving
/// loop would: first each request's first half (table of those lengths), then the rest.
void append_into(TestCache& c, const std::vector<int>& lens, const std::vector<float>& k, const std::vector<float>& v,
                 Runtime& runtime) {
  const int64_t B = static_cast<int64_t>(lens.size()), Hkv = c.kv_heads, D = c.head_dim;
  std::vector<int> half(lens.size());
  for (size_t b = 0; b < lens.size(); ++b) half[b] = lens[b] / 2;
  const std::vector<int32_t> full_indptr = c.indptr, full_indices = c.indices, full_last = c.last;
  int64_t kv_first = 0;
  std::vector<int64_t> firsts;
  for (int len : lens) {
    firsts.push_back(kv_first);
    kv_first += len;
  }
  for (int step = 0; step < 2; ++step) {
    // The table of the lengths after this step (same page order: a prefix of each request's).
    std::vector<int> after(lens.size());
    for (size_t b = 0; b < lens.size(); ++b) after[b] = step == 0 ? half[b] : lens[b];
    std::vector<int32_t> indptr{0}, last;
    std::vector<int32_t> indices;
    for (size_t b = 0; b < lens.size(); ++b) {
      const int pages = (after[b] + c.page_size - 1) / c.page_size;
      for (int i = 0; i < pages; ++i) indices.push_back(full_indices[full_indptr[b] + i]);
      indptr.push_back(static_cast<int32_t>(indices.size()));
      last.push_back(pages > 0 ? after[b] - (pages - 1) * c.page_size : 0);
    }
    indices.push_back(0);  // never empty
    // New tokens of this step, request by request.
    std::vector<int32_t> append_indptr{0};
    std::vector<uint16_t> nk, nv;
    for (size_t b = 0; b < lens.size(); ++b) {
      const int from = step == 0 ? 0 : half[b];
      for (int64_t j = from; j < after[b]; ++j)
        for (int64_t e = 0; e < Hkv * D; ++e) {
          nk.push_back(float_to_bf16(k[static_cast<size_t>((firsts[b] + j) * Hkv * D + e)]));
          nv.push_back(float_to_bf16(v[static_cast<size_t>((firsts[b] + j) * Hkv * D + e)]));
        }
      append_indptr.push_back(append_indptr.back() + (after[b] - from));
    }
    const int64_t n = append_indptr.back();
    DeviceBuffer dk = to_device(nk), dv = to_device(nv), di = to_device(indptr), dx = to_device(indices),
                 dl = to_device(last), da = to_device(append_indptr);
    attention::AppendPagedKVArgs a;
    a.k = TensorRef(dk.get(), DType::kBF16, {n, Hkv, D}, {}, current_device());
    a.v = TensorRef(dv.get(), DType::kBF16, {n, Hkv, D}, {}, current_device());
    a.cache = c.cache;
    a.cache.indptr = TensorRef(di.get(), DType::kI32, {B + 1}, {}, current_device());
    a.cache.page_indices = TensorRef(dx.get(), DType::kI32, {static_cast<int64_t>(indices.size())}, {}, current_device());
    a.cache.last_page_len = TensorRef(dl.get(), DType::kI32, {B}, {}, current_device());
    a.append_indptr = TensorRef(da.get(), DType::kI32, {B + 1}, {}, current_device());
    attention::append_paged_kv(a, nullptr, runtime);
    synchronize();
  }
}

}  // namespace

std::string PrefillCase::describe() const {
  std::string s = fmt::format("B{} Lq{} Lkv{} Hq{}/Hkv{} D{}", batch, q_len, kv_len, q_heads, kv_heads, head_dim);
  if (causal) s += " causal";
  if (mask) s += fmt::format(" mask{}d", mask);
  if (ragged_kv) s += " ragged_kv";
  if (lse) s += " lse";
  if (strided) s += " strided";
  if (scale != 0.f) s += fmt::format(" scale={}", scale);
  if (q_range != 2.f) s += fmt::format(" q_range={}", q_range);
  if (block_m) s += fmt::format(" block_m={}", block_m);
  if (use_entry) {
    s += fmt::format(" entry({})", attention::variant_name(variant));
  } else if (variant != attention::AttentionVariant::kAuto) {
    s += fmt::format(" variant={}", attention::variant_name(variant));
  }
  return s;
}

PrefillCase prefill_case(int batch, int q_len, int kv_len, int q_heads, int kv_heads, int head_dim, bool causal) {
  PrefillCase c;
  c.batch = batch;
  c.q_len = q_len;
  c.kv_len = kv_len;
  c.q_heads = q_heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.causal = causal;
  c.lse = true;
  return c;
}

AttentionCaseResult run_prefill_case(const PrefillCase& c, uint64_t seed, Runtime& runtime) {
  AttentionCaseResult result;
  result.seed = seed;
  std::mt19937_64 rng(seed);
  const int64_t B = c.batch, Lq = c.q_len, L = c.kv_len, Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
  std::vector<int32_t> kv_lens(static_cast<size_t>(B), static_cast<int32_t>(L));
  if (c.ragged_kv) {
    std::uniform_int_distribution<int32_t> len(0, static_cast<int32_t>(L));
    for (int64_t b = 1; b < B; ++b) kv_lens[b] = len(rng);
    if (B > 2) kv_lens[2] = 0;
  }
  // Logical problem (packed per request).
  PrefillProblem pr;
  pr.q_heads = Hq;
  pr.kv_heads = Hkv;
  pr.head_dim = D;
  pr.q_lens.assign(static_cast<size_t>(B), static_cast<int32_t>(Lq));
  pr.kv_lens = kv_lens;
  pr.causal = c.causal;
  pr.scale = c.scale != 0.f ? c.scale : 1.f / std::sqrt(static_cast<float>(D));
  pr.q = random_values(rng, static_cast<size_t>(B * Lq * Hq * D), c.q_range);
  const std::vector<float> k_full = random_values(rng, static_cast<size_t>(B * L * Hkv * D), 1.f);
  const std::vector<float> v_full = random_values(rng, k_full.size(), 1.f);
  std::vector<uint8_t> mask_full;  // [B][mq][L], mq = Lq (3-D) or 1 (2-D)
  const int64_t mq = c.mask == 3 ? Lq : 1;
  if (c.mask) {
    std::bernoulli_distribution keep(0.7);
    mask_full.resize(static_cast<size_t>(B * mq * L));
    for (auto& m : mask_full) m = keep(rng) ? 1 : 0;
    if (c.mask == 3 && Lq > 1) std::fill(mask_full.begin() + L, mask_full.begin() + 2 * L, 0);
    if (c.mask == 2 && B > 1) std::fill(mask_full.end() - L, mask_full.end(), 0);
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < kv_lens[b]; ++j)
      for (int64_t e = 0; e < Hkv * D; ++e) {
        pr.k.push_back(k_full[static_cast<size_t>((b * L + j) * Hkv * D + e)]);
        pr.v.push_back(v_full[static_cast<size_t>((b * L + j) * Hkv * D + e)]);
      }
    if (c.mask)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t j = 0; j < kv_lens[b]; ++j) pr.mask.push_back(mask_full[static_cast<size_t>((b * mq + (mq > 1 ? i : 0)) * L + j)]);
  }

  // Device layouts: padded strides when strided; padding and dead rows NaN.
  const int64_t pad = c.strided ? 1 : 0;
  const int64_t q_heads_cap = Hq + 3 * pad, q_len_cap = Lq + 2 * pad;
  const int64_t kv_len_cap = L + 5 * pad, kv_heads_cap = Hkv + pad;
  const int64_t out_heads_cap = Hq + 2 * pad;
  const int64_t lse_len_cap = Lq + 3 * pad, lse_heads_cap = Hq + pad;
  const int64_t mask_len_cap = L + 3 * pad;
  std::vector<uint16_t> hq(static_cast<size_t>(B * q_len_cap * q_heads_cap * D), kPoison16);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t h = 0; h < Hq; ++h)
        for (int64_t d = 0; d < D; ++d)
          hq[static_cast<size_t>(((b * q_len_cap + i) * q_heads_cap + h) * D + d)] =
              float_to_bf16(pr.q[static_cast<size_t>(((b * Lq + i) * Hq + h) * D + d)]);
  std::vector<uint16_t> hk(static_cast<size_t>(B * kv_len_cap * kv_heads_cap * D), kPoison16), hv(hk.size(), kPoison16);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < kv_lens[b]; ++j)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const size_t dst = static_cast<size_t>(((b * kv_len_cap + j) * kv_heads_cap + h) * D + d);
          const size_t src = static_cast<size_t>(((b * L + j) * Hkv + h) * D + d);
          hk[dst] = float_to_bf16(k_full[src]);
          hv[dst] = float_to_bf16(v_full[src]);
        }
  std::vector<uint8_t> hmask;
  if (c.mask) {
    hmask.assign(static_cast<size_t>(B * mq * mask_len_cap), 1);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < mq; ++i)
        for (int64_t j = 0; j < L; ++j)
          hmask[static_cast<size_t>((b * mq + i) * mask_len_cap + j)] = mask_full[static_cast<size_t>((b * mq + i) * L + j)];
  }
  DeviceBuffer dq = to_device(hq), dk = to_device(hk), dv = to_device(hv), dlens = to_device(kv_lens),
               dmask = to_device(hmask);
  const size_t out_elems = static_cast<size_t>(B * q_len_cap * out_heads_cap * D);
  DeviceBuffer dout(std::max<size_t>(out_elems * 2, 16));
  dout.fill(0xFF);
  const size_t lse_elems = static_cast<size_t>(B * lse_heads_cap * lse_len_cap);
  DeviceBuffer dlse(std::max<size_t>(lse_elems * 4, 16));
  dlse.fill(0xFF);

  TensorRef q(dq.get(), DType::kBF16, {B, Lq, Hq, D}, {q_len_cap * q_heads_cap * D, q_heads_cap * D, D, 1}, current_device());
  TensorRef k(dk.get(), DType::kBF16, {B, L, Hkv, D}, {kv_len_cap * kv_heads_cap * D, kv_heads_cap * D, D, 1}, current_device());
  TensorRef v(dv.get(), DType::kBF16, {B, L, Hkv, D}, {kv_len_cap * kv_heads_cap * D, kv_heads_cap * D, D, 1}, current_device());
  TensorRef out(dout.get(), DType::kBF16, {B, Lq, Hq, D}, {q_len_cap * out_heads_cap * D, out_heads_cap * D, D, 1}, current_device());
  TensorRef lse(dlse.get(), DType::kF32, {B, Hq, Lq}, {lse_heads_cap * lse_len_cap, lse_len_cap, 1}, current_device());
  TensorRef lens(dlens.get(), DType::kI32, {B}, {}, current_device());
  TensorRef mask;
  if (c.mask == 2) mask = TensorRef(dmask.get(), DType::kBool, {B, L}, {mask_len_cap, 1}, current_device());
  if (c.mask == 3) mask = TensorRef(dmask.get(), DType::kBool, {B, Lq, L}, {Lq * mask_len_cap, mask_len_cap, 1}, current_device());

  if (c.use_entry) {
    attention::AttentionArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    if (c.ragged_kv) a.kv_lens = lens;
    a.mask = mask;
    a.causal = c.causal;
    a.out = out;
    if (c.lse) a.lse = lse;
    a.scale = c.scale;
    a.block_m = c.block_m;
    a.variant = c.variant;
    const size_t ws_bytes = attention::attention_workspace_bytes(a);
    DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
    ws.fill(0xFF);
    attention::attention(a, ws.get(), ws_bytes, nullptr, runtime);
    synchronize();
  } else {
    attention::PrefillArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    if (c.ragged_kv) a.kv_lens = lens;
    a.mask = mask;
    a.causal = c.causal;
    a.out = out;
    if (c.lse) a.lse = lse;
    a.scale = c.scale;
    a.block_m = c.block_m;
    a.variant = c.variant;
    attention::prefill(a, nullptr, runtime);
    synchronize();
  }

  const PrefillReference ref = prefill_reference(pr);
  const auto out_bits = dout.download<uint16_t>(out_elems);
  std::vector<float> got(static_cast<size_t>(B * Lq * Hq * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < q_len_cap; ++i)
      for (int64_t h = 0; h < out_heads_cap; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const uint16_t bits = out_bits[static_cast<size_t>(((b * q_len_cap + i) * out_heads_cap + h) * D + d)];
          if (i < Lq && h < Hq) {
            got[static_cast<size_t>(((b * Lq + i) * Hq + h) * D + d)] = bf16_to_float(bits);
          } else if (bits != kPoison16) {
            ++result.padding_written;
          }
        }
  result.out = compare(got, ref.out);
  const auto lse_bits = dlse.download<uint32_t>(lse_elems);
  if (c.lse) {
    std::vector<float> lse_got(static_cast<size_t>(B * Lq * Hq));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < lse_heads_cap; ++h)
        for (int64_t i = 0; i < lse_len_cap; ++i) {
          const uint32_t bits = lse_bits[static_cast<size_t>((b * lse_heads_cap + h) * lse_len_cap + i)];
          if (h < Hq && i < Lq) {
            lse_got[static_cast<size_t>((b * Lq + i) * Hq + h)] = bits_to_float(bits);  // reference order
          } else if (bits != kPoison32) {
            ++result.padding_written;
          }
        }
    result.lse = compare(lse_got, ref.lse);
  } else {
    for (uint32_t bits : lse_bits) result.padding_written += bits != kPoison32;
  }
  return result;
}

std::string PagedDecodeCase::describe() const {
  std::string lens;
  for (size_t i = 0; i < kv_lens.size() && i < 8; ++i) lens += fmt::format("{}{}", i ? "," : "", kv_lens[i]);
  if (kv_lens.size() > 8) lens += fmt::format(",... ({} requests)", kv_lens.size());
  std::string s = fmt::format("paged decode kv_lens=[{}] Hq{}/Hkv{} D{} page={}", lens, q_heads, kv_heads, head_dim,
                              layout.page_size);
  if (layout.interleaved) s += " interleaved";
  if (layout.via_append) s += " via_append";
  if (lse) s += " lse";
  s += num_splits == 0 ? " splits=auto" : fmt::format(" splits={}", num_splits);
  if (merge != attention::DecodeMerge::kAuto) s += fmt::format(" merge={}", attention::decode_merge_name(merge));
  if (kv_len_hint) s += fmt::format(" hint={}", kv_len_hint);
  if (use_entry) s += " entry";
  return s;
}

AttentionCaseResult run_paged_decode_case(const PagedDecodeCase& c, uint64_t seed, Runtime& runtime) {
  AttentionCaseResult result;
  result.seed = seed;
  std::mt19937_64 rng(seed);
  const int64_t B = static_cast<int64_t>(c.kv_lens.size()), Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
  int64_t total = 0, max_len = 0;
  for (int len : c.kv_lens) {
    total += len;
    max_len = std::max<int64_t>(max_len, len);
  }
  // Reference through decode_reference on a padded contiguous copy.
  DecodeProblem pr = decode_problem(B, max_len, Hq, Hkv, D);
  pr.q = random_values(rng, static_cast<size_t>(B * Hq * D), 2.f);
  const std::vector<float> k = random_values(rng, static_cast<size_t>(total * Hkv * D), 1.f);
  const std::vector<float> v = random_values(rng, k.size(), 1.f);
  pr.k.assign(static_cast<size_t>(B * max_len * Hkv * D), 0.f);
  pr.v.assign(pr.k.size(), 0.f);
  pr.kv_lens.assign(c.kv_lens.begin(), c.kv_lens.end());
  int64_t first = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t e = 0; e < c.kv_lens[b] * Hkv * D; ++e) {
      pr.k[static_cast<size_t>(b * max_len * Hkv * D + e)] = k[static_cast<size_t>(first * Hkv * D + e)];
      pr.v[static_cast<size_t>(b * max_len * Hkv * D + e)] = v[static_cast<size_t>(first * Hkv * D + e)];
    }
    first += c.kv_lens[b];
  }
  TestCache cache = make_cache(c.kv_lens, Hkv, D, c.layout, k, v, rng, !c.layout.via_append);
  if (c.layout.via_append) append_into(cache, c.kv_lens, k, v, runtime);

  std::vector<uint16_t> hq(pr.q.size());
  for (size_t i = 0; i < hq.size(); ++i) hq[i] = float_to_bf16(pr.q[i]);
  DeviceBuffer dq = to_device(hq);
  DeviceBuffer dout(static_cast<size_t>(std::max<int64_t>(B * Hq * D * 2, 16)));
  dout.fill(0xFF);
  DeviceBuffer dlse(static_cast<size_t>(std::max<int64_t>(B * Hq * 4, 16)));
  dlse.fill(0xFF);
  const TensorRef q(dq.get(), DType::kBF16, {B, 1, Hq, D}, {}, current_device());
  const TensorRef out(dout.get(), DType::kBF16, {B, 1, Hq, D}, {}, current_device());
  if (c.use_entry) {
    attention::AttentionArgs a;
    a.q = q;
    a.cache = cache.cache;
    a.out = out;
    if (c.lse) a.lse = TensorRef(dlse.get(), DType::kF32, {B, Hq, 1}, {}, current_device());
    a.num_splits = c.num_splits;
    a.kv_len_hint = c.kv_len_hint;
    a.merge = c.merge;
    const size_t ws_bytes = attention::attention_workspace_bytes(a);
    DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
    ws.fill(0xFF);
    attention::attention(a, ws.get(), ws_bytes, nullptr, runtime);
    synchronize();
  } else {
    attention::PagedDecodeArgs a;
    a.q = q;
    a.cache = cache.cache;
    a.out = out;
    if (c.lse) a.lse = TensorRef(dlse.get(), DType::kF32, {B, Hq}, {}, current_device());
    a.num_splits = c.num_splits;
    a.kv_len_hint = c.kv_len_hint;
    a.merge = c.merge;
    const size_t ws_bytes = attention::paged_decode_workspace_bytes(a);
    DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
    ws.fill(0xFF);
    attention::paged_decode(a, ws.get(), ws_bytes, nullptr, runtime);
    synchronize();
  }
  const DecodeReference ref = decode_reference(pr);
  const auto out_bits = dout.download<uint16_t>(static_cast<size_t>(B * Hq * D));
  std::vector<float> got(out_bits.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_float(out_bits[i]);
  result.out = compare(got, ref.out);
  result.out_values = std::move(got);
  const auto lse_bits = dlse.download<uint32_t>(static_cast<size_t>(B * Hq));
  if (c.lse) {
    std::vector<float> lse(lse_bits.size());
    for (size_t i = 0; i < lse.size(); ++i) lse[i] = bits_to_float(lse_bits[i]);
    result.lse = compare(lse, ref.lse);
    result.lse_values = std::move(lse);
  } else {
    for (uint32_t bits : lse_bits) result.padding_written += bits != kPoison32;
  }
  // The pools must be untouched by the decode.
  const auto pool_after = cache.d_pool.download<uint16_t>(cache.pool.size());
  if (!c.layout.via_append) {
    for (size_t i = 0; i < pool_after.size(); ++i) result.padding_written += pool_after[i] != cache.pool[i];
  }
  return result;
}

std::string PagedPrefillCase::describe() const {
  std::string lens;
  for (size_t i = 0; i < q_lens.size() && i < 8; ++i) lens += fmt::format("{}{}/{}", i ? "," : "", q_lens[i], kv_lens[i]);
  if (q_lens.size() > 8) lens += fmt::format(",... ({} requests)", q_lens.size());
  std::string s = fmt::format("paged prefill q/kv=[{}] Hq{}/Hkv{} D{} page={}", lens, q_heads, kv_heads, head_dim,
                              layout.page_size);
  if (layout.interleaved) s += " interleaved";
  if (layout.via_append) s += " via_append";
  if (causal) s += " causal";
  if (lse) s += " lse";
  if (tile_rows) s += fmt::format(" tile_rows={}", tile_rows);
  if (variant != attention::AttentionVariant::kAuto) s += fmt::format(" {}", attention::variant_name(variant));
  if (pack_gqa != attention::PackGqa::kOff) {
    s += pack_gqa == attention::PackGqa::kOn ? " pack_gqa=on" : " pack_gqa=auto";
  }
  s += persistent ? " persistent" : " grid";
  if (max_ctas) s += fmt::format(" max_ctas={}", max_ctas);
  if (page_load != attention::PageLoad::kAuto) s += fmt::format(" page_load={}", enum_name(attention::kPageLoadNames, page_load));
  if (use_entry) s += " entry";
  return s;
}

PagedPrefillCase paged_prefill_case(std::vector<int> q_lens, std::vector<int> kv_lens, int q_heads, int kv_heads,
                                    int head_dim, int page_size, bool causal) {
  PagedPrefillCase c;
  c.q_lens = std::move(q_lens);
  c.kv_lens = std::move(kv_lens);
  c.q_heads = q_heads;
  c.kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.layout.page_size = page_size;
  c.causal = causal;
  c.lse = true;
  return c;
}

AttentionCaseResult run_paged_prefill_case(const PagedPrefillCase& c, uint64_t seed, Runtime& runtime) {
  AttentionCaseResult result;
  result.seed = seed;
  std::mt19937_64 rng(seed);
  const int64_t B = static_cast<int64_t>(c.q_lens.size()), Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
  const PrefillProblem pr = random_prefill_problem({c.q_lens.begin(), c.q_lens.end()},
                                                  {c.kv_lens.begin(), c.kv_lens.end()}, Hq, Hkv, D, c.causal, rng());
  const int64_t total_q = pr.total_q();
  TestCache cache = make_cache(c.kv_lens, Hkv, D, c.layout, pr.k, pr.v, rng, !c.layout.via_append);
  if (c.layout.via_append) append_into(cache, c.kv_lens, pr.k, pr.v, runtime);

  std::vector<int32_t> qo_indptr{0};
  for (int len : c.q_lens) qo_indptr.push_back(qo_indptr.back() + len);
  attention::PagedPrefillPlan plan;
  if (c.pack_gqa == attention::PackGqa::kOff && !c.persistent) {
    plan = attention::plan_paged_prefill(qo_indptr.data(), B, D, c.tile_rows);
  } else {
    // The planning overload that knows the KV heads (packing needs the group, the schedule the
    // KV lengths): the page table's host side from the lengths, on the current device.
    std::vector<int32_t> kv_indptr{0}, last_page_len;
    const int ps = c.layout.page_size;
    for (int len : c.kv_lens) {
      const int pages = (len + ps - 1) / ps;
      kv_indptr.push_back(kv_indptr.back() + pages);
      last_page_len.push_back(pages == 0 ? 0 : len - (pages - 1) * ps);
    }
    attention::PagedPrefillPlanArgs pa;
    pa.qo_indptr_host = qo_indptr.data();
    pa.kv_indptr_host = kv_indptr.data();
    pa.last_page_len_host = last_page_len.data();
    pa.batch = B;
    pa.q_heads = Hq;
    pa.kv_heads = Hkv;
    pa.head_dim = D;
    pa.page_size = ps;
    pa.causal = c.causal;
    pa.tile_rows = c.tile_rows;
    pa.variant = c.variant;
    pa.pack_gqa = c.pack_gqa;
    pa.persistent = c.persistent;
    pa.max_ctas = c.max_ctas;
    plan = attention::plan_paged_prefill(pa);
    if (c.pack_gqa == attention::PackGqa::kOn && plan.pack_group != Hq / Hkv) {
      throw kjit::Error(fmt::format("pack_gqa on planned pack_group {}, expected {}", plan.pack_group, Hq / Hkv));
    }
  }
  if (c.variant != attention::AttentionVariant::kAuto) plan.variant = c.variant;  // else the plan's (a table's)
  if (c.page_load != attention::PageLoad::kAuto) plan.page_load = c.page_load;
  DeviceBuffer ws(std::max<size_t>(plan.workspace_bytes, 16));
  ws.fill(0xFF);
  attention::upload_paged_prefill_plan(plan, ws.get(), plan.workspace_bytes);

  std::vector<uint16_t> hq(pr.q.size());
  for (size_t i = 0; i < hq.size(); ++i) hq[i] = float_to_bf16(pr.q[i]);
  DeviceBuffer dq = to_device(hq), dindptr = to_device(qo_indptr);
  // One poisoned padding row after the last query: it must stay unwritten.
  DeviceBuffer dout(static_cast<size_t>((total_q + 1) * Hq * D * 2));
  dout.fill(0xFF);
  DeviceBuffer dlse(static_cast<size_t>(Hq * (total_q + 1) * 4));
  dlse.fill(0xFF);
  const TensorRef q(dq.get(), DType::kBF16, {total_q, Hq, D}, {}, current_device());
  const TensorRef out(dout.get(), DType::kBF16, {total_q, Hq, D}, {}, current_device());
  const TensorRef lse(dlse.get(), DType::kF32, {Hq, total_q}, {total_q + 1, 1}, current_device());
  const TensorRef indptr(dindptr.get(), DType::kI32, {B + 1}, {}, current_device());
  if (c.use_entry) {
    attention::AttentionArgs a;
    a.q = q;
    a.cache = cache.cache;
    a.qo_indptr = indptr;
    a.plan = &plan;
    a.causal = c.causal;
    a.out = out;
    if (c.lse) a.lse = lse;
    const size_t need = attention::attention_workspace_bytes(a);
    if (need != plan.workspace_bytes) throw kjit::Error("attention_workspace_bytes differs from the plan's");
    attention::attention(a, ws.get(), plan.workspace_bytes, nullptr, runtime);
  } else {
    attention::PagedPrefillArgs a;
    a.q = q;
    a.qo_indptr = indptr;
    a.cache = cache.cache;
    a.causal = c.causal;
    a.out = out;
    if (c.lse) a.lse = lse;
    attention::paged_prefill(a, plan, ws.get(), plan.workspace_bytes, nullptr, runtime);
  }
  synchronize();
  const PrefillReference ref = prefill_reference(pr);
  const auto out_bits = dout.download<uint16_t>(static_cast<size_t>((total_q + 1) * Hq * D));
  std::vector<float> got(static_cast<size_t>(total_q * Hq * D));
  for (size_t i = 0; i < out_bits.size(); ++i) {
    if (i < got.size()) {
      got[i] = bf16_to_float(out_bits[i]);
    } else if (out_bits[i] != kPoison16) {
      ++result.padding_written;
    }
  }
  result.out = compare(got, ref.out);
  const auto lse_bits = dlse.download<uint32_t>(static_cast<size_t>(Hq * (total_q + 1)));
  if (c.lse) {
    std::vector<float> lse_got(static_cast<size_t>(total_q * Hq));
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t t = 0; t <= total_q; ++t) {
        const uint32_t bits = lse_bits[static_cast<size_t>(h * (total_q + 1) + t)];
        if (t < total_q) {
          lse_got[static_cast<size_t>(t * Hq + h)] = bits_to_float(bits);
        } else if (bits != kPoison32) {
          ++result.padding_written;
        }
      }
    result.lse = compare(lse_got, ref.lse);
  } else {
    for (uint32_t bits : lse_bits) result.padding_written += bits != kPoison32;
  }
  return result;
}

std::string AppendCase::describe() const {
  std::string lens;
  for (size_t i = 0; i < kv_lens.size() && i < 8; ++i) lens += fmt::format("{}{}+{}", i ? "," : "", kv_lens[i] - new_counts[i], new_counts[i]);
  std::string s = fmt::format("append [{}] Hkv{} D{} page={} {}", lens, kv_heads, head_dim, layout.page_size,
                              indptr_mode ? "append_indptr" : "positions");
  if (layout.interleaved) s += " interleaved";
  if (stray_tokens) s += " stray";
  return s;
}

std::string AppendCaseResult::describe() const {
  return fmt::format("seed={} {} wrong, {} clobbered of {} checked", seed, wrong, clobbered, checked);
}

AppendCaseResult run_append_case(const AppendCase& c, uint64_t seed, Runtime& runtime) {
  AppendCaseResult result;
  result.seed = seed;
  std::mt19937_64 rng(seed);
  const int64_t B = static_cast<int64_t>(c.kv_lens.size()), Hkv = c.kv_heads, D = c.head_dim;
  int64_t total = 0;
  for (int len : c.kv_lens) total += len;
  const std::vector<float> k = random_values(rng, static_cast<size_t>(total * Hkv * D), 1.f);
  const std::vector<float> v = random_values(rng, k.size(), 1.f);
  // Old tokens in place (host scatter of the first kv_len − new tokens), the rest NaN.
  std::vector<int> old_lens(c.kv_lens.size());
  for (size_t b = 0; b < old_lens.size(); ++b) old_lens[b] = c.kv_lens[b] - c.new_counts[b];
  TestCache cache = make_cache(c.kv_lens, Hkv, D, c.layout, k, v, rng, true);
  std::vector<uint16_t> expect = cache.pool;  // the full, correct pools
  // Blank the new tokens' slots in the uploaded pools.
  std::vector<int64_t> firsts;
  int64_t first = 0;
  for (int len : c.kv_lens) {
    firsts.push_back(first);
    first += len;
  }
  std::vector<uint16_t> initial = cache.pool;
  struct Token {
    int32_t b, pos;
    int64_t src;  // row in k/v, or −1 for a stray token (random data, must be skipped)
  };
  std::vector<Token> tokens;
  for (int64_t b = 0; b < B; ++b)
    for (int j = old_lens[b]; j < c.kv_lens[b]; ++j) {
      tokens.push_back({static_cast<int32_t>(b), j, firsts[b] + j});
      const int64_t page = cache.indices[cache.indptr[b] + j / cache.page_size];
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t d = 0; d < D; ++d) {
          initial[cache.offset(page, 0, j % cache.page_size, h, d)] = kPoison16;
          initial[cache.offset(page, 1, j % cache.page_size, h, d)] = kPoison16;
        }
    }
  if (!c.indptr_mode) {
    std::shuffle(tokens.begin(), tokens.end(), rng);
    if (c.stray_tokens && B > 0) {
      tokens.push_back({0, -1, -1});
      tokens.push_back({0, c.kv_lens[0], -1});
      tokens.push_back({static_cast<int32_t>(B - 1), c.kv_lens[B - 1] + 5, -1});
    }
  }
  cache.d_pool.upload(initial);
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<uint16_t> nk(static_cast<size_t>(n * Hkv * D)), nv(nk.size());
  std::vector<int32_t> bi, pos, append_indptr{0};
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < Hkv * D; ++e) {
      nk[static_cast<size_t>(t * Hkv * D + e)] =
          tokens[t].src >= 0 ? float_to_bf16(k[static_cast<size_t>(tokens[t].src * Hkv * D + e)]) : 0x3f80;
      nv[static_cast<size_t>(t * Hkv * D + e)] =
          tokens[t].src >= 0 ? float_to_bf16(v[static_cast<size_t>(tokens[t].src * Hkv * D + e)]) : 0x3f80;
    }
    bi.push_back(tokens[t].b);
    pos.push_back(tokens[t].pos);
  }
  for (int64_t b = 0; b < B; ++b) append_indptr.push_back(append_indptr.back() + c.new_counts[b]);
  DeviceBuffer dk = to_device(nk), dv = to_device(nv), dbi = to_device(bi), dpos = to_device(pos),
               dai = to_device(append_indptr);
  attention::AppendPagedKVArgs a;
  a.k = TensorRef(dk.get(), DType::kBF16, {n, Hkv, D}, {}, current_device());
  a.v = TensorRef(dv.get(), DType::kBF16, {n, Hkv, D}, {}, current_device());
  a.cache = cache.cache;
  if (c.indptr_mode) {
    a.append_indptr = TensorRef(dai.get(), DType::kI32, {B + 1}, {}, current_device());
  } else {
    a.batch_indices = TensorRef(dbi.get(), DType::kI32, {n}, {}, current_device());
    a.positions = TensorRef(dpos.get(), DType::kI32, {n}, {}, current_device());
  }
  attention::append_paged_kv(a, nullptr, runtime);
  synchronize();
  const auto after = cache.d_pool.download<uint16_t>(expect.size());
  for (size_t i = 0; i < after.size(); ++i) {
    if (initial[i] == kPoison16 && expect[i] != kPoison16) {
      ++result.checked;
      result.wrong += after[i] != expect[i];
    } else {
      result.clobbered += after[i] != initial[i];
    }
  }
  return result;
}

}  // namespace kjit::testing
