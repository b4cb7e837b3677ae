#pragma once
/// \file tools/tune/op_harness.hpp
/// What every built-in harness of `kjit tune` (ops_*.cc) shares: the candidate list and bucket
/// of an op of the pipeline (its tune_candidates / tune_key, the default first), the resources
/// of a launch value, and fake device addresses for host-side validation of a shape. The
/// problems' random inputs come from tools/testing (random.hpp, reference_*.hpp), as the GPU
/// tests' do.

#include "tools/tune/tuner.hpp"

#include <kjit/error.hpp>

#include "runtime/internal/ops.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_attention.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <vector>

namespace kjit::tune {

/// Register the built-in ops of one op family file each: ops_attention.cc (decode, paged_decode,
/// prefill, paged_prefill), ops_fp8.cc (fp8_gemm), ops_mla.cc (swa_decode). register_builtin_ops
/// (op_harness.cc) calls them and adds the ops whose default is their only candidate (rotary,
/// fp8_quantize).
void register_attention_ops();
void register_fp8_ops();
void register_mla_ops();

namespace detail {

/// The tolerance of a bf16 output against its float64 reference (the attention and GEMM checks).
inline constexpr double kBf16Tol = 1e-2;

/// The largest CTA, dynamic shared memory and cluster of a launch value, and its kernels' most
/// registers per thread.
template <class... P>
void resources_of(const kjit::detail::Launches<P...>& l, Runner* r) {
  std::apply(
      [r](const auto&... step) {
        auto one = [r](const auto& s) {
          if (s.kernel == nullptr) return;
          r->threads = std::max<int>(r->threads, static_cast<int>(s.config.block[0] * s.config.block[1] * s.config.block[2]));
          r->smem = std::max<int>(r->smem, static_cast<int>(s.config.dynamic_smem_bytes));
          r->cluster = std::max<int>(r->cluster, static_cast<int>(s.config.cluster[0] * s.config.cluster[1] * s.config.cluster[2]));
          r->registers = std::max(r->registers, s.kernel->info().registers);
        };
        (one(step), ...);
      },
      l.steps);
}

/// The launches of `plan` on every copy (args_of(i) gives copy i's arguments), as a Runner.
template <class Op, class ArgsOf>
Runner runner_of(const typename Op::Plan& plan, size_t copies, size_t workspace_bytes, ArgsOf args_of,
                 Runtime& runtime) {
  auto ws = std::make_shared<kjit::testing::DeviceBuffer>(std::max<size_t>(workspace_bytes, 16));
  auto launches = std::make_shared<std::vector<typename Op::Launch>>();
  for (size_t i = 0; i < copies; ++i) {
    launches->push_back(kjit::detail::launch_value<Op>(args_of(i), {ws->get(), ws->bytes()}, runtime, &plan));
  }
  Runner r;
  resources_of(launches->front(), &r);
  for (size_t i = 0; i < launches->size(); ++i) {
    r.per_copy.push_back([launches, i](CUstream s) { (*launches)[i].launch(s); });
  }
  r.keep = std::make_shared<std::tuple<decltype(ws), decltype(launches)>>(ws, launches);
  return r;
}

/// Above this many floating-point operations (a few seconds of the reference's threads) a
/// prefill's float64 reference covers a sample of the query rows (sampled_rows).
inline constexpr double kFullReferenceFlops = 3e10;

/// The packed query rows a prefill harness's reference computes: none (meaning all) when the
/// whole reference costs at most kFullReferenceFlops, else in every request the rows i with
/// (i + 7 · (i / 64)) % stride == 0, for the smallest power-of-two stride (at most 64) that
/// brings the cost under it. Every 64-row tile keeps 64 / stride rows, at offsets that rotate
/// from tile to tile through every row position (7 is coprime with the stride), so each
/// position of an MMA tile is checked somewhere. The outputs of the other rows are still checked
/// to be finite (written).
std::vector<int64_t> sampled_rows(const kjit::testing::PrefillProblem& problem);

inline std::vector<ProgramSpec> programs_of(const kjit::detail::TunedChoice& c) {
  if (c.family == nullptr) return {};
  return {c.family->spec(c.point)};
}

/// A fake, aligned device address: host-side validation of a shape needs non-null pointers, and
/// the host side never launches.
inline void* fake(int i) { return reinterpret_cast<void*>(uintptr_t{1} << 40 | uintptr_t(i) << 32); }

/// The programs a candidate's launch loads: its choice's, and for an op with a second program
/// (runtime/ops/pipeline.hpp: the decode ops' merge, when the plan splits) that one too, so the
/// sweep compiles it up front with the others.
template <class Op>
std::vector<ProgramSpec> programs_of(const typename Op::Dims& dims, const typename Op::Plan& plan,
                                     const kjit::detail::TunedChoice& c) {
  std::vector<ProgramSpec> out = programs_of(c);
  if constexpr (kjit::detail::HasSecondProgram<Op>::value) {
    const kjit::detail::Choice second = Op::second_choice(dims, plan);
    if (second.family != nullptr) out.push_back(second.family->spec(second.point));
  }
  return out;
}

template <class Op>
std::vector<Candidate> candidates_of(const typename Op::Dims& dims, const DeviceInfo& info) {
  const kjit::detail::TuneOpSpec& spec = Op::tune_spec();
  std::vector<Candidate> out;
  Candidate def;
  def.is_default = true;
  const typename Op::Plan planned = Op::plan(dims, info);
  def.choice = Op::tuned_choice(dims, planned);
  def.label = "default: " + spec.describe(def.choice);
  def.programs = programs_of<Op>(dims, planned, def.choice);
  out.push_back(def);
  for (const kjit::detail::TunedChoice& c : Op::tune_candidates(dims, info)) {
    Candidate x;
    x.choice = c;
    x.label = spec.describe(c);
    typename Op::Plan plan = planned;
    x.programs = Op::apply_tuned(dims, info, c, &plan) ? programs_of<Op>(dims, plan, c) : programs_of(c);
    out.push_back(x);
  }
  return out;
}

template <class Op>
bool bucket_of(const typename Op::Dims& dims, std::vector<int64_t>* out) {
  kjit::detail::TunedKey key{};
  if (!Op::tune_key(dims, &key)) return false;
  out->assign(key.bucket, key.bucket + kjit::detail::kMaxTuneBucket);
  while (!out->empty() && out->back() == 0) out->pop_back();
  return true;
}


/// The plan a candidate runs on device 0: the untuned planner's for the default, else the
/// stored choice applied to `dims` (InvalidArgument when it does not apply to this shape).
template <class Op>
typename Op::Plan plan_of(const Candidate& c, const typename Op::Dims& dims) {
  const DeviceInfo& info = device_info(0);
  if (c.is_default) return Op::plan(dims, info);
  typename Op::Plan plan;
  if (!Op::apply_tuned(dims, info, c.choice, &plan)) throw InvalidArgument("the candidate does not apply to this shape");
  return plan;
}

/// A TuneOp for an op of the pipeline with a TuneOpSpec: its help and shape defaults.
std::string spec_help(const kjit::detail::TuneOpSpec& spec);
Shape spec_defaults(const kjit::detail::TuneOpSpec& spec);

/// Registers the op of `spec` (its name, help and shape defaults) with harness H, built from a
/// shape.
template <class H>
void register_spec_op(const kjit::detail::TuneOpSpec& spec) {
  register_op({spec.name, spec_help(spec), spec_defaults(spec),
               [](const Shape& s) { return std::unique_ptr<Harness>(new H(s)); }});
}

}  // namespace detail
}  // namespace kjit::tune
