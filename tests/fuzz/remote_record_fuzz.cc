// Fuzz target: the fleet tier's record decoder (cache/remote/record.hpp). Any bytes may sit in
// the shared Redis, written by anyone who can reach it, so decode_record() must never read
// outside them, crash or throw; whatever it accepts under a trusted key must be exactly what
// that key signed; and trust can only refuse more, never accept more.

#include "cache/remote/record.hpp"
#include "cache/remote/signing.hpp"

#include "cache/le_bytes.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

/// The key the seeds are signed with (tests/fuzz/make_seeds.cc uses the same seed).
const kjit::cache::remote::SecretKey& fuzz_key() {
  static const kjit::cache::remote::SecretKey k = [] {
    std::array<unsigned char, 32> seed{};
    seed.fill(0x2a);
    return kjit::cache::remote::key_from_seed(seed);
  }();
  return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kjit::cache::remote;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // Ask for the key the bytes name (when they are long enough to name one), so the decoder gets
  // past the key check and into the signature and the body.
  kjit::cache::Key expected;
  if (size >= 32) {
    expected.hi = kjit::cache::detail::get_le(bytes, 16, 8);
    expected.lo = kjit::cache::detail::get_le(bytes, 24, 8);
  }
  Rejection open_why = Rejection::kNone, trusted_why = Rejection::kNone;
  const std::optional<Record> open = decode_record(bytes, expected, {}, &open_why);
  const std::optional<Record> trusted = decode_record(bytes, expected, {fuzz_key().pub}, &trusted_why);
  check(open.has_value() == (open_why == Rejection::kNone));
  check(trusted.has_value() == (trusted_why == Rejection::kNone));
  check(!trusted || open);  // trust refuses more, never accepts more
  if (open) {
    check(open->key == expected);
    check(open->entry.has_value() == (open->kind == RecordKind::kEntry));
    check(open->failure.has_value() == (open->kind == RecordKind::kFailure));
    check(!open->entry || open->entry->key == expected);
  }
  if (trusted) {
    // Ed25519 is deterministic: re-signing what was accepted reproduces the bytes exactly.
    check(trusted->signer == fuzz_key().pub.id);
    check(encode_record(trusted->kind, trusted->key, trusted->body, &fuzz_key()) == bytes);
  }
  return 0;
}
