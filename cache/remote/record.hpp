#pragma once
/// \file remote/record.hpp
/// One value in the fleet tier's Redis: an entry (cache/entry.hpp encoding) or a failed-compile
/// record, framed with its key, a checksum and an optional Ed25519 signature (remote/signing.hpp).
///
///   offset  size  field
///   0       8     magic "KJITRMT1"
///   8       4     record version (kRecordVersion), little-endian
///   12      4     kind: 1 = entry, 2 = failed compile, 3 = tuning table
///   16      16    key (hi, lo), little-endian: the key the value is stored under
///   32      8     body size B
///   40      B     body: an entry as cache::encode writes it (kind 1), a failure (kind 2):
///                 UTF-8 JSON {"message": …, "log": …, "options": […]}, or a tuning table
///                 (kind 3, cache/tune_table.hpp JSON; the key is remote/tune_share.hpp's)
///   40+B    8     XXH3-64 of bytes [0, 40+B)
///   48+B    8     signer key id (0 = unsigned)
///   56+B    64    Ed25519 signature of bytes [0, 56+B) (zeros when unsigned)
///
/// The signature covers the key, the kind and the checksum, so a signed value cannot be replayed
/// under another key or turned from an entry into a failure. Anything wrong is a miss with a
/// reason, never a load: see decode_record.

#include "cache/entry.hpp"
#include "cache/key.hpp"
#include "cache/remote/signing.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache::remote {

inline constexpr uint32_t kRecordVersion = 1;

enum class RecordKind : uint32_t { kEntry = 1, kFailure = 2, kTuneTable = 3 };

/// A failed compile as the fleet shares it: what CompileError carried.
struct Failure {
  std::string message;
  std::string log;
  std::vector<std::string> options;
};

/// Why a value was refused.
enum class Rejection {
  kNone,
  kCorrupt,       ///< truncated, bad magic/version/kind, checksum mismatch, trailing bytes, bad body
  kForeign,       ///< stored under another key than it names
  kUnsigned,      ///< trusted keys are configured and the value carries no signature
  kUntrusted,     ///< signed by a key that is not trusted
  kBadSignature,  ///< signed by a trusted key's id, but the signature does not verify
  kOversized,     ///< longer than KJIT_REMOTE_MAX_VALUE_BYTES: refused by its length, never downloaded
};

/// Whether a rejection is about trust (RuntimeStats::remote_rejected_signatures).
inline bool is_trust_rejection(Rejection r) noexcept {
  return r == Rejection::kUnsigned || r == Rejection::kUntrusted || r == Rejection::kBadSignature;
}
const char* rejection_name(Rejection r) noexcept;

/// A decoded, checked value.
struct Record {
  RecordKind kind = RecordKind::kEntry;
  Key key;
  std::string body;
  uint64_t signer = 0;  ///< key id, 0 when unsigned
  std::optional<Entry> entry;      ///< kind kEntry: the decoded entry
  std::optional<Failure> failure;  ///< kind kFailure
};

/// Frames `body` of `kind` under `key`, signed by `signer` when given.
std::string encode_record(RecordKind kind, const Key& key, std::string_view body, const SecretKey* signer);
/// The body of a failure record.
std::string encode_failure(const Failure& failure);

/// Checks and decodes a value read from under `expected`. `trusted` empty: signatures are not
/// required (and not checked: there is nothing to check them against); otherwise the value must
/// be signed by one of them. The body must decode too (an entry for `expected`, or a failure);
/// a tuning table's body is left to its reader (remote/tune_share.hpp).
/// On refusal returns nullopt with `*why` set and, when given, `*note` saying what exactly.
/// Never reads outside `bytes`, and no content of them makes it throw.
std::optional<Record> decode_record(std::string_view bytes, const Key& expected, const std::vector<PublicKey>& trusted,
                                    Rejection* why, std::string* note = nullptr);

/// Detached signatures: a record's signer id and signature kept apart from its body, for a body
/// stored as a file of its own (an OCI image of a cache keeps each entry file as it is, with its
/// signature in a file beside it: cache/oci.hpp). The signature is the one encode_record() puts in
/// the record of `kind`, `key` and `body`, so it is checked exactly as a remote value is.
///
///   offset  size  field
///   0       8     signer key id, little-endian (never 0)
///   8       64    Ed25519 signature of bytes [0, 56+B) of that record
inline constexpr size_t kDetachedSignatureBytes = 8 + kSignatureBytes;

/// The detached signature of `body` as a record of `kind` under `key`, by `signer`.
std::string detached_signature(RecordKind kind, const Key& key, std::string_view body, const SecretKey& signer);

/// Checks `body` stored under `key` with its detached `signature` ("" when it has none) as
/// decode_record() checks the record they make: the same rejections for the same reasons (a
/// signature that is not kDetachedSignatureBytes long is kCorrupt), and an entry body must decode
/// as an entry for `key`. Never reads outside its arguments, and no content of them makes it throw.
std::optional<Record> decode_detached(RecordKind kind, const Key& key, std::string_view body, std::string_view signature,
                                      const std::vector<PublicKey>& trusted, Rejection* why, std::string* note = nullptr);

}  // namespace kjit::cache::remote
