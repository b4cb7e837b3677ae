// The fleet tier's pieces without a server: the remote record format and its decoder, Ed25519
// keys and key files, the Redis key layout, and the KJIT_REMOTE* configuration.
#include "cache/remote/record.hpp"
#include "tests/cache/cache_test_util.hpp"
#include "cache/remote/signing.hpp"
#include "cache/remote/tier.hpp"

#include <kjit/error.hpp>
#include <kjit/remote.hpp>
#include <kjit/runtime.hpp>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace {

namespace fs = std::filesystem;
using namespace kjit::cache;
using namespace kjit::cache::remote;

Entry sample() {
  Entry e;
  e.key = KeyBuilder().add("remote", "sample").finish();
  e.meta.family = "demo";
  e.meta.target = "sm_89";
  e.meta.kernels.push_back({"k<1>", "_Z1kILi1EEvv", 8, 0, 0});
  e.meta.nvrtc_version = "13.0";
  e.payload = std::string(300, 'c');
  return e;
}

std::optional<Record> decode(std::string_view bytes, const Key& key, const std::vector<PublicKey>& trusted,
                             Rejection* why) {
  return decode_record(bytes, key, trusted, why);
}

TEST(RemoteRecord, RoundTripsSignedAndUnsigned) {
  const Entry e = sample();
  const SecretKey k = generate_key();
  for (const SecretKey* signer : {static_cast<const SecretKey*>(nullptr), &k}) {
    const std::string v = encode_record(RecordKind::kEntry, e.key, encode(e), signer);
    Rejection why;
    auto r = decode(v, e.key, signer ? std::vector<PublicKey>{k.pub} : std::vector<PublicKey>{}, &why);
    ASSERT_TRUE(r) << rejection_name(why);
    EXPECT_EQ(why, Rejection::kNone);
    EXPECT_EQ(r->kind, RecordKind::kEntry);
    EXPECT_EQ(r->signer, signer ? k.pub.id : 0u);
    ASSERT_TRUE(r->entry);
    EXPECT_EQ(r->entry->payload, e.payload);
    EXPECT_EQ(r->entry->meta.kernels[0].lowered_name, "_Z1kILi1EEvv");
  }
}

TEST(RemoteRecord, EveryDamagedByteIsRefused) {
  const Entry e = sample();
  const SecretKey k = generate_key();
  const std::string v = encode_record(RecordKind::kEntry, e.key, encode(e), &k);
  for (size_t i = 0; i < v.size(); ++i) {
    std::string bad = v;
    bad[i] ^= 0x01;
    Rejection why;
    EXPECT_FALSE(decode(bad, e.key, {k.pub}, &why)) << "byte " << i;
    EXPECT_NE(why, Rejection::kNone);
  }
  for (size_t n = 0; n < v.size(); n += 7) {
    Rejection why;
    EXPECT_FALSE(decode(v.substr(0, n), e.key, {k.pub}, &why)) << "truncated to " << n;
    EXPECT_EQ(why, Rejection::kCorrupt);
  }
  Rejection why;
  EXPECT_FALSE(decode(v + "x", e.key, {k.pub}, &why));
  EXPECT_EQ(why, Rejection::kCorrupt);
}

TEST(RemoteRecord, TrustRejectionsSayWhy) {
  const Entry e = sample();
  const SecretKey fleet = generate_key(), rogue = generate_key();
  const std::string body = encode(e);
  Rejection why;
  EXPECT_FALSE(decode(encode_record(RecordKind::kEntry, e.key, body, nullptr), e.key, {fleet.pub}, &why));
  EXPECT_EQ(why, Rejection::kUnsigned);
  EXPECT_FALSE(decode(encode_record(RecordKind::kEntry, e.key, body, &rogue), e.key, {fleet.pub}, &why));
  EXPECT_EQ(why, Rejection::kUntrusted);
  // A rogue signature under the fleet key's id.
  SecretKey forger = rogue;
  forger.pub.id = fleet.pub.id;
  EXPECT_FALSE(decode(encode_record(RecordKind::kEntry, e.key, body, &forger), e.key, {fleet.pub}, &why));
  EXPECT_EQ(why, Rejection::kBadSignature);
  EXPECT_TRUE(is_trust_rejection(Rejection::kBadSignature));
  // Several trusted keys: the signer's id picks the one to verify with.
  EXPECT_TRUE(decode(encode_record(RecordKind::kEntry, e.key, body, &rogue), e.key, {fleet.pub, rogue.pub}, &why));
}

TEST(RemoteRecord, AValueUnderAnotherKeyIsForeign) {
  const Entry e = sample();
  Key other = e.key;
  other.hi ^= 1;
  Rejection why;
  EXPECT_FALSE(decode(encode_record(RecordKind::kEntry, e.key, encode(e), nullptr), other, {}, &why));
  EXPECT_EQ(why, Rejection::kForeign);
  // The framing names the right key but the entry inside names another: corrupt.
  EXPECT_FALSE(decode(encode_record(RecordKind::kEntry, other, encode(e), nullptr), other, {}, &why));
  EXPECT_EQ(why, Rejection::kCorrupt);
}

