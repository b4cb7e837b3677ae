// `kjit tune` harness of the FP8 GEMM: shapes, scratch buffers, the float64 reference
// (tools/testing/reference_fp8.hpp) and launches.
#include "tools/tune/op_harness.hpp"

#include <kjit/error.hpp>
#include <kjit/ops/fp8.hpp>

#include "runtime/internal/driver.hpp"
#include "runtime/internal/ops.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/random.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kjit::tune {
namespace {

using namespace kjit::tune::detail;
using kjit::testing::DeviceBuffer;
namespace fd = kjit::fp8::detail;

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
    p.a = kjit::testing::random_fp8_values(static_cast<size_t>(m_ * k_), 2.f, p.fa, seed);
    p.b = kjit::testing::random_fp8_values(static_cast<size_t>(n_ * k_), 2.f, p.fb, seed + 1);
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

void register_fp8_ops() { register_spec_op<GemmHarness>(fd::GemmOp::tune_spec()); }

}  // namespace kjit::tune
