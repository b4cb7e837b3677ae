#pragma once
/// \file runtime/ops/fallback.hpp
/// KJIT_JIT=async in the op pipeline: what an op call runs when its plan's programs are not
/// built. Only a call-memo miss (a new call, or a stored fallback outdated by a background
/// compile) comes here; nothing here runs on a hot call.
///
/// The plan's programs (its own, and its second program when the op has one) are looked for in
/// two passes, each stopping where a fallback serves:
///   - memory only: in the op's kernel tables or loaded by a background compile
///     (KernelTable::loaded). All there: the plan runs as planned. Otherwise a candidate (below)
///     whose programs are all there serves, and the missing programs are queued by (family,
///     point): their specs, keys, disk and fleet look-ups, compile and the fallback's report all
///     run on the background thread, so the call costs lookups and a queue push. An exact
///     program that was in the disk cache serves from the call after the background thread
///     loaded it.
///   - without compiling: the plan's programs in the Runtime's memory, the disk cache or the
///     fleet tier (KernelTable::at_hand, loaded ones only while the launch stream is being
///     captured). All at hand: the plan runs as planned. Otherwise a candidate whose programs
///     are all at hand in memory or the disk cache serves.
/// The candidates, in this order:
///   1. for a tunable op, each default point of the op's families (Family::defaults, what
///      `kjit precompile` builds) that computes what the plan's point computes
///      (Family::same_semantics: they differ only in parameters the family declares
///      performance-only), planned for the call by Op::apply_tuned with the plan's own knobs
///      (its split count, so the workspace the caller sized for the plan fits);
///   2. the op's built-in plan for the call (Op::plan: what runs without a tuning table), which
///      computes what the call asks by construction;
///   3. for an op that declares them (Op::fallback_plans), the call on each other value of a
///      performance-only choice its built-in plan takes from the call as asked: the paged
///      prefill's run step, whose work map fixes the tile, runs a forced kernel variant (from
///      its host plan: the caller's or a tuning table's) on the other kernel;
///   4. the default points of 1 planned with the built-in plan's knobs.
/// apply_tuned refuses a point that cannot run the call; a candidate that needs more workspace
/// than the call's own plan (Plan::workspace_bytes) is passed over.
/// The missing programs are queued on the Runtime's background threads (RuntimeAccess::queue)
/// and the fallback's launch value is marked (FallbackMark): the call
/// memo builds the call again after the next background compile ends, and runs the exact
/// programs from the call after they are loaded. With no candidate at hand the plan runs as
/// planned and build() compiles on the calling thread as KJIT_JIT=warn does (during a capture:
/// CaptureMiss, with the compile queued so a later capture finds it loaded).
///
/// A fallback changes only what cannot change the result's meaning: a tile, a split count (only
/// the fp32 summation order), stages, a kernel variant, rows per CTA. A caller's own request of
/// such a parameter (block_m, variant, num_splits) is honoured from the call after its program
/// is loaded.

#include "runtime/async_jit.hpp"
#include "runtime/ops/pipeline.hpp"

#include <type_traits>
#include <utility>
#include <vector>