TEST(RemoteRecord, FailuresRoundTrip) {
  const Key key = sample().key;
  const Failure f{"kjit: NVRTC failed\nline 2", std::string("log with \xff byte"), {"-arch=sm_89", "-DX=1"}};
  Rejection why;
  auto r = decode(encode_record(RecordKind::kFailure, key, encode_failure(f), nullptr), key, {}, &why);
  ASSERT_TRUE(r) << rejection_name(why);
  ASSERT_TRUE(r->failure);
  EXPECT_EQ(r->failure->message, f.message);
  EXPECT_EQ(r->failure->options, f.options);
  EXPECT_FALSE(decode(encode_record(RecordKind::kFailure, key, "{}", nullptr), key, {}, &why));
  EXPECT_EQ(why, Rejection::kCorrupt);
}

TEST(RemoteRecord, ATuningTableKeepsItsBodyForItsReader) {
  const Key key = sample().key;
  const SecretKey k = generate_key();
  Rejection why;
  auto r = decode(encode_record(RecordKind::kTuneTable, key, "{\"format\": \"kjit-tuning\"}", &k), key, {k.pub}, &why);
  ASSERT_TRUE(r) << rejection_name(why);
  EXPECT_EQ(r->kind, RecordKind::kTuneTable);
  EXPECT_FALSE(r->entry);
  EXPECT_FALSE(r->failure);
  EXPECT_EQ(r->body, "{\"format\": \"kjit-tuning\"}");
}

TEST(RemoteRecord, OneEntrysKeysShareAHashTag) {
  const SlotKeys k = slot_keys("fleet", sample().key);
  const std::string tag = "{fleet:" + sample().key.hex() + "}";
  EXPECT_EQ(k.value, tag + ":v");
  EXPECT_EQ(k.lease, tag + ":lease");
  EXPECT_EQ(k.failure, tag + ":fail");
}

class KeyFiles : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  kjit::cache::testing::TempDir tmp_;
  fs::path dir_{tmp_.path()};
};

TEST_F(KeyFiles, RoundTripAndSign) {
  const SecretKey k = generate_key();
  const SecretKey read = read_secret_key(write("a.key", secret_key_text(k)), "VAR");
  EXPECT_EQ(read.bytes, k.bytes);
  EXPECT_EQ(read.pub.id, k.pub.id);
  const SecretKey other = generate_key();
  const auto pubs = read_public_keys(write("a.pub", public_key_text(k.pub) + "\n" + public_key_text(other.pub)), "VAR");
  ASSERT_EQ(pubs.size(), 2u);
  EXPECT_EQ(pubs[0].bytes, k.pub.bytes);
  const std::string sig = sign(read, "message");
  EXPECT_TRUE(verify(pubs[0], "message", sig));
  EXPECT_FALSE(verify(pubs[1], "message", sig));
  EXPECT_FALSE(verify(pubs[0], "messagE", sig));
}

TEST_F(KeyFiles, BadFilesNameTheVariableAndPath) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const kjit::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string missing = (dir_ / "missing.key").string();
  EXPECT_NE(message([&] { read_secret_key(missing, "KJIT_REMOTE_SIGNING_KEY"); }).find("KJIT_REMOTE_SIGNING_KEY key file " + missing), std::string::npos);
  // A FIFO is refused by its path, never opened (opening it would block until a writer came);
  // a folder says so.
  const std::string fifo = (dir_ / "keys.fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(message([&] { read_public_keys(fifo, "KJIT_REMOTE_TRUSTED_KEYS"); }).find("is not a regular file"), std::string::npos);
  EXPECT_NE(message([&] { read_secret_key(fifo, "KJIT_REMOTE_SIGNING_KEY"); }).find("is not a regular file"), std::string::npos);
  EXPECT_NE(message([&] { read_public_keys(dir_.string(), "KJIT_REMOTE_TRUSTED_KEYS"); }).find("is a folder"), std::string::npos);
  const std::string junk = write("junk.pub", "not a key\n");
  EXPECT_NE(message([&] { read_public_keys(junk, "KJIT_REMOTE_TRUSTED_KEYS"); }).find("KJIT_REMOTE_TRUSTED_KEYS: '" + junk), std::string::npos);
  // A secret key given as a trusted key by mistake: the error never echoes the key material.
  const SecretKey secret = generate_key();
  const std::string text = secret_key_text(secret);
  const std::string as_trusted = write("fleet.key", text);
  const std::string why = message([&] { read_public_keys(as_trusted, "KJIT_REMOTE_TRUSTED_KEYS"); });
  EXPECT_NE(why.find("secret key"), std::string::npos) << why;
  for (const std::string& line : {text.substr(0, 16), text.substr(text.size() / 2, 16)}) {
    EXPECT_EQ(why.find(line), std::string::npos) << why;
  }
  const std::string empty = write("empty.pub", "# nothing\n\n");
  EXPECT_NE(message([&] { read_public_keys(empty, "V"); }).find("holds no public key"), std::string::npos);
  // A secret key whose public half was swapped for another key's.
  SecretKey k = generate_key();
  const SecretKey other = generate_key();
  std::copy(other.pub.bytes.begin(), other.pub.bytes.end(), k.bytes.begin() + 32);
  const std::string swapped = write("swapped.key", secret_key_text(k));
  EXPECT_NE(message([&] { read_secret_key(swapped, "V"); }).find("damaged"), std::string::npos);
}

