// `kjit tune` harness of the fp8 sliding-window MLA decode (reference_swa.hpp: its problem
// builder, layout, arguments and float64 check).
#include "tools/tune/op_harness.hpp"

#include <kjit/error.hpp>
#include <kjit/ops/swa_decode.hpp>

#include "runtime/internal/driver.hpp"
#include "runtime/internal/ops.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_swa.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace kjit::tune {
namespace {

using namespace kjit::tune::detail;
using kjit::testing::DeviceBuffer;
namespace md = kjit::mla::detail;

class SwaHarness : public Harness {
 public:
  explicit SwaHarness(const Shape& s) {
    c_.tokens = static_cast<int>(shape_int(s, "tokens"));
    c_.heads = static_cast<int>(shape_int(s, "heads"));
    c_.window = static_cast<int>(shape_int(s, "window"));
    const std::string& cache = s.at("cache");
    if (cache != "e4m3" && cache != "e5m2") throw InvalidArgument(fmt::format("cache={} is not e4m3 or e5m2", cache));
    c_.format = cache == "e4m3" ? kjit::testing::Fp8Format::kE4M3 : kjit::testing::Fp8Format::kE5M2;
    c_.u8_cache = false;
    if (c_.tokens < 1 || c_.heads < 1 || c_.window < 1) throw InvalidArgument("swa_decode shape sizes must be positive");
    // The shape's dims, from a problem of the same sizes (make_swa_problem is cheap at T = 1).
    kjit::testing::SwaCase one = c_;
    p_ = kjit::testing::make_swa_problem(one, 1);
    layout_ = kjit::testing::swa_layout(c_, p_);
    const kjit::testing::SwaBuffers fakes{fake(1), fake(2), fake(3), fake(4), fake(5), fake(6), nullptr};
    dims_ = md::validate_swa_decode(kjit::testing::swa_args(c_, p_, layout_, fakes));
  }

  std::vector<Candidate> candidates(const DeviceInfo& info) override { return candidates_of<md::SwaDecodeOp>(dims_, info); }
  bool bucket(std::vector<int64_t>* out) const override { return bucket_of<md::SwaDecodeOp>(dims_, out); }
  size_t input_bytes() const override {
    return p_.kv.size() + p_.q.size() * 2 + p_.indices.size() * 8 + p_.inv_scale.size() * 2;
  }

  void prepare(int copies, uint64_t seed) override {
    p_ = kjit::testing::make_swa_problem(c_, seed);
    layout_ = kjit::testing::swa_layout(c_, p_);
    q16_ = kjit::testing::swa_q_bf16(p_, layout_);
    std::vector<uint16_t> sc16(p_.inv_scale.size());
    for (size_t i = 0; i < sc16.size(); ++i) sc16[i] = kjit::testing::float_to_bf16(p_.inv_scale[i]);
    for (int c = 0; c < copies; ++c) {
      q_.push_back(kjit::testing::to_device(q16_));
      kv_.push_back(kjit::testing::to_device(p_.kv));
      scale_.push_back(kjit::testing::to_device(sc16));
      idx_.push_back(kjit::testing::to_device(p_.indices));
      lens_.push_back(kjit::testing::to_device(p_.lens));
    }
    out_ = DeviceBuffer(q16_.size() * 2);
  }

  Runner runner(const Candidate& c, Runtime& runtime) override {
    const md::SwaPlan plan = plan_of<md::SwaDecodeOp>(c, dims_);
    return runner_of<md::SwaDecodeOp>(plan, q_.size(), plan.workspace_bytes, [this](size_t i) {
      const kjit::testing::SwaBuffers b{q_[i].get(),    kv_[i].get(), scale_[i].get(), idx_[i].get(),
                                        lens_[i].get(), out_.get(),   nullptr};
      return kjit::testing::swa_args(c_, p_, layout_, b);
    }, runtime);
  }

  std::string check(const Runner& r, CUstream stream) override {
    out_.fill(0xFF);
    r.per_copy[0](stream);
    KJIT_CU(cuStreamSynchronize(stream));
    const std::vector<float> no_lse(static_cast<size_t>(std::max<int64_t>(p_.tokens * layout_.lse_token_stride, 4)),
                                    std::numeric_limits<float>::quiet_NaN());
    const kjit::testing::SwaCaseResult res =
        kjit::testing::swa_check(c_, p_, layout_, out_.download<uint16_t>(q16_.size()), no_lse);
    return res.ok(kjit::testing::kSwaOutTol, kjit::testing::kSwaLseTol) ? std::string()
                                                                        : "wrong output: " + res.describe();
  }

 private:
  kjit::testing::SwaCase c_;
  kjit::testing::SwaProblem p_;
  kjit::testing::SwaLayout layout_;
  md::SwaDims dims_;
  std::vector<uint16_t> q16_;
  std::vector<DeviceBuffer> q_, kv_, scale_, idx_, lens_;
  DeviceBuffer out_;
};

}  // namespace

void register_mla_ops() { register_spec_op<SwaHarness>(md::SwaDecodeOp::tune_spec()); }

}  // namespace kjit::tune
