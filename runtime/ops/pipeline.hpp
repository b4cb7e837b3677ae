#pragma once
/// \file runtime/ops/pipeline.hpp
/// The lifecycle every typed op shares, written once:
///
///   validate(args) → Dims            pure host code; InvalidArgument names the tensor and rule
///                                     (a dispatcher that validated already enters below it:
///                                     plan_validated, run_validated)
///   open_device(dims.device)          the device's context made current, its DeviceInfo, arch check
///   plan(dims, info) → Plan           pure: a family Point plus the op's launch knobs (or the
///                                     device's tuned choice: choose_plan, runtime/ops/tuned.hpp)
///   kernel table(plan.choice)         hot: a memcmp or one hash probe; cold: Runtime::load
///   build(args, dims, plan, program)  the launch value: kernels, configs, Params, workspace bytes
///   launch(stream)                    cuLaunchKernelEx per step
///
/// An op that declares `static void call_key(const Args&, CallKeyWriter&)` runs through the
/// thread's call memo (runtime/ops/call_memo.hpp): a repeat call is its key, one probe and the
/// launch; only a new call takes the steps above.
///
/// Under KJIT_JIT=async an op call builds through build_call (runtime/ops/fallback.hpp): when the
/// plan's programs are not built, a fallback plan whose programs are serves while they compile
/// in the background.
///
/// An op is a struct of types and static functions (see runtime/ops/rotary/rotary.hpp):
///
///   struct XOp {
///     static constexpr OpInfo kInfo{"kjit::x", 80, "bf16 mma.sync", {&x_family}};
///     using Args = ...;    // the public argument struct
///     using Dims = ...;    // what validate derives; has `int device`
///     using Plan = ...;    // what plan chooses; has `Choice choice` (no family: nothing to launch)
///     using Launch = ...;  // a Launches<Params...>
///     static Dims validate(const Args&);
///     static Plan plan(const Dims&, const DeviceInfo&);
///     static Launch build(const Args&, const Dims&, const Plan&, const LoadedProgram*, Workspace,
///                         const DeviceInfo&);
///   };
///
/// An op whose launch may need a second program besides its plan's (the decode ops' merge
/// kernel, which runs only when the plan splits the KV) also declares
///
///     static Choice second_choice(const Dims&, const Plan&);  // no family: not needed
///     static Launch build(const Args&, const Dims&, const Plan&, const LoadedProgram* program,
///                         const LoadedProgram* second, Workspace, const DeviceInfo&);
///
/// and build() loads that program through a kernel table of its own (SecondProgram<Op>), after
/// the first and only when the choice names a family, so a plan that does not need it never
/// compiles it. Being derived from the plan, it follows a tuned or forced plan as well.
///
/// An op whose plan takes a performance-only choice from the call as asked, where no family
/// default can stand in for it (the paged prefill's kernel variant, forced by its host plan),
/// may declare KJIT_JIT=async's candidates besides its plan (runtime/ops/fallback.hpp):
///
///     static int fallback_plans(const Dims&, const DeviceInfo&, Plan (&out)[kMaxOpFallbackPlans]);
///
/// An op whose plan rests on a fact only the loaded kernel can tell (the decode ops' cluster
/// merge: whether the device holds the kernel's clusters at all) also declares
///
///     static bool settle(const Dims&, const LoadedProgram& program, Plan* plan);
///
/// which build() calls with the plan's loaded program: true when it changed the plan to another
/// point (the plan's programs are then loaded for that plan, and settle runs again on it), false
/// when the plan stands. It must leave Plan::workspace_bytes alone: the caller sized the
/// workspace for the plan before it was settled.
///
/// Callers that are not the op itself (tests, benchmarks, the tuner) use the same pieces: ask for
/// the plan, force any valid one, or build the launch value without launching. None of this
/// builds a string or allocates on the hot path.

#include <kjit/device.hpp>
#include <kjit/error.hpp>
#include <kjit/families.hpp>
#include <kjit/launch.hpp>

