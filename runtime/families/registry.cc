// The registry of shipped kernel families: a table of their declarations.
#include <kjit/error.hpp>
#include <kjit/families.hpp>

#include "runtime/families/attention.hpp"
#include "runtime/families/fp8.hpp"
#include "runtime/families/mla.hpp"
#include "runtime/families/rotary.hpp"

#include <fmt/format.h>

#include <vector>

namespace kjit {

const std::vector<std::reference_wrapper<const Family>>& families() {
  static const std::vector<std::reference_wrapper<const Family>> all = {
      rotary_family(),
      attention::decode_family(),
      mla::swa_decode_family(),
      fp8::quantize_family(),
      fp8::gemm_family(),
      attention::paged_decode_family(),
      attention::decode_merge_family(),
      attention::paged_append_family(),
      attention::prefill_family(),
      attention::prefill_sm90_family(),
      attention::paged_prefill_family(),
      attention::paged_prefill_sm90_family(),
  };
  // A malformed declaration would surface only when an op first names its kernel; say it now.
  static const bool checked = [] {
    for (const Family& f : all) {
      if (std::string why = f.check(); !why.empty()) {
        throw InvalidArgument(fmt::format("kernel family {} is declared wrongly: {}", f.name, why));
      }
    }
    return true;
  }();
  (void)checked;
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

}  // namespace kjit
