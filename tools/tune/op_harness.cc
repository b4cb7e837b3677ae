// What every `kjit tune` op harness shares (op_harness.hpp): a tune spec's help and default
// shape; and the registry of the built-in ops, one register_*_ops per op family file
// (ops_attention.cc, ops_fp8.cc, ops_mla.cc) plus the ops whose default plan is their only
// candidate.
#include "tools/tune/op_harness.hpp"

#include <kjit/error.hpp>


#include <fmt/format.h>

#include <sstream>

namespace kjit::tune {
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
  register_attention_ops();
  register_fp8_ops();
  register_mla_ops();
  // Ops whose every choice follows from the call. Said here, and in docs/tuning.md.
  TuneOp rotary;
  rotary.name = "rotary";
  rotary.help = "not tunable: the default plan is the only candidate";
  rotary.only_default =
      "kjit::rotary's family point (style, head_dim, position type) is fixed by the call, the vector kernel runs "
      "whenever the alignment allows it (the scalar one is its fallback, never faster), and the CTA size and work "
      "per thread are compile-time constants of the kernel";
  register_op(rotary);
  TuneOp quantize;
  quantize.name = "fp8_quantize";
  quantize.help = "not tunable: the default plan is the only candidate";
  quantize.only_default =
      "kjit::fp8::quantize's family point (input type, format, granularity, pow2) is fixed by the call and each "
      "granularity has one kernel whose launch shape follows from the tensor; the one free launch choice, a "
      "grid-stride per-tensor grid instead of one CTA per 1024 vectors, measured slower on the H200 and is not a "
      "table knob";
  register_op(quantize);
}

}  // namespace kjit::tune
