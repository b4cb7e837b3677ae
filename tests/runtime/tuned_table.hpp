#pragma once
// A pushed tuning table of one choice, as the KJIT_JIT=async tests push them
// (tests/gpu/async_jit*_test.cc, tests/runtime/async_jit_paged_prefill_test.cc).
#include <kjit/device.hpp>

#include "runtime/ops/fallback.hpp"
#include "runtime/ops/tuned.hpp"

#include <gtest/gtest.h>

#include <initializer_list>

/// A choice to push: the built-in plan's `point` of `family` with the parameters in `changes`
/// set to their texts, and `knobs` (the op's knobs in its TuneOpSpec order; the rest 0).
inline kjit::detail::TunedChoice varied_choice(const kjit::Family& family, const kjit::Point& point,
                                               const kjit::ParamMap& changes, std::initializer_list<int> knobs) {
  kjit::ParamMap params = family.params_of(point);
  for (const auto& [name, text] : changes) params[name] = text;
  kjit::detail::TunedChoice choice;
  choice.family = &family;
  choice.point = family.parse(params);
  int i = 0;
  for (int k : knobs) choice.knobs[i++] = k;
  return choice;
}

/// Installs for `device` a tuning table holding `choice` for the bucket of `dims` (Op::tune_key),
/// after checking that Op runs the call with it (Op::apply_tuned: the plan into `*tuned` when
/// given) and that it names another program than Op's built-in plan. Call through
/// ASSERT_NO_FATAL_FAILURE.
template <class Op>
void push_tuned_choice(int device, const typename Op::Dims& dims, const kjit::detail::TunedChoice& choice,
                       typename Op::Plan* tuned = nullptr) {
  const kjit::DeviceInfo& info = kjit::device_info(device);
  typename Op::Plan plan{};
  ASSERT_TRUE(Op::apply_tuned(dims, info, choice, &plan)) << choice.family->describe(choice.point);
  ASSERT_FALSE(kjit::detail::same_choice(plan.choice, Op::plan(dims, info).choice))
      << "the table names the built-in plan's program";
  kjit::detail::TunedKey key{};
  ASSERT_TRUE(Op::tune_key(dims, &key));
  kjit::detail::TunedTable table;
  table.set(key, choice);
  kjit::detail::install_tuned_table(device, table);
  if (tuned != nullptr) *tuned = plan;
}
