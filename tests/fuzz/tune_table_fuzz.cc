// Fuzz target: the tuning table reader (cache/tune_table.hpp). Any bytes may sit in a table file
// (a bundle from elsewhere, a half-written copy), so decode_table() must never crash and must
// either throw CacheError or accept; whatever it accepts must survive a round trip through
// encode_table().

#include "cache/tune_table.hpp"

#include <kjit/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  kjit::cache::TuneTable t;
  try {
    t = kjit::cache::decode_table(bytes);
  } catch (const kjit::CacheError&) {
    return 0;
  }
  const std::string again = kjit::cache::encode_table(t);
  kjit::cache::TuneTable t2;
  try {
    t2 = kjit::cache::decode_table(again);
  } catch (const kjit::CacheError&) {
    check(false);
  }
  check(t2.fingerprint_id == t.fingerprint_id && t2.fingerprint_text == t.fingerprint_text);
  check(t2.entries.size() == t.entries.size());
  for (size_t i = 0; i < t.entries.size(); ++i) {
    check(t2.entries[i].op == t.entries[i].op && t2.entries[i].bucket == t.entries[i].bucket);
    check(t2.entries[i].winner.knobs == t.entries[i].winner.knobs);
    check(t2.entries[i].has_runner_up == t.entries[i].has_runner_up);
  }
  // Merging a table into itself changes nothing.
  kjit::cache::TuneTable self = t;
  check(kjit::cache::merge_tables(self, t) == 0 && self.entries.size() == t.entries.size());
  return 0;
}
