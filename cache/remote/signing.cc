// Ed25519 signing for the fleet tier, on libsodium (crypto_sign_detached / verify_detached).
#include "cache/remote/signing.hpp"

#include "cache/echo.hpp"
#include "cache/input_file.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>
#include <sodium.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

namespace kjit::cache::remote {
namespace {

void init_sodium() {
  static std::once_flag once;
  std::call_once(once, [] {
    // sodium_init fails only when the OS has no random source; nothing here can work then.
    if (sodium_init() < 0) throw Error("kjit: libsodium could not be initialized (no random source?)");
  });
}

std::string to_hex(const unsigned char* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}

bool from_hex(std::string_view text, unsigned char* out, size_t n) {
  if (text.size() != 2 * n) return false;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < n; ++i) {
    const int a = digit(text[2 * i]), b = digit(text[2 * i + 1]);
    if (a < 0 || b < 0) return false;
    out[i] = static_cast<unsigned char>(a * 16 + b);
  }
  return true;
}

/// The key lines of a key file: no blanks, no comments.
/// A key file is a few lines: anything larger is not one.
constexpr uint64_t kMaxKeyFileBytes = 1 << 20;

std::vector<std::string> key_lines(const std::string& path, std::string_view variable) {
  // read_input_file refuses a FIFO or a folder by its path, before anything would block on it.
  const std::string what = fmt::format("{} key file", variable);
  std::istringstream in(read_input_file(path, what.c_str(), kMaxKeyFileBytes));
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    size_t b = 0, e = line.size();
    while (b < e && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(line[e - 1]))) --e;
    if (b == e || line[b] == '#') continue;
    lines.push_back(line.substr(b, e - b));
  }
  return lines;
}

}  // namespace

uint64_t key_id(const std::array<unsigned char, 32>& key) {
  init_sodium();
  unsigned char h[crypto_generichash_BYTES_MIN];
  crypto_generichash(h, sizeof h, key.data(), key.size(), nullptr, 0);
  uint64_t id = 0;
  for (int i = 7; i >= 0; --i) id = (id << 8) | h[i];
  return id;
}

SecretKey generate_key() {
  init_sodium();
  SecretKey k;
  crypto_sign_keypair(k.pub.bytes.data(), k.bytes.data());
  k.pub.id = key_id(k.pub.bytes);
  return k;
}

SecretKey key_from_seed(const std::array<unsigned char, 32>& seed) {
  init_sodium();
  SecretKey k;
  crypto_sign_seed_keypair(k.pub.bytes.data(), k.bytes.data(), seed.data());
  k.pub.id = key_id(k.pub.bytes);
  return k;
}

std::string secret_key_text(const SecretKey& key) {
  return fmt::format("# kjit Ed25519 secret key, id {:016x}: keep it on builders only (mode 0600)\n{}\n", key.pub.id,
                     to_hex(key.bytes.data(), key.bytes.size()));
}

std::string public_key_text(const PublicKey& key) {
  return fmt::format("# kjit Ed25519 public key, id {:016x}\n{}\n", key.id, to_hex(key.bytes.data(), key.bytes.size()));
}

SecretKey read_secret_key(const std::string& path, std::string_view variable) {
  init_sodium();
  // As ssh does: a secret key that others may read is a key already given away.
  if (struct stat st{}; ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 077) != 0) {
    const bool plain = std::all_of(path.begin(), path.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' || c == '_' || c == '-';
    });
    throw InvalidArgument(fmt::format("{}: secret key file '{}' has mode {:04o}, so its group or others may read it; "
                                      "a secret key must be its owner's alone: run `chmod 600 {}`",
                                      variable, shown_path(path), st.st_mode & 07777,
                                      plain ? shown_path(path) : "'" + shown_path(path) + "'"));
  }
  const std::vector<std::string> lines = key_lines(path, variable);
  SecretKey k;
  if (lines.size() != 1 || !from_hex(lines[0], k.bytes.data(), k.bytes.size())) {
    throw InvalidArgument(fmt::format("{}: '{}' is not a kjit secret key file (one line of 128 hex digits; "
                                      "make one with `kjit remote keygen`)",
                                      variable, shown_path(path)));
  }
  // The public half is stored in the secret key; check that it is the seed's own.
  std::array<unsigned char, 32> derived{};
  crypto_sign_ed25519_sk_to_pk(derived.data(), k.bytes.data());
  unsigned char seed[crypto_sign_SEEDBYTES];
  crypto_sign_ed25519_sk_to_seed(seed, k.bytes.data());
  std::array<unsigned char, 32> from_seed{};
  std::array<unsigned char, 64> sk2{};
  crypto_sign_seed_keypair(from_seed.data(), sk2.data(), seed);
  sodium_memzero(sk2.data(), sk2.size());
  sodium_memzero(seed, sizeof seed);
  if (derived != from_seed) {
    throw InvalidArgument(fmt::format("{}: the secret key in '{}' is damaged (its public half does not match its seed)",
                                      variable, shown_path(path)));
  }
  k.pub.bytes = derived;
  k.pub.id = key_id(derived);
  return k;
}

std::vector<PublicKey> read_public_keys(const std::string& path, std::string_view variable) {
  std::vector<PublicKey> keys;
  size_t n = 0;
  for (const std::string& line : key_lines(path, variable)) {
    ++n;
    PublicKey k;
    if (!from_hex(line, k.bytes.data(), k.bytes.size())) {
      // The line itself is never echoed: it may be a secret key given here by mistake.
      throw InvalidArgument(fmt::format("{}: '{}': key line {} is not a public key (64 hex digits, {} given){}",
                                        variable, shown_path(path), n, line.size(),
                                        line.size() == 128 ? "; 128 digits is a secret key: name the .pub file" : ""));
    }
    k.id = key_id(k.bytes);
    keys.push_back(k);
  }
  if (keys.empty()) throw InvalidArgument(fmt::format("{}: '{}' holds no public key", variable, shown_path(path)));
  return keys;
}

std::string sign(const SecretKey& key, std::string_view message) {
  init_sodium();
  std::string sig(kSignatureBytes, '\0');
  crypto_sign_detached(reinterpret_cast<unsigned char*>(sig.data()), nullptr,
                       reinterpret_cast<const unsigned char*>(message.data()), message.size(), key.bytes.data());
  return sig;
}

bool verify(const PublicKey& key, std::string_view message, std::string_view signature) {
  init_sodium();
  if (signature.size() != kSignatureBytes) return false;
  return crypto_sign_verify_detached(reinterpret_cast<const unsigned char*>(signature.data()),
                                     reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                                     key.bytes.data()) == 0;
}

}  // namespace kjit::cache::remote
