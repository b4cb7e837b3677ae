#include "tools/testing/reference_swa.hpp"

#include <kjit/error.hpp>
#include <kjit/ops/swa_decode.hpp>
#include <kjit/tensor.hpp>

#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

namespace kjit::testing {

double fp8_value(uint8_t b, Fp8Format format) {
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (format == Fp8Format::kE4M3) {
    const int e = (b >> 3) & 0xf, m = b & 7;
    if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
    return sign * (e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7));
  }
  const int e = (b >> 2) & 0x1f, m = b & 3;
  if (e == 31) return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  return sign * (e == 0 ? std::ldexp(m / 4.0, -14) : std::ldexp(1.0 + m / 4.0, e - 15));
}

uint8_t fp8_encode(double v, Fp8Format format) {
  // The non-negative finite codes in increasing order (both formats are monotonic in the code).
  const int max_code = format == Fp8Format::kE4M3 ? 0x7e : 0x7b;
  const double a = std::abs(v);
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= max_code; ++c) {
    const double err = std::abs(fp8_value(static_cast<uint8_t>(c), format) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best | (v < 0 ? 0x80 : 0));
}

double round_to_bf16(double v) {
  // Exact for every product this file rounds (≤ 12 significant bits, well inside f32's range),
  // so rounding through f32 first does not double-round.
  return bf16_to_float(float_to_bf16(static_cast<float>(v)));
}

