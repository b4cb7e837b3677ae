#pragma once
/// \file remote/signing.hpp
/// Ed25519 keys of the fleet tier (libsodium): generating them, their files, signing and
/// verifying remote records. Writers (builders) hold a secret key; readers trust a set of public
/// keys and load nothing that is not signed by one of them.
///
/// Key files are text; blank lines and lines starting with '#' are ignored.
///   - secret key file: one line, 128 lower-case hex digits (libsodium's 64-byte secret key, which
///     holds the public key in its last 32 bytes). Keep it mode 0600 on builders only.
///   - public key file: one key per line, 64 hex digits each; several files may be trusted.
/// A key's id is the first 8 bytes of BLAKE2b-128 over its public key: records name their signer
/// by id, so a reader trusting many keys verifies with the right one.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kjit::cache::remote {

/// An Ed25519 public key and its id.
struct PublicKey {
  std::array<unsigned char, 32> bytes{};
  uint64_t id = 0;
};

/// An Ed25519 secret key (libsodium layout: seed then public key) and its public half.
struct SecretKey {
  std::array<unsigned char, 64> bytes{};
  PublicKey pub;
};

/// Size of a detached signature in bytes.
inline constexpr size_t kSignatureBytes = 64;

/// A fresh key pair from the OS random source.
SecretKey generate_key();
/// The key pair of a 32-byte seed (deterministic: for tests and fuzzing, never for a fleet).
SecretKey key_from_seed(const std::array<unsigned char, 32>& seed);
/// The id of `key`: the first 8 bytes of BLAKE2b-128(key), little-endian. Never 0 in practice;
/// 0 marks an unsigned record.
uint64_t key_id(const std::array<unsigned char, 32>& key);

/// The text of a secret / public key file (with a '#' comment line naming the key id).
std::string secret_key_text(const SecretKey& key);
std::string public_key_text(const PublicKey& key);

/// Reads a secret key file. Throws InvalidArgument naming `variable` and `path` when it cannot
/// be read, holds no key, or the key's halves do not belong together.
SecretKey read_secret_key(const std::string& path, std::string_view variable);
/// Reads every public key of a file. Throws InvalidArgument naming `variable` and `path` when it
/// cannot be read, a line is not a key, or it holds none.
std::vector<PublicKey> read_public_keys(const std::string& path, std::string_view variable);

/// The detached signature (kSignatureBytes) of `message` by `key`.
std::string sign(const SecretKey& key, std::string_view message);
/// Whether `signature` is `key`'s signature of `message`.
bool verify(const PublicKey& key, std::string_view message, std::string_view signature);

}  // namespace kjit::cache::remote
