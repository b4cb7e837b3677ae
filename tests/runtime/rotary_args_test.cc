// kjit::rotary argument validation, host only: every rule of include/kjit/ops/rotary.hpp is
// rejected with InvalidArgument naming the tensor and the rule, before any driver call (so these
// run on machines without a GPU); the plan picks the vector or the scalar kernel as documented;
// the "rotary" family builds the name expressions the kernel source defines, and they compile
// with NVRTC without spills.
#include <kjit/error.hpp>
#include <kjit/families.hpp>
#include <kjit/ops/rotary.hpp>
#include <kjit/runtime.hpp>

#include "runtime/families/attention.hpp"
#include "runtime/ops/rotary/rotary.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace {

using kjit::DType;
using kjit::RotaryArgs;
using kjit::TensorRef;

// Fake, well-aligned device addresses: validation never dereferences them.
void* addr(uintptr_t a) { return reinterpret_cast<void*>(a); }

constexpr int64_t kT = 16, kHq = 8, kHk = 2, kD = 128, kMaxPos = 64;

/// Valid in-place Llama-style arguments: q [16, 8, 128], k [16, 2, 128], tables [64, 64], i64.
RotaryArgs valid_args() {
  RotaryArgs a;
  a.q = TensorRef(addr(0x100000), DType::kBF16, {kT, kHq, kD});
  a.k = TensorRef(addr(0x200000), DType::kBF16, {kT, kHk, kD});
  a.cos = TensorRef(addr(0x300000), DType::kF32, {kMaxPos, kD / 2});
  a.sin = TensorRef(addr(0x400000), DType::kF32, {kMaxPos, kD / 2});
  a.positions = TensorRef(addr(0x500000), DType::kI64, {kT});
  return a;
}

RotaryArgs valid_out_of_place() {
  RotaryArgs a = valid_args();
  a.q_out = TensorRef(addr(0x600000), DType::kBF16, {kT, kHq, kD});
  a.k_out = TensorRef(addr(0x700000), DType::kBF16, {kT, kHk, kD});
  return a;
}

/// What the pipeline derives on the host for `a`: validate → plan (on an H200-like device) →
/// params. No driver call.
struct HostPlan {
  kjit::detail::RotaryDims dims;
  kjit::detail::RotaryPlan plan;
  kjit::rope::RotaryParams params;
  bool vector, in_place, positions_i64;
  uint32_t grid, block;
};

HostPlan validate_rotary(const RotaryArgs& a) {
  using Op = kjit::detail::RotaryOp;
  kjit::DeviceInfo h200;
  h200.cc_major = 9;
  h200.sm_count = 132;
  const kjit::detail::RotaryDims d = Op::validate(a);
  const kjit::detail::RotaryPlan plan = Op::plan(d, h200);
  return {d, plan, Op::params(a, d, plan), plan.vector, d.in_place, d.positions_i64, plan.grid, plan.block};
}

