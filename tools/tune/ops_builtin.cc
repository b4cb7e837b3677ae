// The ops `kjit tune` sweeps: their shapes, scratch buffers, float64 references and launches.
#include "tools/tune/op_harness.hpp"

#include <kjit/error.hpp>
#include <kjit/ops/attention.hpp>
#include <kjit/ops/fp8.hpp>

#include "runtime/internal.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_attention.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <sstream>
#include <thread>
#include <tuple>

namespace kjit::tune {
namespace detail {

void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn) {
  constexpr size_t kChunk = size_t{1} << 16;
  const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 64);
  if (n <= kChunk || threads == 1) {
    fn(0, n);
    return;
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t b = next.fetch_add(kChunk); b < n; b = next.fetch_add(kChunk)) fn(b, std::min(n, b + kChunk));
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

float uniform01(uint64_t seed, size_t i) {
  uint64_t x = seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(i) + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<float>(x >> 40) * (1.0f / 16777216.0f);
}

std::vector<float> random_bf16_values(size_t n, float range, uint64_t seed) {
  std::vector<float> v(n);
  parallel_for(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) v[i] = kjit::testing::round_bf16(range * (2 * uniform01(seed, i) - 1));
  });
  return v;
}

std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  parallel_for(v.size(), [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) h[i] = kjit::testing::float_to_bf16(v[i]);
  });
  return h;
}

kjit::testing::DecodeProblem random_decode_problem(int batch, int kv_len, int q_heads, int kv_heads, int head_dim,
                                                   uint64_t seed) {
  kjit::testing::DecodeProblem p;
  p.batch = batch;
  p.max_kv_len = kv_len;
  p.q_heads = q_heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const size_t kv = static_cast<size_t>(batch) * kv_len * kv_heads * head_dim;
  p.q = random_bf16_values(static_cast<size_t>(batch) * q_heads * head_dim, 2.f, seed);
  p.k = random_bf16_values(kv, 1.f, seed + 1);
  p.v = random_bf16_values(kv, 1.f, seed + 2);
  return p;
}

}  // namespace detail

namespace {

using namespace kjit::tune::detail;
using kjit::testing::DeviceBuffer;
namespace ad = kjit::attention::detail;
namespace fd = kjit::fp8::detail;

// ---- decode -----------------------------------------------------------------------------------

constexpr double kBf16Tol = 1e-2;

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
    const kjit::testing::DecodeProblem p = random_decode_problem(b_, l_, hq_, hkv_, d_, seed);
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
    const DeviceInfo& info = device_info(0);
    ad::DecodePlan forced;
    if (!c.is_default && !ad::DecodeOp::apply_tuned(dims_, info, c.choice, &forced)) {
      throw InvalidArgument("the candidate does not apply to this shape");
    }
    const ad::DecodePlan plan = c.is_default ? ad::DecodeOp::plan(dims_, info) : forced;
    return runner_of<ad::DecodeOp>(plan, q_.size(), plan.workspace_bytes, [this](size_t i) {
      return args(q_[i].get(), k_[i].get(), v_[i].get(), out_.get());
    }, runtime);
  }

  std::string check(const Runner& r, CUstream stream) override {
    out_.fill(0xFF);
    r.per_copy[0](stream);
    KJIT_CU(cuStreamSynchronize(stream));
    const std::vector<uint16_t> raw = out_.download<uint16_t>(static_cast<size_t>(b_ * hq_ * d_));
    std::vector<float> out(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) out[i] = kjit::testing::bf16_to_float(raw[i]);
    const kjit::testing::Comparison cmp = kjit::testing::compare(out, ref_);
    return cmp.ok(kBf16Tol) ? std::string() : fmt::format("wrong output: {} (tolerance {})", cmp.describe(), kBf16Tol);
  }

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

// ---- fp8 gemm ---------------------------------------------------------------------------------

DType fp8_dtype(const std::string& text) {
  if (text == "e4m3") return DType::kE4M3;
  if (text == "e5m2") return DType::kE5M2;
  throw InvalidArgument(fmt::format("fp8 format '{}' is not e4m3 or e5m2", text));
}

class GemmHarness : public Harness {
 public:
  explicit GemmHarness(const Shape& s)
      : m_(shape_int(s, "m")), n_(shape_int(s, "n")), k_(shape_int(s, "k")), fa_(fp8_dtype(s.at("a"))),
        fb_(fp8_dtype(s.at("b"))) {
    const std::string& out = s.at("out");
    if (out != "bf16" && out != "f32") throw InvalidArgument(fmt::format("out={} is not bf16 or f32", out));
    out_ = out == "f32" ? DType::kF32 : DType::kBF16;
    if (m_ < 1 || n_ < 1 || k_ < 16) throw InvalidArgument("gemm shape needs m, n >= 1 and k >= 16");
    dims_ = fd::validate_gemm(args(fake(1), fake(2), fake(3), fake(4), fake(5)));
  }

  std::vector<Candidate> candidates(const DeviceInfo& info) override { return candidates_of<fd::GemmOp>(dims_, info); }
  bool bucket(std::vector<int64_t>* out) const override { return bucket_of<fd::GemmOp>(dims_, out); }
  size_t input_bytes() const override { return static_cast<size_t>((m_ + n_) * k_); }

