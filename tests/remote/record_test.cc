// The fleet tier's pieces without a server: the remote record format and its decoder, Ed25519
// keys and key files, the Redis key layout, the KJIT_REMOTE* configuration, and how messages
// echo what they were given (cache/echo.hpp).
#include "cache/echo.hpp"
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
  /// Writes a key file as `kjit remote keygen` does: mode 0600.
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    fs::permissions(dir_ / name, fs::perms::owner_read | fs::perms::owner_write);
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

TEST_F(KeyFiles, ASecretKeyOthersMayReadIsRefusedWithTheFix) {
  const SecretKey k = generate_key();
  const std::string text = secret_key_text(k);
  const std::string path = write("open.key", text);
  const std::string hex = text.substr(text.find('\n') + 1, 128);
  for (fs::perms extra : {fs::perms::group_read, fs::perms::others_read, fs::perms::group_write, fs::perms::others_exec}) {
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | extra);
    try {
      read_secret_key(path, "KJIT_REMOTE_SIGNING_KEY");
      ADD_FAILURE() << "a secret key of mode " << std::oct << static_cast<int>(fs::status(path).permissions())
                    << " was accepted";
    } catch (const kjit::InvalidArgument& e) {
      const std::string why = e.what();
      EXPECT_NE(why.find("KJIT_REMOTE_SIGNING_KEY"), std::string::npos) << why;
      EXPECT_NE(why.find("chmod 600 " + path), std::string::npos) << why;
      EXPECT_EQ(why.find(hex.substr(0, 16)), std::string::npos) << "the key itself is never shown: " << why;
    }
  }
  fs::permissions(path, fs::perms::owner_read);  // 0400 is private too
  EXPECT_EQ(read_secret_key(path, "V").bytes, k.bytes);
  // A path a shell would split is quoted in the fix.
  const std::string spaced = write("my key.key", text);
  fs::permissions(spaced, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  try {
    read_secret_key(spaced, "V");
    ADD_FAILURE() << "accepted";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("chmod 600 '" + spaced + "'"), std::string::npos) << e.what();
  }
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

TEST(Echo, ControlCharactersAreEscapedAndLongValuesCut) {
  EXPECT_EQ(printable("plain /path é"), "plain /path é");
  EXPECT_EQ(printable("a\nb\r\tc\x1b[2J\x7f"), "a\\nb\\r\\tc\\x1b[2J\\x7f");
  EXPECT_EQ(printable(std::string("nul\0", 4)), "nul\\x00");
  const std::string big(100000, 'h');
  const std::string cut = printable(big);
  EXPECT_EQ(cut, std::string(200, 'h') + "… (100000 bytes)");
  // Never inside an escape or a UTF-8 character.
  EXPECT_EQ(printable(std::string(199, 'x') + "\n", 200), std::string(199, 'x') + "… (200 bytes)");
  EXPECT_EQ(printable(std::string(199, 'x') + "é", 200), std::string(199, 'x') + "… (201 bytes)");
  EXPECT_EQ(shown_path(std::string(300, 'p')), std::string(300, 'p')) << "a path is shown whole up to PATH_MAX";
}

TEST(Echo, UrlsLoseTheirCredentialsWhateverTheirShape) {
  EXPECT_EQ(redact_url("redis://user:pw@host:1/0"), "redis://***@host:1/0");
  EXPECT_EQ(redact_url("rediss://:pw@cache:6379/0"), "rediss://***@cache:6379/0");
  EXPECT_EQ(redact_url("tcp://u:pw@cache"), "tcp://***@cache");
  EXPECT_EQ(redact_url("redis://:pw@"), "redis://***@");
  EXPECT_EQ(redact_url("redis//:pw@cache"), "redis//***@cache");
  EXPECT_EQ(redact_url("redis:/:pw@cache"), "redis:/***@cache");
  EXPECT_EQ(redact_url(" redis://:pw@cache"), " redis://***@cache");
  EXPECT_EQ(redact_url("redis://:p@ss/w@cache"), "redis://***@cache") << "the last '@' ends the credentials";
  EXPECT_EQ(redact_url("pw@cache"), "***@cache");
  EXPECT_EQ(redact_url("redis://:pw"), "redis://:***") << "a port that is no number may be a password";
  EXPECT_EQ(redact_url("redis://[::1]:6379/0"), "redis://[::1]:6379/0");
  EXPECT_EQ(redact_url("redis://cache?password=pw&db=2"), "redis://cache?password=***&db=2");
  EXPECT_EQ(redact_url("unix:///run/redis.sock?db=1"), "unix:///run/redis.sock?db=1");
  EXPECT_EQ(shown_url("redis://:pw@h\n"), "redis://***@h\\n");
}

