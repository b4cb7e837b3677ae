// Fuzz target: the memo records under the cache root (runtime/toolkit_memo.hpp, the toolkit's
// include closures, and runtime/key_memo.hpp, a program's key and its checks). Any bytes may sit
// in those files, so the decoders must never read outside them, crash or throw; what the toolkit
// decoder accepts re-encodes to the same bytes, and what the key decoder accepts survives a
// round trip.

#include "runtime/key_memo.hpp"
#include "runtime/toolkit_memo.hpp"

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

/// The id the seed key records carry (tests/fuzz/make_seeds.cc).
constexpr kjit::cache::Key kSeedId{0x0123456789abcdefull, 0xfedcba9876543210ull};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (const std::optional<kjit::detail::MemoRecord> r = kjit::detail::decode_memo(bytes)) {
    check(kjit::detail::encode_memo(*r) == bytes);
  }
  if (const std::optional<kjit::detail::KeyMemo> m = kjit::detail::decode_key_memo(bytes, kSeedId)) {
    kjit::detail::KeyChecks checks;
    for (const auto& [path, stamp] : m->checks) checks.add(path, stamp);
    const std::optional<kjit::detail::KeyMemo> again =
        kjit::detail::decode_key_memo(kjit::detail::encode_key_memo(kSeedId, m->key, checks), kSeedId);
    check(again.has_value() && again->key == m->key && again->checks.size() == checks.stamps.size());
  }
  return 0;
}