/// Expects InvalidArgument whose message holds every one of `needles`.
void expect_rejected(const RotaryArgs& a, std::initializer_list<const char*> needles) {
  try {
    validate_rotary(a);
    ADD_FAILURE() << "accepted; expected an error mentioning " << *needles.begin();
  } catch (const kjit::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("kjit::rotary"), std::string::npos) << what;
    for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

TEST(RotaryArgs, ValidArgumentsPlanTheVectorKernel) {
  const auto plan = validate_rotary(valid_args());
  EXPECT_TRUE(plan.vector);
  EXPECT_TRUE(plan.in_place);
  EXPECT_EQ(plan.params.copy_tail, 0);
  EXPECT_EQ(plan.params.rotary_dim, kD);  // 0 means head_dim
  EXPECT_EQ(plan.params.q_head_groups, 2);
  EXPECT_EQ(plan.params.k_head_groups, 1);
  EXPECT_EQ(plan.block, 128u);  // 16 units of 8 threads
  EXPECT_EQ(plan.grid, (kT * 3 + 15) / 16);
  EXPECT_TRUE(plan.positions_i64);
  EXPECT_EQ(plan.params.q_out, plan.params.q);

  const auto oop = validate_rotary(valid_out_of_place());
  EXPECT_FALSE(oop.in_place);
  EXPECT_EQ(oop.params.copy_tail, 1);
  EXPECT_EQ(oop.params.k_out, addr(0x700000));
}

TEST(RotaryArgs, OutputsEqualToInputsAreInPlace) {
  RotaryArgs a = valid_args();
  a.q_out = a.q;
  a.k_out = a.k;
  const auto plan = validate_rotary(a);
  EXPECT_TRUE(plan.in_place);
  EXPECT_EQ(plan.params.copy_tail, 0);
}

TEST(RotaryArgs, ScalarFallbacks) {
  RotaryArgs a = valid_args();
  a.rotary_dim = 40;  // rotary_dim / 2 = 20: not a multiple of 8
  a.cos.shape[1] = a.sin.shape[1] = 20;
  a.cos.strides[0] = a.sin.strides[0] = 20;
  EXPECT_FALSE(validate_rotary(a).vector);

  a = valid_args();
  a.q.data = addr(0x100008);  // 8-byte aligned only
  EXPECT_FALSE(validate_rotary(a).vector);

  a = valid_args();
  a.k.strides[1] = kD + 2;  // head rows 4-byte aligned only
  a.k.strides[0] = kHk * (kD + 2);
  EXPECT_FALSE(validate_rotary(a).vector);

  a = valid_out_of_place();
  a.k_out.data = addr(0x700002);
  EXPECT_FALSE(validate_rotary(a).vector);

  a = valid_args();
  a.cos.data = addr(0x300004);
  EXPECT_FALSE(validate_rotary(a).vector);

  // A stride of a size-1 dim does not matter.
  a = valid_args();
  a.k = TensorRef(addr(0x200000), DType::kBF16, {kT, 1, kD}, {kD, 3, 1});
  EXPECT_TRUE(validate_rotary(a).vector);

  // rotary_dim 32 of 128 is 16-aligned: vector, with 64 pass-through dims.
  a = valid_out_of_place();
  a.rotary_dim = 32;
  a.cos = TensorRef(addr(0x300000), DType::kF32, {kMaxPos, 16});
  a.sin = TensorRef(addr(0x400000), DType::kF32, {kMaxPos, 16});
  EXPECT_TRUE(validate_rotary(a).vector);
}

TEST(RotaryArgs, EmptyCallsPlanNoLaunch) {
  RotaryArgs a = valid_args();
  a.q.shape[0] = a.k.shape[0] = a.positions.shape[0] = 0;
  EXPECT_EQ(validate_rotary(a).grid, 0u);
  a.rotary_dim = 40;
  a.cos.shape[1] = a.sin.shape[1] = 20;
  a.cos.strides[0] = a.sin.strides[0] = 20;
  EXPECT_EQ(validate_rotary(a).grid, 0u);
}

TEST(RotaryArgs, KIsOptional) {
  RotaryArgs a = valid_args();
  a.k = TensorRef();
  const auto plan = validate_rotary(a);
  EXPECT_EQ(plan.params.kv_heads, 0);
  EXPECT_EQ(plan.params.k, nullptr);
  a.q_out = TensorRef(addr(0x600000), DType::kBF16, {kT, kHq, kD});
  EXPECT_NO_THROW(validate_rotary(a));
}

TEST(RotaryArgs, RejectsQ) {
  RotaryArgs a = valid_args();
  a.q = TensorRef();
  expect_rejected(a, {"q is required"});
  a = valid_args();
  a.q = TensorRef(addr(0x100000), DType::kBF16, {kT, kHq * kD});
  expect_rejected(a, {"q must be 3-d"});
  a = valid_args();
  a.q.dtype = DType::kF16;
  expect_rejected(a, {"q must be bf16"});
  a = valid_args();
  a.q.strides[2] = 2;
  expect_rejected(a, {"q must have a contiguous last dimension"});
  a = valid_args();
  a.q.device = -1;
  expect_rejected(a, {"q must be on a CUDA device"});
  a = valid_args();
  a.q.data = addr(0x100001);
  expect_rejected(a, {"q data pointer", "2-byte aligned"});
  a = valid_args();
  a.q.shape[1] = -1;
  expect_rejected(a, {"q has a negative size"});
}

TEST(RotaryArgs, RejectsUnsupportedHeadDim) {
  RotaryArgs a = valid_args();
  a.q = TensorRef(addr(0x100000), DType::kBF16, {kT, kHq, 100});
  a.k = TensorRef(addr(0x200000), DType::kBF16, {kT, kHk, 100});
  a.cos.shape[1] = a.sin.shape[1] = 50;
  expect_rejected(a, {"q head_dim 100 is not supported", "128"});
}

TEST(RotaryArgs, RejectsRotaryDim) {
  for (int rd : {1, 3, 127, 130, 256, -2}) {
    RotaryArgs a = valid_args();
    a.rotary_dim = rd;
    expect_rejected(a, {"rotary_dim must be even", std::to_string(rd).c_str()});
  }
}

TEST(RotaryArgs, RejectsStyle) {
  RotaryArgs a = valid_args();
  a.style = static_cast<kjit::RotaryStyle>(7);
  expect_rejected(a, {"style"});
}

TEST(RotaryArgs, RejectsK) {
  RotaryArgs a = valid_args();
  a.k = TensorRef(addr(0x200000), DType::kBF16, {kT, kHk * kD});
  expect_rejected(a, {"k must be 3-d"});
  a = valid_args();
  a.k.dtype = DType::kF32;
  expect_rejected(a, {"k must be bf16"});
  a = valid_args();
  a.k.shape[0] = kT + 1;
  expect_rejected(a, {"k dim 0", "tokens"});
  a = valid_args();
  a.k = TensorRef(addr(0x200000), DType::kBF16, {kT, kHk, 64});
  expect_rejected(a, {"k dim 2", "head_dim"});
  a = valid_args();
  a.k.strides[2] = 3;
  expect_rejected(a, {"k must have a contiguous last dimension"});
  a = valid_args();
  a.k.device = 1;
  expect_rejected(a, {"k is on CUDA device 1", "expected CUDA device 0"});
}

TEST(RotaryArgs, RejectsOutputs) {
  RotaryArgs a = valid_out_of_place();
  a.q_out = TensorRef(addr(0x600000), DType::kBF16, {kT, kHq + 1, kD});
  expect_rejected(a, {"q_out must have the shape of q"});
  a = valid_out_of_place();
  a.k_out = TensorRef(addr(0x700000), DType::kBF16, {kT - 1, kHk, kD});
  expect_rejected(a, {"k_out must have the shape of k"});
  a = valid_out_of_place();
  a.q_out.dtype = DType::kF32;
  expect_rejected(a, {"q_out must be bf16"});
  a = valid_out_of_place();
  a.k_out.strides[2] = 2;
  expect_rejected(a, {"k_out must have a contiguous last dimension"});
  a = valid_out_of_place();
  a.q_out.device = 3;
  expect_rejected(a, {"q_out is on CUDA device 3"});
  a = valid_out_of_place();
  a.k_out = TensorRef();
  expect_rejected(a, {"k_out is not"});
  a = valid_out_of_place();
  a.q_out = TensorRef();
  expect_rejected(a, {"q_out is not"});
  a = valid_out_of_place();
  a.k = TensorRef();
  expect_rejected(a, {"k_out is given but k is not"});
  a = valid_out_of_place();
  a.q_out = TensorRef(addr(0x600000), DType::kBF16, {kT, kHq});
  expect_rejected(a, {"q_out must be 3-d"});
}

TEST(RotaryArgs, RejectsTables) {
  RotaryArgs a = valid_args();
  a.cos.dtype = DType::kBF16;
  expect_rejected(a, {"cos must be f32"});
  a = valid_args();
  a.sin = TensorRef(addr(0x400000), DType::kF32, {kMaxPos * kD / 2});
  expect_rejected(a, {"sin must be 2-d"});
  a = valid_args();
  a.cos = TensorRef(addr(0x300000), DType::kF32, {kMaxPos, kD});
  expect_rejected(a, {"cos dim 1", "rotary_dim / 2"});
  a = valid_args();
  a.rotary_dim = 64;  // tables still have 64 columns; 32 expected
  expect_rejected(a, {"cos dim 1", "rotary_dim / 2 = 32"});
  a = valid_args();
  a.sin = TensorRef(addr(0x400000), DType::kF32, {kMaxPos + 1, kD / 2});
  expect_rejected(a, {"sin dim 0", "max_position"});
  a = valid_args();
  a.cos = TensorRef(addr(0x300000), DType::kF32, {kMaxPos, kD / 2}, {kD, 1});
  expect_rejected(a, {"cos must be contiguous"});
  a = valid_args();
  a.cos = TensorRef(addr(0x300000), DType::kF32, {0, kD / 2});
  a.sin = TensorRef(addr(0x400000), DType::kF32, {0, kD / 2});
  expect_rejected(a, {"cos must have at least one row"});
  a = valid_args();
  a.sin.device = 2;
  expect_rejected(a, {"sin is on CUDA device 2"});
  a = valid_args();
  a.cos.device = -1;
  expect_rejected(a, {"cos is on the host"});
}

TEST(RotaryArgs, RejectsPositions) {
  RotaryArgs a = valid_args();
  a.positions = TensorRef();
  expect_rejected(a, {"positions is required"});
  a = valid_args();
  a.positions = TensorRef(addr(0x500000), DType::kI64, {kT, 1});
  expect_rejected(a, {"positions must be 1-d"});
  a = valid_args();
  a.positions.dtype = DType::kF32;
  expect_rejected(a, {"positions must be i32 or i64"});
  a = valid_args();
  a.positions.shape[0] = kT - 1;
  expect_rejected(a, {"positions dim 0", "tokens"});
  a = valid_args();
  a.positions.strides[0] = 2;
  expect_rejected(a, {"positions must be contiguous"});
  a = valid_args();
  a.positions.data = addr(0x500004);
  expect_rejected(a, {"positions data pointer", "8-byte aligned"});
  a = valid_args();
  a.positions.device = -1;
  expect_rejected(a, {"positions is on the host"});
}

TEST(RotaryArgs, NullDataPointersAreRejected) {
  for (const char* name : {"q", "k", "cos", "sin", "positions", "q_out"}) {
    RotaryArgs a = valid_out_of_place();
    TensorRef* t = std::string(name) == "q"     ? &a.q
                   : std::string(name) == "k"   ? &a.k
                   : std::string(name) == "cos" ? &a.cos
                   : std::string(name) == "sin" ? &a.sin
                   : std::string(name) == "q_out" ? &a.q_out
                                                  : &a.positions;
    t->data = nullptr;
    SCOPED_TRACE(name);
    expect_rejected(a, {name, "null"});
  }
}

// Validation runs before the first driver call: bad arguments give InvalidArgument even on a
// machine without a driver (where a valid call would fail with DriverError instead).
TEST(RotaryArgs, OpValidatesBeforeTouchingTheDriver) {
  RotaryArgs a = valid_args();
  a.rotary_dim = 3;
  EXPECT_THROW(kjit::rotary(a, nullptr), kjit::InvalidArgument);
  a = valid_args();
  a.positions.dtype = DType::kU8;
  EXPECT_THROW(kjit::rotary(a, nullptr), kjit::InvalidArgument);
}

TEST(RotaryArgs, AForcedChoiceMustNameTheOpsFamilyAndAValidPoint) {
  using kjit::detail::check_choice;
  using kjit::detail::RotaryOp;
  const kjit::Target sm90a = kjit::Target::parse("sm_90a");
  const kjit::Family& rotary = kjit::rotary_family();
  EXPECT_NO_THROW(check_choice(RotaryOp::kInfo, {&rotary, rotary.default_points()[0]}, sm90a));
  // Another op's family would launch its kernels with rotary's Params.
  const kjit::Family& decode = kjit::attention::decode_family();
  try {
    check_choice(RotaryOp::kInfo, {&decode, decode.default_points()[0]}, sm90a);
    ADD_FAILURE() << "a decode point was accepted for rotary";
  } catch (const kjit::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("attention.decode family is not one of this op's"), std::string::npos) << e.what();
  }
  kjit::Point bad = rotary.default_points()[0];
  bad.index[1] = 200;  // no such head_dim
  try {
    check_choice(RotaryOp::kInfo, {&rotary, bad}, sm90a);
    ADD_FAILURE() << "an out-of-range point was accepted";
  } catch (const kjit::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("value index out of range for head_dim"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_choice(RotaryOp::kInfo, {&rotary, rotary.default_points()[0]}, kjit::Target::parse("sm_75")),
               kjit::Unsupported);
}

TEST(RotaryFamily, SpaceAndNameExpressions) {
  const kjit::Family& f = kjit::family("rotary");  // registered
  EXPECT_EQ(f.name, kjit::rotary_family().name);
  EXPECT_EQ(f.min_sm, 80);
  EXPECT_GE(f.defaults.size(), 2u);
  EXPECT_LE(f.defaults.size(), 8u);
  const kjit::ProgramSpec spec = f.spec({{"style", "gptj"}, {"head_dim", "80"}, {"pos", "i32"}});
  ASSERT_EQ(spec.name_expressions.size(), 2u);
  EXPECT_EQ(spec.name_expressions[0], "kjit::rope::rotary_kernel<80, 1, int>");
  EXPECT_EQ(spec.name_expressions[1], "kjit::rope::rotary_scalar_kernel<80, 1, int>");
  EXPECT_EQ(spec.source_name, "rotary/rotary.cu");
  EXPECT_EQ(spec.family, "rotary");
  EXPECT_THROW(f.spec({{"style", "neox"}, {"head_dim", "100"}, {"pos", "i32"}}), kjit::InvalidArgument);
  EXPECT_THROW(f.spec({{"style", "neox"}, {"head_dim", "128"}}), kjit::InvalidArgument);
  EXPECT_THROW(f.spec({{"style", "rope"}, {"head_dim", "128"}, {"pos", "i64"}}), kjit::InvalidArgument);
  // Every head dim the validator accepts is in the family's space and vice versa.
  std::vector<std::string> dims;
  for (int d : kjit::detail::kRotaryHeadDims) dims.push_back(std::to_string(d));
  for (const auto& p : f.params) {
    if (p.name == "head_dim") {
      EXPECT_EQ(p.texts(), dims);
    }
  }
}

// The specializations outside the defaults (which families_compile_test covers) compile too, and
// ptxas reports no spills. Needs NVRTC only. Prints the register counts.
TEST(RotaryFamily, NonDefaultSpecializationsCompileWithoutSpills) {
  kjit::RuntimeConfig c = kjit::RuntimeConfig::from_env();
  c.disk_cache = false;
  kjit::Runtime rt(c);
  const kjit::Family& f = kjit::rotary_family();
  struct Job {
    const char* arch;
    kjit::ParamMap params;
  };
  const Job jobs[] = {
      {"sm_90a", {{"style", "neox"}, {"head_dim", "32"}, {"pos", "i32"}}},
      {"sm_90a", {{"style", "neox"}, {"head_dim", "96"}, {"pos", "i64"}}},
      {"sm_90a", {{"style", "gptj"}, {"head_dim", "160"}, {"pos", "i32"}}},
      {"sm_90a", {{"style", "neox"}, {"head_dim", "192"}, {"pos", "i64"}}},
      {"sm_90a", {{"style", "gptj"}, {"head_dim", "512"}, {"pos", "i64"}}},
      {"sm_80", {{"style", "neox"}, {"head_dim", "512"}, {"pos", "i32"}}},
      {"sm_100a", {{"style", "neox"}, {"head_dim", "128"}, {"pos", "i64"}}},
  };
  for (const Job& j : jobs) {
    std::shared_ptr<const kjit::CompiledProgram> p;
    ASSERT_NO_THROW(p = rt.compile(f.spec(j.params), kjit::Target::parse(j.arch))) << j.arch;
    ASSERT_EQ(p->kernels.size(), 2u);
    for (const auto& k : p->kernels) {
      EXPECT_EQ(k.spill_bytes, 0) << j.arch << " " << k.name_expression;
      std::printf("%-7s %-52s %3d registers, %d spill bytes\n", j.arch, k.name_expression.c_str(),
                  k.registers, k.spill_bytes);
    }
  }
}

}  // namespace