namespace kjit::detail {

inline bool same_choice(const Choice& a, const Choice& b) noexcept { return a.family == b.family && a.point == b.point; }

/// Whether Op declares fallback candidates of its own (Op::fallback_plans, pipeline.hpp; candidate
/// 3 of the file comment).
template <class Op, class = void>
struct HasFallbackPlans : std::false_type {};
template <class Op>
struct HasFallbackPlans<Op, std::void_t<decltype(&Op::fallback_plans)>> : std::true_type {};

/// Whether an op's Plan says how many workspace bytes it needs (Plan::workspace_bytes).
template <class Plan, class = void>
struct HasWorkspaceBytes : std::false_type {};
template <class Plan>
struct HasWorkspaceBytes<Plan, std::void_t<decltype(std::declval<const Plan&>().workspace_bytes)>> : std::true_type {};

/// The choices of `plan`'s programs: its own, and Op's second program when it has one (no family
/// where none is needed).
template <class Op>
void plan_choices(const typename Op::Dims& dims, const typename Op::Plan& plan, Choice (&out)[2]) {
  out[0] = plan.choice;
  out[1] = Choice{};
  if constexpr (HasSecondProgram<Op>::value) {
    if (plan.choice.family != nullptr) out[1] = Op::second_choice(dims, plan);
  }
}

/// Whether plans `a` and `b` load the same programs.
template <class Op>
bool same_programs(const typename Op::Dims& dims, const typename Op::Plan& a, const typename Op::Plan& b) {
  Choice ca[2], cb[2];
  plan_choices<Op>(dims, a, ca);
  plan_choices<Op>(dims, b, cb);
  return same_choice(ca[0], cb[0]) && same_choice(ca[1], cb[1]);
}

/// The programs of one plan as KJIT_JIT=async finds them.
struct PlanPrograms {
  const LoadedProgram* first = nullptr;  ///< the plan's own program, when at hand
  Choice missing[2];                      ///< the choices not at hand, `missing_count` of them
  int missing_count = 0;
  bool all() const noexcept { return missing_count == 0; }
};

/// How far plan_programs looks for a program.
enum class Look {
  kLoaded,  ///< loaded: in the op's kernel table or by a background compile (KernelTable::loaded)
  kAtHand,  ///< at hand without compiling (KernelTable::at_hand)
};

/// Which of `plan`'s programs `look` finds on the device of `context` (kAtHand: `exact`, the
/// call's own plan, may also come from the fleet tier; `capturing`: loaded ones only).
template <class Op>
PlanPrograms plan_programs(const typename Op::Dims& dims, const typename Op::Plan& plan, Runtime& runtime,
                           CUcontext context, Look look, bool capturing, bool exact) {
  PlanPrograms out;
  Choice choices[2];
  plan_choices<Op>(dims, plan, choices);
  for (int i = 0; i < 2; ++i) {
    const Choice& c = choices[i];
    if (c.family == nullptr) continue;
    auto find = [&](auto& table) {
      if (look == Look::kLoaded) return table.loaded(runtime, context, c);
      return table.at_hand(runtime, context, c, [&c] { return c.family->spec(c.point); }, capturing, exact);
    };
    const LoadedProgram* program = i == 0 ? find(kernel_table<Op>()) : find(kernel_table<SecondProgram<Op>>());
    if (i == 0) out.first = program;
    if (program == nullptr) out.missing[out.missing_count++] = c;
  }
  return out;
}

/// Op's default choices: each default point of each of its families (Family::defaults, what
/// `kjit precompile` builds), parsed once per process (the families are immutable statics).
template <class Op>
const std::vector<Choice>& default_choices() {
  static const std::vector<Choice> choices = [] {
    std::vector<Choice> out;
    for (auto family_of : Op::kInfo.families) {
      if (family_of == nullptr) continue;
      const Family& f = family_of();
      for (const Point& point : f.default_points()) out.push_back(Choice{&f, point});
    }
    return out;
  }();
  return choices;
}

/// Calls `visit(plan)` for each fallback candidate of `exact` (the file comment's order), other
/// than plans that load `exact`'s programs, until it returns true; returns whether one did.
template <class Op, class Visit>
bool for_each_fallback(const typename Op::Dims& dims, const DeviceInfo& info, const typename Op::Plan& exact,
                       Visit&& visit) {
  using Plan = typename Op::Plan;
  // The family's default points that compute what `exact` computes, planned with `knobs`.
  auto visit_defaults = [&](const TunedChoice& knobs) {
    if constexpr (IsTunable<Op>::value) {
      for (const Choice& d : default_choices<Op>()) {
        if (!exact.choice.family->same_semantics(exact.choice.point, *d.family, d.point)) continue;
        TunedChoice c = knobs;
        c.family = d.family;
        c.point = d.point;
        Plan plan{};
        if (!Op::tune_spec().fits(c, info).empty() || !Op::apply_tuned(dims, info, c, &plan)) continue;
        if (same_programs<Op>(dims, plan, exact)) continue;
        if (visit(plan)) return true;
      }
    }
    return false;
  };
  const bool tunable = IsTunable<Op>::value && exact.choice.family != nullptr;
  // First the plan's own knobs (its split count: the workspace the caller sized for the plan
  // holds their partials), then the built-in plan, then the op's own candidates, then the
  // defaults with the built-in knobs.
  if constexpr (IsTunable<Op>::value) {
    if (tunable && visit_defaults(Op::tuned_choice(dims, exact))) return true;
  }
  // Planned only now: the first candidates usually serve.
  Plan builtin{};
  bool have_builtin = false;
  try {
    builtin = Op::plan(dims, info);
    have_builtin = builtin.choice.family != nullptr;
  } catch (const Error&) {
    // A built-in plan that cannot run the call (a caller's strict request): no candidate here.
  }
  if (have_builtin && !same_programs<Op>(dims, builtin, exact) && visit(builtin)) return true;
  if constexpr (HasFallbackPlans<Op>::value) {
    Plan own[kMaxOpFallbackPlans]{};
    const int n = exact.choice.family != nullptr ? Op::fallback_plans(dims, info, own) : 0;
    for (int i = 0; i < n; ++i) {
      const Plan& plan = own[i];
      // The op's own word, checked against its families': only performance-only parameters differ.
      if (plan.choice.family == nullptr ||
          !exact.choice.family->same_semantics(exact.choice.point, *plan.choice.family, plan.choice.point) ||
          same_programs<Op>(dims, plan, exact) || (have_builtin && same_programs<Op>(dims, plan, builtin))) {
        continue;
      }
      if (visit(plan)) return true;
    }
  }
  if constexpr (IsTunable<Op>::value) {
    if (tunable && have_builtin && visit_defaults(Op::tuned_choice(dims, builtin))) return true;
  }
  return false;
}

/// What KJIT_JIT=async serves for a planned call.
template <class Op>
struct Served {
  /// True: run the call's own plan (its programs are at hand, the mode is not async, or no
  /// fallback is: then build() compiles on the calling thread). False: run `plan`.
  bool exact = true;
  typename Op::Plan plan{};
  const LoadedProgram* program = nullptr;  ///< `plan`'s own program (loaded)
  FallbackMark mark;                       ///< what the launch value built from `plan` records
};

/// The answer to a planned call `exact` of Op on `device` (the file comment). `accept(plan,
/// program)` may adjust a candidate whose programs are at hand to its loaded `program` (the FP8
/// GEMM refines its plan with the kernel's cluster capacities) and returns whether it still
/// serves. Queues the missing programs and reports the fallback (or its absence) to `runtime`.
///
/// Two passes. The first looks in memory only (Look::kLoaded): when a candidate's programs are
/// loaded, the call runs it and queues the missing programs, and the background thread builds
/// their keys, reads the disk cache and the fleet tier, compiles and reports; so a miss with a
/// loaded fallback costs the call lookups and a queue push, and an exact program that was on
/// disk serves from the call after the background thread loaded it. Otherwise the second pass
/// looks as far as a call may without compiling (Look::kAtHand: the exact program in the disk
/// cache and the fleet tier, candidates in the disk cache).
template <class Op, class Accept>
Served<Op> serve_async(const typename Op::Dims& dims, const OpDevice& device, const typename Op::Plan& exact,
                       Runtime& runtime, const CUstream* stream, Accept&& accept) {
  Served<Op> out;
  if (exact.choice.family == nullptr || !RuntimeAccess::async(runtime)) return out;
  // Read before looking: a compile that ends after this makes the launch value built below stale.
  const uint64_t epoch = background_epoch();
  const PlanPrograms loaded = plan_programs<Op>(dims, exact, runtime, device.context, Look::kLoaded, false, true);
  if (loaded.all()) return out;
  const bool capturing = RuntimeAccess::capturing(stream);
  auto serve_from = [&](Look look) {
    return for_each_fallback<Op>(dims, *device.info, exact, [&](const typename Op::Plan& candidate) {
      // The caller sized its workspace for the call's own plan (the op's workspace query): a
      // fallback that needs more cannot serve.
      if constexpr (HasWorkspaceBytes<typename Op::Plan>::value) {
        if (candidate.workspace_bytes > exact.workspace_bytes) return false;
      }
      const PlanPrograms got = plan_programs<Op>(dims, candidate, runtime, device.context, look, capturing, false);
      if (!got.all()) return false;
      typename Op::Plan plan = candidate;
      if (!accept(plan, *got.first)) return false;
      out.plan = plan;
      out.program = got.first;
      return true;
    });
  };
  // Queues `own`'s missing programs; the first one's fallback (if any) is reported by its
  // background compile, or here when none will.
  auto queue = [&](const PlanPrograms& own, const LoadedProgram* fallback) {
    for (int i = 0; i < own.missing_count; ++i) {
      const Choice& c = own.missing[i];
      const bool reported = RuntimeAccess::queue(runtime, *c.family, c.point, device.context, capturing,
                                                 i == 0 ? fallback : nullptr);
      if (i == 0 && fallback != nullptr && !reported) {
        RuntimeAccess::fallback_served(runtime, c.family->spec(c.point), *fallback, device.context, capturing);
      }
    }
  };
  auto serve = [&](const PlanPrograms& own) {
    queue(own, out.program);
    out.exact = false;
    out.mark.epoch = epoch + 1;
    out.mark.launches = RuntimeAccess::fallback_launches(runtime);
    return out;
  };
  if (serve_from(Look::kLoaded)) return serve(loaded);
  const PlanPrograms own = plan_programs<Op>(dims, exact, runtime, device.context, Look::kAtHand, capturing, true);
  if (own.all()) return out;
  if (serve_from(Look::kAtHand)) return serve(own);
  if (capturing) queue(own, nullptr);
  RuntimeAccess::no_fallback(runtime, own.missing[0].family->spec(own.missing[0].point), device.context, capturing);
  return out;
}

template <class Op>
typename Op::Launch build_call(const typename Op::Args& args, const Planned<Op>& p, Workspace workspace,
                               Runtime& runtime, const CUstream* stream, FallbackMark* mark) {
  Served<Op> served = serve_async<Op>(p.dims, p.device, p.plan, runtime, stream,
                                      [](typename Op::Plan&, const LoadedProgram&) { return true; });
  if (served.exact) return build<Op>(args, p, workspace, runtime, stream);
  *mark = served.mark;
  return build<Op>(args, Planned<Op>{p.dims, p.device, served.plan}, workspace, runtime, stream);
}

}  // namespace kjit::detail
