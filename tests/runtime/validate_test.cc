// The shared argument checks of runtime/ops/validate.hpp, one rule each: a good tensor passes,
// and each failure is InvalidArgument "<op>: <tensor> <rule>, got <shape dtype>". The ops' own
// tests check the same rules through each validator.
#include <kjit/error.hpp>
#include <kjit/tensor.hpp>

#include "runtime/ops/validate.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>

namespace {

using kjit::DType;
using kjit::TensorRef;
namespace kd = kjit::detail;

constexpr const char* kOp = "kjit::test_op";

void* fake_ptr(uintptr_t offset = 0) { return reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset); }

/// `check` throws InvalidArgument naming kOp and every needle.
void expect_fails(const std::function<void()>& check, std::initializer_list<const char*> needles) {
  try {
    check();
    ADD_FAILURE() << "no error (expected: " << *needles.begin() << ")";
  } catch (const kjit::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(std::string(kOp) + ": ", 0), 0u) << what;
    for (const char* n : needles) EXPECT_NE(what.find(n), std::string::npos) << "missing '" << n << "' in: " << what;
  }
}

TEST(Validate, CheckTensorOpensWithRankSizesDtypeDevice) {
  const TensorRef t(fake_ptr(), DType::kF32, {4, 8}, {}, 0);
  EXPECT_NO_THROW(kd::check_tensor(kOp, "x", t, 2, {DType::kF32}, 0));
  EXPECT_NO_THROW(kd::check_tensor(kOp, "x", t, 2, {DType::kBool, DType::kF32}, 0));
  expect_fails([] { kd::check_tensor(kOp, "x", TensorRef{}, 2, {DType::kF32}, 0); }, {"x is required (2-d tensor)"});
  expect_fails([&] { kd::check_tensor(kOp, "x", t, 3, {DType::kF32}, 0); }, {"x must be 3-d, got [4, 8]"});
  expect_fails([&] { kd::check_tensor(kOp, "x", t, 2, {DType::kI32, DType::kI64}, 0); }, {"x must be i32 or i64"});
  expect_fails([&] { kd::check_tensor(kOp, "x", t, 2, {DType::kF32}, 1); }, {"x is on CUDA device 0", "expected CUDA device 1"});
  TensorRef negative = t;
  negative.shape[1] = -1;
  // The rules come in order: a negative size is reported before a wrong dtype.
  expect_fails([&] { kd::check_tensor(kOp, "x", negative, 2, {DType::kI32}, 0); }, {"x has a negative size"});
}

TEST(Validate, CheckPointerAligned) {
  EXPECT_NO_THROW(kd::check_pointer_aligned(kOp, "x", TensorRef(fake_ptr(8), DType::kI64, {2}, {}, 0), 8));
  expect_fails([] { kd::check_pointer_aligned(kOp, "x", TensorRef(fake_ptr(4), DType::kI64, {2}, {}, 0), 8); },
               {"x data pointer 0x7f0000000004 must be 8-byte aligned"});
}

TEST(Validate, CheckSameShape) {
  const TensorRef k(fake_ptr(), DType::kBF16, {5, 2, 64}, {}, 0);
  EXPECT_NO_THROW(kd::check_same_shape(kOp, "v", TensorRef(fake_ptr(0x1000), DType::kBF16, {5, 2, 64}, {}, 0), "k", k));
  for (int dim = 0; dim < 3; ++dim) {
    TensorRef v(fake_ptr(0x1000), DType::kBF16, {5, 2, 64}, {}, 0);
    v.shape[dim] += 1;
    expect_fails([&] { kd::check_same_shape(kOp, "v", v, "k", k); }, {"v must have the shape of k, got k [5, 2, 64] bf16 and v ["});
  }
}

TEST(Validate, CheckAtLeastOne) {
  const TensorRef kv(fake_ptr(), DType::kBF16, {2, 16, 0, 128}, {}, 0);
  EXPECT_NO_THROW(kd::check_at_least_one(kOp, "k", kv, 1, "token"));
  expect_fails([&] { kd::check_at_least_one(kOp, "k", kv, 2, "kv head"); }, {"k must have at least one kv head (dim 2)"});
}

TEST(Validate, CheckFiniteScale) {
  EXPECT_NO_THROW(kd::check_finite_scale(kOp, 0.f));
  EXPECT_NO_THROW(kd::check_finite_scale(kOp, -2.5f));
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    expect_fails([&] { kd::check_finite_scale(kOp, bad); }, {"scale must be finite (0 = 1/sqrt(head_dim))"});
  }
}

}  // namespace