#include "runtime/driver.hpp"
#include "runtime/ops/call_memo.hpp"
#include "runtime/ops/kernel_table.hpp"
#include "runtime/ops/tuned.hpp"
#include "runtime/ops/validate.hpp"

#include <cuda.h>

#include <cstddef>
#include <tuple>
#include <type_traits>

namespace kjit::detail {

/// An op's name (for messages), the lowest SM it runs on, what it needs there, and the families
/// its plans may name (a forced plan naming another family is refused).
struct OpInfo {
  const char* name;
  int min_sm;
  const char* needs;  ///< "mma.sync bf16, cp.async": said when the device is older than min_sm
  const Family& (*families[2])() = {};  ///< the op's kernel families; unused slots null
};

/// The most plans an op's fallback_plans gives (see the file comment).
inline constexpr int kMaxOpFallbackPlans = 2;

/// Caller-provided scratch memory (device pointer and size in bytes).
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

/// A specialization an op chose: a family and a point of its space. Trivially copyable and free
/// of padding: the kernel tables key on its bytes.
struct Choice {
  const Family* family = nullptr;
  Point point;
};

/// One kernel launch of an op, ready to go; no kernel means nothing to launch.
template <class Params>
struct Step {
  const Kernel* kernel = nullptr;
  LaunchConfig config;  ///< stream left null: launch() takes it
  Params params{};

  void launch(CUstream stream) const {
    if (kernel == nullptr) return;
    LaunchConfig c = config;
    c.stream = stream;
    kjit::launch(*kernel, c, params);
  }
};

/// An op's launch value: its kernel launches in stream order, and the workspace they use.
template <class... Params>
struct Launches {
  std::tuple<Step<Params>...> steps;
  size_t workspace_bytes = 0;