TEST(RemoteConfig, ParsesUrls) {
  kjit::RemoteConfig c;
  c.parse_url("redis://cache.internal:6380/2");
  EXPECT_EQ(c.host, "cache.internal");
  EXPECT_EQ(c.port, 6380);
  EXPECT_EQ(c.db, 2);
  c.parse_url("redis://builder:s3cr:t@10.0.0.5");
  EXPECT_EQ(c.host, "10.0.0.5");
  EXPECT_EQ(c.port, 6379);
  EXPECT_EQ(c.user, "builder");
  EXPECT_EQ(c.password, "s3cr:t");
  EXPECT_EQ(c.display(), "redis://10.0.0.5:6379/0");  // what messages print: never the password
  c = {};
  c.parse_url("redis://:pw@h:1/");
  EXPECT_EQ(c.user, "");
  EXPECT_EQ(c.password, "pw");
  c.parse_url("unix:///run/redis/redis.sock?db=3");
  EXPECT_EQ(c.socket_path, "/run/redis/redis.sock");
  EXPECT_EQ(c.db, 3);
  EXPECT_TRUE(c.host.empty());
  for (const char* bad : {"http://h", "redis://", "redis://h:0", "redis://h:99999", "redis://h/x", "unix://relative.sock",
                          "unix:///s.sock?database=1"}) {
    kjit::RemoteConfig d;
    try {
      d.parse_url(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("KJIT_REMOTE"), std::string::npos) << e.what();
    }
  }
}

TEST(RemoteConfig, FromEnvNamesTheVariable) {
  setenv("KJIT_REMOTE", "unix:///tmp/r.sock", 1);
  setenv("KJIT_REMOTE_MODE", "ro", 1);
  setenv("KJIT_REMOTE_TRUSTED_KEYS", "/a.pub:/b.pub", 1);
  kjit::RemoteConfig c = kjit::RemoteConfig::from_env();
  EXPECT_TRUE(c.enabled());
  EXPECT_EQ(c.mode, kjit::RemoteMode::kReadOnly);
  EXPECT_EQ(c.trusted_key_files, (std::vector<std::string>{"/a.pub", "/b.pub"}));
  setenv("KJIT_REMOTE_MODE", "rw", 1);
  for (auto [var, value] : {std::pair{"KJIT_REMOTE_MODE", "readonly"}, std::pair{"KJIT_REMOTE_TIMEOUT_MS", "5ms"},
                            std::pair{"KJIT_REMOTE_LEASE_MS", "1"}, std::pair{"KJIT_REMOTE_NAMESPACE", "a{b}"},
                            std::pair{"KJIT_REMOTE_MAX_VALUE_BYTES", "lots"},
                            std::pair{"KJIT_REMOTE_PASSWORD_FILE", "/nonexistent/pw"}}) {
    setenv(var, value, 1);
    try {
      kjit::RemoteConfig::from_env();
      ADD_FAILURE() << var << "=" << value << " was accepted";
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
    }
    unsetenv(var);
  }
  // A password file that is a FIFO is refused by its path (reading it would block), with the reason.
  const std::string fifo = (std::filesystem::temp_directory_path() / ("kjit-pw-fifo-" + std::to_string(getpid()))).string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  setenv("KJIT_REMOTE_PASSWORD_FILE", fifo.c_str(), 1);
  try {
    kjit::RemoteConfig::from_env();
    ADD_FAILURE() << "a FIFO password file was accepted";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("KJIT_REMOTE_PASSWORD_FILE " + fifo + " is not a regular file"), std::string::npos)
        << e.what();
  }
  unsetenv("KJIT_REMOTE_PASSWORD_FILE");
  std::filesystem::remove(fifo);
  unsetenv("KJIT_REMOTE");
  // Without a tier the keys are still read: OCI images of the cache are signed and checked with them.
  setenv("KJIT_REMOTE_SIGNING_KEY", "/s.key", 1);
  const kjit::RemoteConfig off = kjit::RemoteConfig::from_env();
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.trusted_key_files, (std::vector<std::string>{"/a.pub", "/b.pub"}));
  EXPECT_EQ(off.signing_key_file, "/s.key");
  unsetenv("KJIT_REMOTE_SIGNING_KEY");
  unsetenv("KJIT_REMOTE_TRUSTED_KEYS");
  EXPECT_FALSE(kjit::RemoteConfig::from_env().enabled());
  setenv("KJIT_RECORD", "remote:", 1);
  EXPECT_THROW(kjit::RuntimeConfig::from_env(), kjit::InvalidArgument) << "recording into a tier that is not set";
  unsetenv("KJIT_RECORD");
}

}  // namespace