SwaReference swa_reference(const SwaProblem& p, bool round_dequant) {
  SwaReference r;
  const int64_t T = p.tokens, NH = p.heads, D = p.head_dim, W = p.window;
  r.out.assign(static_cast<size_t>(T * NH * D), 0.0);
  r.lse.assign(static_cast<size_t>(T * NH), -std::numeric_limits<double>::infinity());
  r.valid.assign(static_cast<size_t>(T), 0);
  if (T == 0) return r;

  std::atomic<int64_t> next{0};
  auto worker = [&] {
    std::vector<double> k(static_cast<size_t>(W * D));  // the token's dequantized window rows
    std::vector<int64_t> pos;
    std::vector<double> s(static_cast<size_t>(W));
    std::vector<double> acc(static_cast<size_t>(D));
    for (int64_t t; (t = next.fetch_add(1)) < T;) {
      const int64_t len = std::clamp<int64_t>(p.lens[t], 0, W);
      pos.clear();
      for (int64_t j = 0; j < len; ++j) {
        const int64_t slot = p.indices[t * W + j];
        if (slot < 0) continue;
        const uint8_t* row = p.kv.data() + slot * D;  // slot = block · block_size + offset, compact
        const double sc = p.inv_scale[slot];
        double* kr = k.data() + pos.size() * D;
        for (int64_t d = 0; d < D; ++d) {
          const double v = fp8_value(row[d], p.format) * sc;
          kr[d] = round_dequant ? round_to_bf16(v) : v;
        }
        pos.push_back(j);
      }
      r.valid[t] = static_cast<int64_t>(pos.size());
      if (pos.empty()) continue;
      for (int64_t h = 0; h < NH; ++h) {
        const float* q = p.q.data() + (t * NH + h) * D;
        double m = -std::numeric_limits<double>::infinity();
        for (size_t i = 0; i < pos.size(); ++i) {
          const double* kr = k.data() + i * D;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * kr[d];
          s[i] = dot * p.scale;
          m = std::max(m, s[i]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        double l = 0;
        for (size_t i = 0; i < pos.size(); ++i) {
          const double w = std::exp(s[i] - m);
          l += w;
          const double* kr = k.data() + i * D;
          for (int64_t d = 0; d < D; ++d) acc[d] += w * kr[d];
        }
        double* o = r.out.data() + (t * NH + h) * D;
        for (int64_t d = 0; d < D; ++d) o[d] = acc[d] / l;
        r.lse[t * NH + h] = m + std::log(l);
      }
    }
  };
  const unsigned n = std::max(1u, std::min<unsigned>(32, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < n && static_cast<int64_t>(i) < T; ++i) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return r;
}

std::string SwaCase::describe() const {
  std::string s = fmt::format("T{} NH{} W{} bs{} {}{}", tokens, heads, window, block_size,
                              format == Fp8Format::kE4M3 ? "e4m3" : "e5m2",
                              format == Fp8Format::kE4M3 && u8_cache ? "/u8" : "");
  if (num_blocks > 0) s += fmt::format(" blocks={}", num_blocks);
  if (lens == Lens::kRandom) s += " lens=random";
  if (lens == Lens::kEdges) s += " lens=edges";
  if (lens_i32) s += " lens-i32";
  if (invalid_fraction > 0) s += fmt::format(" invalid={}", invalid_fraction);
  if (all_invalid_row) s += " empty-row";
  if (repeated) s += " repeated";
  if (full_range) s += " fp8-full-range";
  if (mixed_scales) {
    s += " scales=1e-3|300";
  } else if (scale_lo != 0.25f || scale_hi != 4.f) {
    s += fmt::format(" scales=[{},{}]", scale_lo, scale_hi);
  }
  if (softmax_scale == 0.f) s += " scale=1/sqrt(HD)";
  if (softmax_scale > 0.f) s += fmt::format(" scale={}", softmax_scale);
  if (lse) s += " lse";
  if (strided) s += " strided";
  s += num_splits == 0 ? " splits=auto" : fmt::format(" splits={}", num_splits);
  if (head_group != 0) s += fmt::format(" group={}", head_group);
  if (cluster_split != 0) s += fmt::format(" cluster={}", cluster_split);
  return s;
}

SwaProblem make_swa_problem(const SwaCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  SwaProblem p;
  p.tokens = c.tokens;
  p.heads = c.heads;
  p.head_dim = 512;
  p.window = c.window;
  p.block_size = c.block_size;
  const int64_t min_slots = std::max<int64_t>(2 * int64_t{c.tokens} * c.window, 4 * int64_t{c.block_size});
  p.num_blocks = c.num_blocks > 0 ? c.num_blocks : (min_slots + c.block_size - 1) / c.block_size;
  p.format = c.format;
  const int64_t T = p.tokens, NH = p.heads, D = p.head_dim, W = p.window;
  const int64_t slots = p.num_blocks * p.block_size;

  p.q.resize(static_cast<size_t>(T * NH * D));
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto& v : p.q) v = round_bf16(static_cast<float>(normal(rng)));

  p.kv.resize(static_cast<size_t>(slots * D));
  if (c.full_range) {
    // Every finite code, both signs (E4M3 0..0x7e, E5M2 0..0x7b).
    const int max_code = c.format == Fp8Format::kE4M3 ? 0x7e : 0x7b;
    std::uniform_int_distribution<int> code(0, max_code);
    for (auto& b : p.kv) b = static_cast<uint8_t>(code(rng) | (rng() & 1 ? 0x80 : 0));
  } else {
    // A table of encodings of N(0,1)·4 samples, drawn from at random (encoding every value by
    // search would be slow for large caches).
    std::array<uint8_t, 4096> table;
    for (auto& b : table) b = fp8_encode(4.0 * normal(rng), c.format);
    for (auto& b : p.kv) b = table[rng() % table.size()];
  }

  p.inv_scale.resize(static_cast<size_t>(slots));
  for (auto& s : p.inv_scale) {
    double v;
    if (c.mixed_scales) {
      v = (rng() & 1 ? 1e-3 : 300.0) * (1.0 + uni(rng));
    } else {
      v = std::exp(std::log(c.scale_lo) + uni(rng) * (std::log(c.scale_hi) - std::log(c.scale_lo)));
    }
    s = static_cast<float>(round_to_bf16(v));
  }

  p.lens.resize(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    switch (c.lens) {
      case SwaCase::Lens::kFull: p.lens[t] = W; break;
      case SwaCase::Lens::kRandom: p.lens[t] = static_cast<int64_t>(rng() % (W + 1)); break;
      case SwaCase::Lens::kEdges: {
        const int64_t edges[] = {0, 1, W - 1, W, W + 5, -3};
        p.lens[t] = t < 6 ? edges[t] : static_cast<int64_t>(rng() % (W + 1));
        break;
      }
    }
  }

  p.indices.resize(static_cast<size_t>(T * W));
  std::array<int64_t, 5> pool;
  for (auto& s : pool) s = static_cast<int64_t>(rng() % slots);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < W; ++j) {
      int64_t slot = c.repeated ? pool[rng() % pool.size()] : static_cast<int64_t>(rng() % slots);
      if (c.invalid_fraction > 0 && uni(rng) < c.invalid_fraction) slot = rng() & 1 ? -1 : -static_cast<int64_t>(rng() % 1000 + 2);
      if (c.all_invalid_row && T > 1 && t == 1) slot = -1;
      p.indices[t * W + j] = slot;
    }
  }

  if (c.softmax_scale > 0.f) {
    p.scale = c.softmax_scale;
  } else if (c.softmax_scale == 0.f) {
    p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  } else {
    // The RMS of raw scores q·k over a sample of valid (token, head, position) triples.
    double sum2 = 0;
    int n = 0;
    for (int sample = 0; sample < 512; ++sample) {
      const int64_t t = static_cast<int64_t>(rng() % T);
      const int64_t j = static_cast<int64_t>(rng() % W);
      const int64_t slot = p.indices[t * W + j];
      if (slot < 0) continue;
      const int64_t h = static_cast<int64_t>(rng() % NH);
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) {
        dot += static_cast<double>(p.q[(t * NH + h) * D + d]) *
               round_to_bf16(fp8_value(p.kv[slot * D + d], p.format) * p.inv_scale[slot]);
      }
      sum2 += dot * dot;
      ++n;
    }
    const double rms = n > 0 ? std::sqrt(sum2 / n) : 0.0;
    p.scale = rms > 0 ? static_cast<float>(-c.softmax_scale / rms) : 1.0f;
  }
  return p;
}

