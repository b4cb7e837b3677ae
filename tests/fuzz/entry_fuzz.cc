// Fuzz target: the cache entry decoder (cache/entry.hpp). Any bytes may sit in a cache file, so
// decode() must never read outside them, crash or throw, and whatever it accepts must survive
// a round trip through encode().

#include "cache/entry.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace {

/// A violated invariant: abort, so both libFuzzer and the replay driver report the input.
void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::string why;
  const std::optional<kjit::cache::Entry> e = kjit::cache::decode(bytes, nullptr, &why);
  check(e.has_value() == why.empty());
  if (!e) return 0;
  // Accepted bytes name their own key; asking for that key must accept them too.
  check(kjit::cache::decode(bytes, &e->key, nullptr).has_value());
  // What decode accepts, encode reproduces: the payload exactly, the metadata as parsed.
  const std::string again = kjit::cache::encode(*e);
  const std::optional<kjit::cache::Entry> e2 = kjit::cache::decode(again, &e->key, nullptr);
  check(e2.has_value());
  check(e2->payload == e->payload);
  check(e2->meta.family == e->meta.family && e2->meta.target == e->meta.target);
  check(e2->meta.kernels.size() == e->meta.kernels.size());
  check(e2->meta.options == e->meta.options);
  return 0;
}
