// Fuzz target: the warm-up manifest reader (cache/manifest.hpp). A manifest is a file many
// processes append to and people edit, so parse_manifest must take any bytes without crashing,
// throwing or reading outside them; every line it accepts must survive a round trip through
// format_manifest_line; line numbers must rise.

#include "cache/manifest.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t last = 0;
  for (const kjit::cache::ManifestLine& line : kjit::cache::parse_manifest(text)) {
    check(line.line > last);
    last = line.line;
    check(line.entry.has_value() == line.error.empty());
    check(!(line.torn && line.entry.has_value()));
    if (!line.entry) continue;
    const std::string again = kjit::cache::format_manifest_line(*line.entry);
    const auto reparsed = kjit::cache::parse_manifest(again);
    check(reparsed.size() == 1 && reparsed[0].entry.has_value());
    // Invalid UTF-8 in a name is replaced when written: compare what survives that.
    check(kjit::cache::format_manifest_line(*reparsed[0].entry) == again);
  }
  return 0;
}