TEST(RemoteConfig, ParsesIpv6Literals) {
  kjit::RemoteConfig c;
  c.parse_url("redis://[::1]:6380");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 6380);
  EXPECT_EQ(c.display(), "redis://[::1]:6380/0");
  c.parse_url("redis://:pw@[::1]:7000/2");
  EXPECT_EQ(c.host, "::1");
  EXPECT_EQ(c.port, 7000);
  EXPECT_EQ(c.db, 2);
  EXPECT_EQ(c.password, "pw");
  EXPECT_EQ(c.display(), "redis://[::1]:7000/2");
  c.parse_url("redis://[2001:db8::7]");
  EXPECT_EQ(c.host, "2001:db8::7");
  EXPECT_EQ(c.port, 6379);
  c.parse_url("redis://[fe80::1%eth0]:1/");
  EXPECT_EQ(c.host, "fe80::1%eth0");
  c.parse_url("redis://[::ffff:10.0.0.5]:6379");
  EXPECT_EQ(c.host, "::ffff:10.0.0.5");
  for (const char* bad : {"redis://::1:6379", "redis://[::1", "redis://[::1]6379", "redis://[::1]:", "redis://[]:1",
                          "redis://[zz::1]:1", "redis://[10.0.0.5]:1", "redis://[::1]:1:2", "redis://h:1:2",
                          "redis://h h:1", "redis://h%41", "redis://h:1/0/1"}) {
    kjit::RemoteConfig d;
    try {
      d.parse_url(bad);
      ADD_FAILURE() << bad << " was accepted as host '" << d.host << "' port " << d.port;
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("KJIT_REMOTE='"), std::string::npos) << e.what();
    }
  }
  // A host name longer than DNS allows is refused, not echoed whole.
  try {
    c.parse_url("redis://" + std::string(100000, 'h') + ":1");
    ADD_FAILURE() << "a 100 KB host name was accepted";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_LT(std::string(e.what()).size(), 700u) << e.what();
    EXPECT_NE(std::string(e.what()).find("(100010 bytes)"), std::string::npos) << e.what();
  }
}

// Every shape of a malformed KJIT_REMOTE that carries a password: refused, naming the variable,
// never showing the password.
TEST(RemoteConfig, NoMessageShowsThePassword) {
  const std::string pw = "S3cretPassw0rd";
  const std::vector<std::string> shapes = {
      "rediss://:" + pw + "@cache:6379/0", "tcp://user:" + pw + "@cache:6379", "redis://:" + pw + "@",
      "redis://:" + pw + "@/0",            "redis//:" + pw + "@cache:6379",    "redis:/:" + pw + "@cache:6379",
      " redis://:" + pw + "@cache:6379",   "redis://:" + pw + "@cache:6379 ",  "redis://:" + pw,
      "redis://user:" + pw + "@cache:port", "redis://:" + pw + "@cache/x",     "redis://:" + pw + "@cache:1\n",
      "redis://:" + pw + "@[::1",          "redis://cache?password=" + pw,     "unix://:" + pw + "@/run/r.sock",
      "redis://:" + pw + "@::1:6379",      "\tredis://:" + pw + "@cache"};
  for (const std::string& url : shapes) {
    kjit::RemoteConfig c;
    try {
      c.parse_url(url);
      ADD_FAILURE() << "accepted: " << printable(url);
    } catch (const kjit::InvalidArgument& e) {
      const std::string why = e.what();
      EXPECT_NE(why.find("KJIT_REMOTE"), std::string::npos) << why;
      EXPECT_EQ(why.find(pw), std::string::npos) << why;
      EXPECT_EQ(why.find('\n'), std::string::npos) << why;
    }
    // Through the environment, as every process reads it.
    setenv("KJIT_REMOTE", url.c_str(), 1);
    try {
      kjit::RuntimeConfig::from_env();
      ADD_FAILURE() << "accepted from the environment: " << printable(url);
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()).find(pw), std::string::npos) << e.what();
    }
    unsetenv("KJIT_REMOTE");
  }
}