  void prepare(int copies, uint64_t seed) override {
    using kjit::testing::Fp8Format;
    kjit::testing::Fp8GemmProblem p;
    p.m = m_;
    p.n = n_;
    p.k = k_;
    p.fa = fa_ == DType::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
    p.fb = fb_ == DType::kE4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2;
    p.a.resize(static_cast<size_t>(m_ * k_));
    p.b.resize(static_cast<size_t>(n_ * k_));
    parallel_for(p.a.size(), [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) p.a[i] = kjit::testing::fp8_encode(4 * uniform01(seed, i) - 2, p.fa);
    });
    parallel_for(p.b.size(), [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) p.b[i] = kjit::testing::fp8_encode(4 * uniform01(seed + 1, i) - 2, p.fb);
    });
    p.scale_a = {0.5f};
    p.scale_b = {0.25f};
    ref_ = kjit::testing::fp8_gemm_reference(p);
    for (int c = 0; c < copies; ++c) {
      a_.push_back(kjit::testing::to_device(p.a));
      b_.push_back(kjit::testing::to_device(p.b));
    }
    sa_ = kjit::testing::to_device(p.scale_a);
    sb_ = kjit::testing::to_device(p.scale_b);
    d_ = DeviceBuffer(static_cast<size_t>(m_ * n_ * dtype_size(out_)));
  }

  Runner runner(const Candidate& c, Runtime& runtime) override {
    auto launches = std::make_shared<std::vector<fd::GemmOp::Launch>>();
    for (size_t i = 0; i < a_.size(); ++i) {
      kjit::fp8::GemmArgs g = args(a_[i].get(), b_[i].get(), d_.get(), sa_.get(), sb_.get());
      if (!c.is_default) {
        const fd::GemmForce f = fd::GemmOp::force_of(c.choice);
        g.kernel = f.kernel;
        g.tile = f.tile;
        g.stages = f.stages;
        g.splits = f.splits;
        g.multicast = f.multicast;
      }
      launches->push_back(fd::GemmOp::launch_value(g, runtime));
    }
    Runner r;
    resources_of(launches->front(), &r);
    for (size_t i = 0; i < launches->size(); ++i) {
      r.per_copy.push_back([launches, i](CUstream s) { (*launches)[i].launch(s); });
    }
    r.keep = launches;
    return r;
  }

  std::string check(const Runner& r, CUstream stream) override {
    d_.fill(0xFF);
    r.per_copy[0](stream);
    KJIT_CU(cuStreamSynchronize(stream));
    std::vector<float> out(static_cast<size_t>(m_ * n_));
    if (out_ == DType::kF32) {
      d_.download(out.data(), out.size() * 4);
    } else {
      const std::vector<uint16_t> raw = d_.download<uint16_t>(out.size());
      for (size_t i = 0; i < raw.size(); ++i) out[i] = kjit::testing::bf16_to_float(raw[i]);
    }
    const kjit::testing::Comparison cmp = kjit::testing::compare(out, ref_);
    return cmp.ok(kBf16Tol) ? std::string() : fmt::format("wrong output: {} (tolerance {})", cmp.describe(), kBf16Tol);
  }

 private:
  kjit::fp8::GemmArgs args(void* a, void* b, void* d, void* sa, void* sb) const {
    kjit::fp8::GemmArgs g;
    g.a = TensorRef(a, fa_, {m_, k_});
    g.b = TensorRef(b, fb_, {n_, k_});
    g.d = TensorRef(d, out_, {m_, n_});
    g.scale_a = TensorRef(sa, DType::kF32, {1});
    g.scale_b = TensorRef(sb, DType::kF32, {1});
    return g;
  }

  int64_t m_, n_, k_;
  DType fa_, fb_, out_;
  fd::GemmDims dims_;
  std::vector<double> ref_;
  std::vector<DeviceBuffer> a_, b_;
  DeviceBuffer sa_, sb_, d_;
};

}  // namespace

namespace detail {

Shape spec_defaults(const kjit::detail::TuneOpSpec& spec) {
  Shape s;
  std::stringstream words(spec.shape_keys);
  std::string w;
  while (words >> w) {
    const size_t eq = w.find('=');
    s[w.substr(0, eq)] = w.substr(eq + 1);
  }
  return s;
}

std::string spec_help(const kjit::detail::TuneOpSpec& spec) {
  std::string knobs;
  for (int i = 0; i < spec.knob_count(); ++i) knobs += (knobs.empty() ? "" : ", ") + std::string(spec.knobs[i]);
  return fmt::format("shape keys (defaults): {}; knobs: family point{}{}; bucket: {}", spec.shape_keys,
                     knobs.empty() ? "" : " × ", knobs, spec.bucket_rule);
}

}  // namespace detail

void register_builtin_ops() {
  const auto& decode = ad::DecodeOp::tune_spec();
  register_op({decode.name, spec_help(decode), spec_defaults(decode),
               [](const Shape& s) { return std::unique_ptr<Harness>(new DecodeHarness(s)); }});
  const auto& gemm = fd::GemmOp::tune_spec();
  register_op({gemm.name, spec_help(gemm), spec_defaults(gemm),
               [](const Shape& s) { return std::unique_ptr<Harness>(new GemmHarness(s)); }});
  register_attention_ops();
  register_more_ops();
}

}  // namespace kjit::tune