  template <size_t I>
  auto& step() noexcept { return std::get<I>(steps); }
  template <size_t I>
  const auto& step() const noexcept { return std::get<I>(steps); }
  /// Launches every step with a kernel, in order, on `stream`.
  void launch(CUstream stream) const {
    std::apply([stream](const auto&... s) { (s.launch(stream), ...); }, steps);
  }
};

/// The device an op runs on: its context (made current) and attributes, after the arch check.
struct OpDevice {
  CUcontext context = nullptr;
  const DeviceInfo* info = nullptr;
};

/// ensure_context(device), device_info(device), then Unsupported below op.min_sm.
inline OpDevice open_device(const OpInfo& op, int device) {
  OpDevice d;
  d.context = ensure_context(device);
  d.info = &device_info(device);
  check_arch(op.name, *d.info, device, op.min_sm, op.needs);
  return d;
}

/// Unsupported unless `choice` names one of the op's families and a point of its space with a
/// kernel for `target` (what a forced plan must pass; the op's own planner only produces such
/// points). A forced plan's other fields (grid, splits, tiles) are the caller's to derive from
/// the op's planner: only the kernel choice is checked here.
void check_choice(const OpInfo& op, const Choice& choice, const Target& target);

/// Op's kernel table (Op: the op, or SecondProgram<Op> for its second program's table).
template <class Op>
KernelTable<Choice, Op>& kernel_table() {
  static KernelTable<Choice, Op> table;
  return table;
}

/// The loaded program of `choice` in `context`, through Op's kernel table (Op: the op, or
/// SecondProgram<Op> for its second program's table). `stream`: the stream
/// the program will be launched on, when known; a miss while it is being captured into a CUDA
/// graph throws CaptureMiss (KernelTable::get).
template <class Op>
const LoadedProgram& load(const Choice& choice, Runtime& runtime, CUcontext context, const CUstream* stream = nullptr) {
  return kernel_table<Op>().get(runtime, context, choice, [&choice] { return choice.family->spec(choice.point); },
                                stream);
}

/// Whether Op declares a second program (see the file comment): Op::second_choice.
template <class Op, class = void>
struct HasSecondProgram : std::false_type {};
template <class Op>
struct HasSecondProgram<Op, std::void_t<decltype(&Op::second_choice)>> : std::true_type {};

/// The kernel-table tag of Op's second program: a table and a per-thread memo of its own, so a
/// call that loads both programs finds each one in its memo.
template <class Op>
struct SecondProgram {};

/// Whether Op declares settle (see the file comment).
template <class Op, class = void>
struct HasSettle : std::false_type {};
template <class Op>
struct HasSettle<Op, std::void_t<decltype(&Op::settle)>> : std::true_type {};

/// The device's tuned plan for already-validated `dims` into `*plan`: true when the op is
/// tunable, `info`'s device has a table with the call's bucket and the stored choice fits the
/// call (runtime/ops/tuned.hpp). With no table this costs one atomic load.
template <class Op>
bool tuned_plan(const typename Op::Dims& dims, const DeviceInfo& info, typename Op::Plan* plan) {
  if constexpr (IsTunable<Op>::value) {
    if (const TunedTable* table = tuned_table(info)) {
      TunedKey key{};
      if (Op::tune_key(dims, &key)) {
        if (const TunedChoice* choice = table->find(key)) return Op::apply_tuned(dims, info, *choice, plan);
      }
    }
  }
  return false;
}

/// The plan of already-validated `dims` on `info`'s device: tuned_plan when there is one, else
/// Op::plan.
template <class Op>
typename Op::Plan choose_plan(const typename Op::Dims& dims, const DeviceInfo& info) {
  typename Op::Plan plan;
  if (tuned_plan<Op>(dims, info, &plan)) return plan;
  return Op::plan(dims, info);
}

/// Everything before building the launch value: validated dims, device, plan.
template <class Op>
struct Planned {
  typename Op::Dims dims;
  OpDevice device;
  typename Op::Plan plan;
};

/// Opens the device of already-validated `dims` and plans them (or takes `forced`, checked with
/// check_choice).
template <class Op>
Planned<Op> plan_validated(const typename Op::Dims& dims, const typename Op::Plan* forced = nullptr) {
  Planned<Op> p{dims, open_device(Op::kInfo, dims.device), {}};
  if (forced != nullptr) {
    if (forced->choice.family != nullptr) check_choice(Op::kInfo, forced->choice, p.device.info->target());
    p.plan = *forced;
  } else {
    p.plan = choose_plan<Op>(p.dims, *p.device.info);
  }
  return p;
}

/// Validates `args`, opens the device and plans (or takes `forced`).
template <class Op>
Planned<Op> plan(const typename Op::Args& args, const typename Op::Plan* forced = nullptr) {
  return plan_validated<Op>(Op::validate(args), forced);
}

/// The launch value of a planned call: the kernels loaded (compiled on first use; an op's
/// second program only when its second_choice names one), nothing launched. `stream`: the launch
/// stream when known (see load).
template <class Op>
typename Op::Launch build(const typename Op::Args& args, const Planned<Op>& p, Workspace workspace,
                          Runtime& runtime, const CUstream* stream = nullptr) {
  const LoadedProgram* program =
      p.plan.choice.family != nullptr ? &load<Op>(p.plan.choice, runtime, p.device.context, stream) : nullptr;
  if constexpr (HasSettle<Op>::value) {
    if (program != nullptr) {
      Planned<Op> settled = p;
      if (Op::settle(p.dims, *program, &settled.plan)) return build<Op>(args, settled, workspace, runtime, stream);
    }
  }
  if constexpr (HasSecondProgram<Op>::value) {
    const LoadedProgram* second = nullptr;
    if (program != nullptr) {
      const Choice choice = Op::second_choice(p.dims, p.plan);
      if (choice.family != nullptr) second = &load<SecondProgram<Op>>(choice, runtime, p.device.context, stream);
    }
    return Op::build(args, p.dims, p.plan, program, second, workspace, *p.device.info);
  } else {
    return Op::build(args, p.dims, p.plan, program, workspace, *p.device.info);
  }
}

/// plan, then build: the launch value of `args` (or of `forced`).
template <class Op>
typename Op::Launch launch_value(const typename Op::Args& args, Workspace workspace, Runtime& runtime,
                                 const typename Op::Plan* forced = nullptr) {
  return build<Op>(args, plan<Op>(args, forced), workspace, runtime);
}

/// The workspace the plan for already-validated `dims` needs on its device
/// (Plan::workspace_bytes); no context is made current and nothing is compiled.
template <class Op>
size_t workspace_bytes_validated(const typename Op::Dims& dims) {
  return choose_plan<Op>(dims, device_info(dims.device)).workspace_bytes;
}

/// The launch value of a planned op call: build(), or under KJIT_JIT=async, when the plan's
/// programs are not built, a fallback's (runtime/ops/fallback.hpp), which `*mark` then records.
template <class Op>
typename Op::Launch build_call(const typename Op::Args& args, const Planned<Op>& p, Workspace workspace,
                               Runtime& runtime, const CUstream* stream, FallbackMark* mark);

/// The op call for `args` whose validation gave `dims` (a dispatcher that validated the call
/// itself runs the op through this, so nothing is checked twice): plan, build, launch.
template <class Op>
void run_validated(const typename Op::Args& args, const typename Op::Dims& dims, Workspace workspace, CUstream stream,
                   Runtime& runtime) {
  CallEntry<typename Op::Launch> call;
  call.launch = build_call<Op>(args, plan_validated<Op>(dims), workspace, runtime, &stream, &call.fallback);
  call.launch_on(stream);
}

/// The key of an Op call in the call memo: the Runtime's id, the workspace, then Op::call_key.
template <class Op>
void write_call_key(const typename Op::Args& args, Workspace workspace, const Runtime& runtime, CallKeyWriter& key) {
  key.put_all(runtime.id(), workspace.data, workspace.bytes);
  Op::call_key(args, key);
}

/// The op call through the thread's call memo (an Op with call_key): a stored launch value for
/// the same key, whose device's tuning table is still the one it was planned with and which is
/// not a fallback outdated by a background compile (FallbackMark::current), is launched on the
/// device's context made current; otherwise `full()` (validate, open the device, read its tuning
/// table, plan, build: a CallEntry) runs and its launch value is stored, then launched.
template <class Op, class Full>
void run_memoized(const typename Op::Args& args, Workspace workspace, CUstream stream, Runtime& runtime, Full&& full) {
  using Memo = CallMemo<Op>;
  Memo& memo = thread_memo<Memo>();
  typename Memo::Key key;
  write_call_key<Op>(args, workspace, runtime, key.writer);
  if (!key.writer.ok()) {
    full().launch_on(stream);
    return;
  }
  CallEntry<typename Op::Launch>* stored = memo.find(key);
  if (stored != nullptr) {
    if (stored->table == tuned_table(device_info(stored->device)) && stored->fallback.current()) {
      ensure_context(stored->device);
      stored->launch_on(stream);
      return;
    }
    *stored = full();
    stored->launch_on(stream);
    return;
  }
  memo.store(key, full()).launch_on(stream);
}

/// The op call: validate, plan, build, launch on `stream` (through the call memo when Op has a
/// call_key).
template <class Op>
void run(const typename Op::Args& args, Workspace workspace, CUstream stream, Runtime& runtime) {
  if constexpr (HasCallKey<Op>::value) {
    run_memoized<Op>(args, workspace, stream, runtime, [&] {
      Planned<Op> p{Op::validate(args), {}, {}};
      p.device = open_device(Op::kInfo, p.dims.device);
      // Read before planning: a table installed meanwhile makes the next call plan again.
      CallEntry<typename Op::Launch> call;
      call.table = tuned_table(*p.device.info);
      call.device = p.dims.device;
      p.plan = choose_plan<Op>(p.dims, *p.device.info);
      call.launch = build_call<Op>(args, p, workspace, runtime, &stream, &call.fallback);
      return call;
    });
  } else {
    CallEntry<typename Op::Launch> call;
    call.launch = build_call<Op>(args, plan<Op>(args), workspace, runtime, &stream, &call.fallback);
    call.launch_on(stream);
  }
}

}  // namespace kjit::detail

#include "runtime/ops/fallback.hpp"  // build_call
