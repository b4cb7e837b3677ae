#include <kjit/error.hpp>
#include <kjit/families.hpp>

#include "runtime/ops/attention_decode.hpp"
#include "runtime/ops/fp8_gemm.hpp"
#include "runtime/ops/fp8_quantize.hpp"
#include "runtime/ops/rotary.hpp"
#include "runtime/ops/swa_decode.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

namespace kjit {

const std::vector<Family>& families() {
  static const std::vector<Family> all = {rotary_family(), attention::decode_family(), mla::swa_decode_family(),
                                          fp8::quantize_family(), fp8::gemm_family(), attention::paged_decode_family(), attention::paged_append_family(), attention::prefill_family(),
                                          attention::prefill_sm90_family(), attention::paged_prefill_family()};
  return all;
}

const Family& family(std::string_view name) {
  for (const Family& f : families()) {
    if (f.name == name) return f;
  }
  std::string names;
  for (const Family& f : families()) names += (names.empty() ? "" : ", ") + f.name;
  throw InvalidArgument(fmt::format("unknown kernel family '{}' (known: {})", name, names));
}

void check_params(const Family& f, const ParamMap& params) {
  for (const auto& [name, value] : params) {
    auto it = std::find_if(f.params.begin(), f.params.end(), [&](const FamilyParam& p) { return p.name == name; });
    if (it == f.params.end()) {
      std::string known;
      for (const auto& p : f.params) known += (known.empty() ? "" : ", ") + p.name;
      throw InvalidArgument(fmt::format("{}: unknown parameter '{}' (parameters: {})", f.name, name, known));
    }
    if (std::find(it->values.begin(), it->values.end(), value) == it->values.end()) {
      throw InvalidArgument(fmt::format("{}: {}={} is not in the specialization space ({})", f.name, name, value,
                                        fmt::join(it->values, ", ")));
    }
  }
  // Name every missing parameter at once, with its values, so one error fixes the command line.
  std::vector<std::string> missing;
  for (const auto& p : f.params) {
    if (!params.count(p.name)) missing.push_back(fmt::format("{} (one of {})", p.name, fmt::join(p.values, ", ")));
  }
  if (!missing.empty()) {
    throw InvalidArgument(fmt::format("{}: missing parameter{} {}", f.name, missing.size() == 1 ? "" : "s",
                                      fmt::join(missing, "; ")));
  }
}

std::string unsupported_reason(const Family& f, const ParamMap& params, const Target& target) {
  if (target.sm() < f.min_sm) return fmt::format("{} needs sm_{} or newer; the target is {}", f.name, f.min_sm, target.str());
  return f.unsupported_reason ? f.unsupported_reason(params, target) : std::string();
}

}  // namespace kjit
