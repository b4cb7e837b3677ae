// Fuzz target: the cache bundle reader (cache/bundle.hpp). A bundle comes from another machine,
// so decode_bundle() must either reject it with CacheError or account for every entry it
// declares, never crash, and never throw anything else.

#include "cache/bundle.hpp"

#include <kjit/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    const kjit::cache::BundleContents c = kjit::cache::decode_bundle(bytes);
    if (c.entries.size() + c.problems.size() != c.count) std::abort();
  } catch (const kjit::CacheError&) {
    // Not a whole bundle: the documented answer.
  }
  return 0;
}
