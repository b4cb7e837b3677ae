// The fleet tier's value framing (remote/record.hpp): encode, and a decoder that refuses
// anything it cannot vouch for.
#include "cache/remote/record.hpp"

#include "cache/le_bytes.hpp"

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <fmt/format.h>

namespace kjit::cache::remote {
namespace {

constexpr std::string_view kMagic = "KJITRMT1";
constexpr size_t kHeader = 40;                                  // up to the body
constexpr size_t kTrailer = 8 + 8 + kSignatureBytes;            // checksum, signer, signature
static_assert(kDetachedSignatureBytes == kTrailer - 8, "a detached signature is the trailer after the checksum");

std::optional<Record> refuse(Rejection r, std::string text, Rejection* why, std::string* note) {
  *why = r;
  if (note) *note = std::move(text);
  return std::nullopt;
}

std::optional<Failure> decode_failure(std::string_view body, std::string* problem) {
  nlohmann::json j = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message") || !j["message"].is_string() || !j.contains("log") ||
      !j["log"].is_string() || !j.contains("options") || !j["options"].is_array()) {
    *problem = "failure body is not {message, log, options}";
    return std::nullopt;
  }
  Failure f;
  f.message = j["message"].get<std::string>();
  f.log = j["log"].get<std::string>();
  for (const auto& o : j["options"]) {
    if (!o.is_string()) {
      *problem = "failure options are not strings";
      return std::nullopt;
    }
    f.options.push_back(o.get<std::string>());
  }
  return f;
}

}  // namespace

const char* rejection_name(Rejection r) noexcept {
  switch (r) {
    case Rejection::kNone: return "accepted";
    case Rejection::kCorrupt: return "corrupt";
    case Rejection::kForeign: return "foreign key";
    case Rejection::kUnsigned: return "unsigned";
    case Rejection::kUntrusted: return "signed by an untrusted key";
    case Rejection::kBadSignature: return "bad signature";
    case Rejection::kOversized: return "oversized";
  }
  return "?";
}

std::string encode_failure(const Failure& failure) {
  nlohmann::json j = {{"message", failure.message}, {"log", failure.log}, {"options", failure.options}};
  // Replace, never throw, on bytes that are not UTF-8 (an NVRTC log may quote any source byte).
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string encode_record(RecordKind kind, const Key& key, std::string_view body, const SecretKey* signer) {
  std::string out(kMagic);
  out.reserve(kHeader + body.size() + kTrailer);
  detail::put_le(out, kRecordVersion, 4);
  detail::put_le(out, static_cast<uint32_t>(kind), 4);
  detail::put_le(out, key.hi, 8);
  detail::put_le(out, key.lo, 8);
  detail::put_le(out, body.size(), 8);
  out.append(body);
  detail::put_le(out, XXH3_64bits(out.data(), out.size()), 8);
  detail::put_le(out, signer ? signer->pub.id : 0, 8);
  if (signer) {
    out += sign(*signer, out);
  } else {
    out.append(kSignatureBytes, '\0');
  }
  return out;
}

std::optional<Record> decode_record(std::string_view bytes, const Key& expected, const std::vector<PublicKey>& trusted,
                                    Rejection* why, std::string* note) {
  *why = Rejection::kNone;
  if (bytes.size() < kHeader + kTrailer) return refuse(Rejection::kCorrupt, "truncated", why, note);
  if (bytes.substr(0, kMagic.size()) != kMagic) return refuse(Rejection::kCorrupt, "bad magic", why, note);
  if (const uint64_t v = detail::get_le(bytes, 8, 4); v != kRecordVersion) {
    return refuse(Rejection::kCorrupt, fmt::format("record version {} != {}", v, kRecordVersion), why, note);
  }
  Record r;
  const uint64_t kind = detail::get_le(bytes, 12, 4);
  if (kind < 1 || kind > 3) return refuse(Rejection::kCorrupt, fmt::format("unknown kind {}", kind), why, note);
  r.kind = static_cast<RecordKind>(kind);
  r.key.hi = detail::get_le(bytes, 16, 8);
  r.key.lo = detail::get_le(bytes, 24, 8);
  const uint64_t body_size = detail::get_le(bytes, 32, 8);
  if (body_size != bytes.size() - kHeader - kTrailer) {
    return refuse(Rejection::kCorrupt, body_size > bytes.size() ? "truncated" : "size mismatch", why, note);
  }
  const size_t end = kHeader + static_cast<size_t>(body_size);
  if (detail::get_le(bytes, end, 8) != XXH3_64bits(bytes.data(), end)) {
    return refuse(Rejection::kCorrupt, "checksum mismatch", why, note);
  }
  // Intact; now: is it ours, and do we trust who wrote it?
  if (r.key != expected) {
    return refuse(Rejection::kForeign, fmt::format("holds key {}", r.key.hex()), why, note);
  }
  r.signer = detail::get_le(bytes, end + 8, 8);
  if (!trusted.empty()) {
    if (r.signer == 0) return refuse(Rejection::kUnsigned, "unsigned", why, note);
    const PublicKey* key = nullptr;
    for (const PublicKey& k : trusted) {
      if (k.id == r.signer) key = &k;
    }
    if (!key) return refuse(Rejection::kUntrusted, fmt::format("signer {:016x} is not trusted", r.signer), why, note);
    if (!verify(*key, bytes.substr(0, end + 16), bytes.substr(end + 16))) {
      return refuse(Rejection::kBadSignature, fmt::format("signature by {:016x} does not verify", r.signer), why, note);
    }
  }
  r.body = std::string(bytes.substr(kHeader, static_cast<size_t>(body_size)));
  std::string problem;
  if (r.kind == RecordKind::kEntry) {
    r.entry = cache::decode(r.body, &expected, &problem);
    if (!r.entry) return refuse(Rejection::kCorrupt, "entry: " + problem, why, note);
  } else if (r.kind == RecordKind::kFailure) {
    r.failure = decode_failure(r.body, &problem);
    if (!r.failure) return refuse(Rejection::kCorrupt, problem, why, note);
  }
  return r;
}

std::string detached_signature(RecordKind kind, const Key& key, std::string_view body, const SecretKey& signer) {
  const std::string record = encode_record(kind, key, body, &signer);
  return record.substr(record.size() - kDetachedSignatureBytes);
}

std::optional<Record> decode_detached(RecordKind kind, const Key& key, std::string_view body, std::string_view signature,
                                      const std::vector<PublicKey>& trusted, Rejection* why, std::string* note) {
  if (!signature.empty() && signature.size() != kDetachedSignatureBytes) {
    return refuse(Rejection::kCorrupt,
                  fmt::format("signature of {} bytes, not {}", signature.size(), kDetachedSignatureBytes), why, note);
  }
  // The unsigned record, then its trailer's signer id and signature replaced by the detached ones.
  std::string record = encode_record(kind, key, body, nullptr);
  if (!signature.empty()) record.replace(record.size() - kDetachedSignatureBytes, kDetachedSignatureBytes, signature);
  return decode_record(record, key, trusted, why, note);
}

}  // namespace kjit::cache::remote