bool SwaCaseResult::ok(double out_tol, double lse_tol) const {
  return out.ok(out_tol) && (lse.count == 0 || lse.ok(lse_tol)) && padding_written == 0;
}

std::string SwaCaseResult::describe() const {
  std::string s = fmt::format("seed {} splits={}: out {} (vs unrounded dequant: rel_l2={:.3e})", seed, num_splits,
                              out.describe(), out_exact.rel_l2);
  if (lse.count > 0) s += fmt::format("; lse {}", lse.describe());
  if (padding_written > 0) s += fmt::format("; {} padding elements written", padding_written);
  return s;
}

namespace {

/// A device copy of a host byte array laid out with a padded leading stride: `rows` rows of
/// `row_bytes` bytes each `stride_bytes` apart; the gaps hold 0xFF.
DeviceBuffer upload_strided(const void* host, int64_t rows, int64_t row_bytes, int64_t stride_bytes) {
  std::vector<uint8_t> staged(static_cast<size_t>(std::max<int64_t>(rows * stride_bytes, 16)), 0xFF);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(staged.data() + r * stride_bytes, static_cast<const uint8_t*>(host) + r * row_bytes,
                static_cast<size_t>(row_bytes));
  }
  return to_device(staged);
}

}  // namespace

SwaLayout swa_layout(const SwaCase& c, const SwaProblem& p) {
  SwaLayout l;
  // Strided: head stride HD + 64, token stride NH · (HD + 64) + 128, blocks block_size + 3 rows
  // apart, lse rows NH + 5 apart.
  l.head_stride = c.strided ? p.head_dim + 64 : p.head_dim;
  l.token_stride = c.strided ? p.heads * l.head_stride + 128 : p.heads * p.head_dim;
  l.block_rows = c.strided ? p.block_size + 3 : p.block_size;
  l.lse_token_stride = c.strided ? p.heads + 5 : p.heads;
  return l;
}

std::vector<uint16_t> swa_q_bf16(const SwaProblem& p, const SwaLayout& l) {
  const int64_t T = p.tokens, NH = p.heads, D = p.head_dim;
  std::vector<uint16_t> q16(static_cast<size_t>(std::max<int64_t>(T * l.token_stride, 8)), 0xFFFF);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t d = 0; d < D; ++d)
        q16[t * l.token_stride + h * l.head_stride + d] = float_to_bf16(p.q[(t * NH + h) * D + d]);
  return q16;
}

mla::SwaDecodeArgs swa_args(const SwaCase& c, const SwaProblem& p, const SwaLayout& l, const SwaBuffers& b,
                            int device) {
  const int64_t T = p.tokens, NH = p.heads, D = p.head_dim;
  mla::SwaDecodeArgs a;
  a.q = TensorRef(b.q, DType::kBF16, {T, NH, D}, {l.token_stride, l.head_stride, 1}, device);
  const DType kv_dtype = c.format == Fp8Format::kE5M2 ? DType::kE5M2 : (c.u8_cache ? DType::kU8 : DType::kE4M3);
  a.kv_cache = TensorRef(b.kv, kv_dtype, {p.num_blocks, p.block_size, D}, {l.block_rows * D, D, 1}, device);
  a.inv_scale = TensorRef(b.inv_scale, DType::kBF16, {p.num_blocks * p.block_size, 1}, {}, device);
  a.indices = TensorRef(b.indices, DType::kI64, {T, p.window}, {}, device);
  a.lens = TensorRef(b.lens, c.lens_i32 ? DType::kI32 : DType::kI64, {T}, {}, device);
  a.out = TensorRef(b.out, DType::kBF16, {T, NH, D}, {l.token_stride, l.head_stride, 1}, device);
  if (c.lse) a.lse = TensorRef(b.lse, DType::kF32, {T, NH}, {l.lse_token_stride, 1}, device);
  a.scale = c.softmax_scale == 0.f ? 0.f : static_cast<float>(p.scale);
  a.num_splits = c.num_splits;
  a.head_group = c.head_group;
  a.cluster_split = c.cluster_split;
  return a;
}

