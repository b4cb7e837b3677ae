// The "rotary" family declaration.
#include "runtime/families/rotary.hpp"

#include "rotary/rotary_params.h"

#include <kjit/ops/rotary.hpp>

#include <string>

namespace kjit {

// RotaryStyle's enumerators are the kernels' style codes.
static_assert(static_cast<int>(RotaryStyle::kNeoX) == rope::kStyleNeoX);
static_assert(static_cast<int>(RotaryStyle::kGPTJ) == rope::kStyleGPTJ);

const Family& rotary_family() {
  static const Family family = [] {
    Family f;
    f.name = "rotary";
    f.doc = "Rotary position embedding (RoPE) of bf16 q/k with f32 cos/sin tables; NeoX or GPT-J "
            "pairing, partial rotary_dim, in or out of place (kernel_sources/rotary/rotary.cu)";
    FamilyParam head_dim{"head_dim", {}, "head dimension (elements)"};
    for (int d : detail::kRotaryHeadDims) head_dim.values.push_back({std::to_string(d), d, ""});
    FamilyParam style{"style", {}, "pairing: neox = (i, i + rotary_dim/2), gptj = (2i, 2i + 1)"};
    for (const EnumName<RotaryStyle>& r : kRotaryStyleNames) style.values.push_back({r.name, static_cast<int>(r.value), ""});
    f.params = {
        style,
        head_dim,
        {"pos", {{"i32", 0, "int"}, {"i64", 1, "long long"}}, "dtype of the positions tensor"},
    };
    f.programs = {{"", "", "rotary/rotary.cu",
                   {"kjit::rope::rotary_kernel<{head_dim}, {style}, {pos}>",
                    "kjit::rope::rotary_scalar_kernel<{head_dim}, {style}, {pos}>"}}};
    f.min_sm = detail::kRotaryMinSm;
    // What common models use: Llama/Mistral/Qwen (neox 128), Gemma (neox 256), small models
    // (neox 64), Phi-2 (neox 80, partial), GPT-J (gptj 256, partial); torch positions are i64.
    f.defaults = {
        {{"style", "neox"}, {"head_dim", "128"}, {"pos", "i64"}},
        {{"style", "neox"}, {"head_dim", "128"}, {"pos", "i32"}},
        {{"style", "neox"}, {"head_dim", "64"}, {"pos", "i64"}},
        {{"style", "neox"}, {"head_dim", "256"}, {"pos", "i64"}},
        {{"style", "neox"}, {"head_dim", "80"}, {"pos", "i64"}},
        {{"style", "gptj"}, {"head_dim", "128"}, {"pos", "i64"}},
        {{"style", "gptj"}, {"head_dim", "256"}, {"pos", "i64"}},
    };
    return f;
  }();
  return family;
}

}  // namespace kjit
