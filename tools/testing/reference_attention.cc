#include "tools/testing/reference_attention.hpp"

#include <kjit/ops/attention.hpp>
#include <kjit/tensor.hpp>

#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"

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

std::string DecodeCase::describe() const {
  std::string s = fmt::format("B{} L{} Hq{}/Hkv{} D{}", batch, max_kv_len, q_heads, kv_heads, head_dim);
  if (ragged) s += " ragged";
  if (!ragged && !pass_kv_lens) s += " no-kv_lens";
  if (mask) s += " mask";
  if (lse) s += " lse";
  if (strided) s += " strided";
  s += num_splits == 0 ? " splits=auto" : fmt::format(" splits={}", num_splits);
  if (scale != 0.f) s += fmt::format(" scale={}", scale);
  if (q_range != 2.f) s += fmt::format(" q_range={}", q_range);
  return s;
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
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const int64_t B = c.batch, L = c.max_kv_len, Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
  constexpr uint16_t kPoison = 0xFFFF;  // bf16 NaN

  DecodeProblem pr;
  pr.batch = B;
  pr.max_kv_len = L;
  pr.q_heads = Hq;
  pr.kv_heads = Hkv;
  pr.head_dim = D;
  pr.scale = c.scale != 0.f ? c.scale : 1.f / std::sqrt(static_cast<float>(D));
  pr.q.resize(static_cast<size_t>(B * Hq * D));
  for (float& x : pr.q) x = round_bf16(uniform(rng) * c.q_range);
  pr.k.resize(static_cast<size_t>(B * L * Hkv * D));
  pr.v.resize(pr.k.size());
  for (float& x : pr.k) x = round_bf16(uniform(rng));
  for (float& x : pr.v) x = round_bf16(uniform(rng));
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
  args.q = TensorRef(dq.get(), DType::kBF16, {B, 1, Hq, D}, {q_heads_cap * D, q_heads_cap * D, D, 1}, 0);
  args.k = TensorRef(dk.get(), DType::kBF16, {B, L, Hkv, D},
                     {kv_len_cap * kv_heads_cap * D, kv_heads_cap * D, D, 1}, 0);
  args.v = TensorRef(dv.get(), DType::kBF16, {B, L, Hkv, D},
                     {kv_len_cap * kv_heads_cap * D, kv_heads_cap * D, D, 1}, 0);
  if (!pr.kv_lens.empty()) args.kv_lens = TensorRef(dlens.get(), DType::kI32, {B}, {1}, 0);
  if (c.mask) args.mask = TensorRef(dmask.get(), DType::kBool, {B, L}, {mask_cap, 1}, 0);
  args.out = TensorRef(dout.get(), DType::kBF16, {B, 1, Hq, D}, {out_heads_cap * D, out_heads_cap * D, D, 1}, 0);
  if (c.lse) args.lse = TensorRef(dlse.get(), DType::kF32, {B, Hq}, {lse_cap, 1}, 0);
  args.scale = c.scale;
  args.num_splits = c.num_splits;

  const size_t ws_bytes = attention::decode_workspace_bytes(args, runtime);
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
  } else {
    // No lse requested: the buffer must be untouched.
    for (uint32_t bits : lse_bits) result.padding_written += bits != 0xFFFFFFFFu;
  }
  return result;
}

}  // namespace kjit::testing