SwaCaseResult swa_check(const SwaCase& c, const SwaProblem& p, const SwaLayout& l, const std::vector<uint16_t>& out16,
                        const std::vector<float>& lse_all) {
  const int64_t T = p.tokens, NH = p.heads, D = p.head_dim;
  const int64_t ts = l.token_stride, hs = l.head_stride, lse_ts = l.lse_token_stride;
  SwaCaseResult res;
  const SwaReference ref = swa_reference(p);
  std::vector<float> out(static_cast<size_t>(T * NH * D));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t d = 0; d < D; ++d) out[(t * NH + h) * D + d] = bf16_to_float(out16[t * ts + h * hs + d]);
      for (int64_t d = D; d < hs; ++d) res.padding_written += out16[t * ts + h * hs + d] != 0xFFFF;
    }
    for (int64_t i = NH * hs; i < ts; ++i) res.padding_written += out16[t * ts + i] != 0xFFFF;
  }
  res.out = compare(out, ref.out);
  const SwaReference exact = swa_reference(p, false);
  res.out_exact = compare(out, exact.out);
  if (c.lse) {
    std::vector<float> lse(static_cast<size_t>(T * NH));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < NH; ++h) lse[t * NH + h] = lse_all[t * lse_ts + h];
      for (int64_t h = NH; h < lse_ts; ++h) res.padding_written += !std::isnan(lse_all[t * lse_ts + h]);
    }
    res.lse = compare(lse, exact.lse);
  } else {
    for (float v : lse_all) res.padding_written += !std::isnan(v);  // no lse: nothing written
  }
  return res;
}

SwaCaseResult run_swa_case(const SwaCase& c, uint64_t seed, Runtime& runtime) {
  const SwaProblem p = make_swa_problem(c, seed);
  const int64_t T = p.tokens, D = p.head_dim;
  const int64_t slots = p.num_blocks * p.block_size;
  const SwaLayout l = swa_layout(c, p);

  const std::vector<uint16_t> q16 = swa_q_bf16(p, l);
  DeviceBuffer q_dev = to_device(q16);
  DeviceBuffer out_dev(q16.size() * 2);
  out_dev.fill(0xFF);
  DeviceBuffer kv_dev = upload_strided(p.kv.data(), p.num_blocks, p.block_size * D, l.block_rows * D);
  std::vector<uint16_t> sc16(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) sc16[s] = float_to_bf16(p.inv_scale[s]);
  DeviceBuffer scale_dev = to_device(sc16);
  DeviceBuffer idx_dev = to_device(p.indices);
  DeviceBuffer lens_dev;
  if (c.lens_i32) {
    std::vector<int32_t> l32(p.lens.begin(), p.lens.end());
    lens_dev = to_device(l32);
  } else {
    lens_dev = to_device(p.lens);
  }
  const size_t lse_elements = static_cast<size_t>(std::max<int64_t>(T * l.lse_token_stride, 4));
  DeviceBuffer lse_dev(lse_elements * 4);
  lse_dev.fill(0xFF);

  const SwaBuffers buffers{q_dev.get(),    kv_dev.get(),  scale_dev.get(), idx_dev.get(),
                           lens_dev.get(), out_dev.get(), lse_dev.get()};
  const mla::SwaDecodeArgs a = swa_args(c, p, l, buffers, current_device());
  const size_t ws_bytes = mla::swa_decode_workspace_bytes(a);
  DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
  ws.fill(0xFF);
  mla::swa_decode(a, ws.get(), ws_bytes, nullptr, runtime);
  synchronize();

  SwaCaseResult res = swa_check(c, p, l, out_dev.download<uint16_t>(q16.size()), lse_dev.download<float>(lse_elements));
  res.seed = seed;
  // The split count the planner used: the workspace holds T · NH · splits · (D + 1) floats.
  res.num_splits =
      ws_bytes == 0 || T == 0 ? 1 : static_cast<int>(ws_bytes / (static_cast<size_t>(T * p.heads) * (D + 1) * 4));
  return res;
}

}  // namespace kjit::testing