TEST(RemoteConfig, TrustedKeysNeverTurnTrustOffByAccident) {
  setenv("KJIT_REMOTE", "unix:///tmp/r.sock", 1);
  for (const char* bad : {"", " ", ":", "::", ":::", "a.pub::b.pub", ":a.pub", "a.pub:", "a.pub: ", " :b.pub"}) {
    setenv("KJIT_REMOTE_TRUSTED_KEYS", bad, 1);
    try {
      const kjit::RemoteConfig c = kjit::RemoteConfig::from_env();
      ADD_FAILURE() << "KJIT_REMOTE_TRUSTED_KEYS='" << bad << "' was accepted as " << c.trusted_key_files.size()
                    << " files";
    } catch (const kjit::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("KJIT_REMOTE_TRUSTED_KEYS='"), std::string::npos) << e.what();
    }
  }
  setenv("KJIT_REMOTE_TRUSTED_KEYS", "/k/a.pub", 1);
  EXPECT_EQ(kjit::RemoteConfig::from_env().trusted_key_files, (std::vector<std::string>{"/k/a.pub"}));
  unsetenv("KJIT_REMOTE_TRUSTED_KEYS");
  EXPECT_TRUE(kjit::RemoteConfig::from_env().trusted_key_files.empty()) << "unset: no trust configured";
  unsetenv("KJIT_REMOTE");
}

TEST(RemoteConfig, EchoedValuesAreEscapedAndBounded) {
  setenv("KJIT_REMOTE", "unix:///tmp/r.sock", 1);
  setenv("KJIT_REMOTE_MODE", "ro\n\x1b[2Jkjit: fine", 1);
  try {
    kjit::RemoteConfig::from_env();
    ADD_FAILURE() << "accepted";
  } catch (const kjit::InvalidArgument& e) {
    const std::string why = e.what();
    EXPECT_NE(why.find("ro\\n\\x1b[2Jkjit: fine"), std::string::npos) << why;
    EXPECT_EQ(why.find_first_of("\n\x1b"), std::string::npos) << why;
  }
  unsetenv("KJIT_REMOTE_MODE");
  const std::string big = std::string(100000, 'n') + "{";
  setenv("KJIT_REMOTE_NAMESPACE", big.c_str(), 1);
  try {
    kjit::RemoteConfig::from_env();
    ADD_FAILURE() << "accepted";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u);
    EXPECT_NE(std::string(e.what()).find("… (100001 bytes)"), std::string::npos) << e.what();
  }
  unsetenv("KJIT_REMOTE_NAMESPACE");
  setenv("KJIT_REMOTE_TIMEOUT_MS", "5\x1b]0;pwned\x07", 1);
  try {
    kjit::RemoteConfig::from_env();
    ADD_FAILURE() << "accepted";
  } catch (const kjit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("5\\x1b]0;pwned\\x07"), std::string::npos) << e.what();
  }
  unsetenv("KJIT_REMOTE_TIMEOUT_MS");
  unsetenv("KJIT_REMOTE");
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
  // KJIT_TUNING is read with the rest, once, and a typo is no silent "on".
  for (const char* off : {"off", "0", "false"}) {
    setenv("KJIT_TUNING", off, 1);
    EXPECT_FALSE(kjit::RuntimeConfig::from_env().tuning) << off;
  }
  setenv("KJIT_TUNING", "on", 1);
  EXPECT_TRUE(kjit::RuntimeConfig::from_env().tuning);
  setenv("KJIT_TUNING", "of", 1);
  EXPECT_THROW(kjit::RuntimeConfig::from_env(), kjit::InvalidArgument);
  unsetenv("KJIT_TUNING");
  EXPECT_TRUE(kjit::RuntimeConfig::from_env().tuning);
}

}  // namespace
