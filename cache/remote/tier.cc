// The fleet tier (remote/tier.hpp): lookups, the cross-host lease, publishing.
#include "cache/remote/tier.hpp"

#include "cache/warn.hpp"

#include <kjit/error.hpp>

#include <fmt/format.h>
#include <sodium.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace kjit::cache::remote {
namespace {

// Deletes the lease only while it still holds our token: an owner whose lease expired must not
// free the lease of the host that took over.
constexpr std::string_view kReleaseScript =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

std::string new_token() {
  unsigned char bytes[16];
  randombytes_buf(bytes, sizeof bytes);
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

}  // namespace

std::string manifest_key(const std::string& ns) { return fmt::format("{{{}}}:manifest", ns); }

SlotKeys slot_keys(const std::string& ns, const Key& key) {
  const std::string tag = fmt::format("{{{}:{}}}", ns, key.hex());
  return {tag + ":v", tag + ":lease", tag + ":fail"};
}

RemoteTier::RemoteTier(const RemoteConfig& config, Caller caller) : client_(config, caller) {
  if (sodium_init() < 0) throw Error("kjit: libsodium could not be initialized (no random source?)");
  for (const std::string& file : config.trusted_key_files) {
    for (const PublicKey& k : read_public_keys(file, "KJIT_REMOTE_TRUSTED_KEYS")) trusted_.push_back(k);
  }
  if (!config.signing_key_file.empty()) signer_ = read_secret_key(config.signing_key_file, "KJIT_REMOTE_SIGNING_KEY");
}

bool RemoteTier::may_write() const noexcept {
  return config().mode == RemoteMode::kReadWrite && (signer_ || trusted_.empty());
}

TierCounters RemoteTier::counters() const {
  TierCounters c;
  c.hits = hits_.load();
  c.misses = misses_.load();
  c.errors = client_.faults();
  c.lease_waits = lease_waits_.load();
  c.rejected_signatures = rejected_signatures_.load();
  c.rejected = rejected_.load();
  c.publishes = publishes_.load();
  c.round_trips = client_.round_trips();
  return c;
}

std::optional<Record> RemoteTier::accept(const Key& key, std::string_view bytes, RecordKind kind) {
  Rejection why = Rejection::kNone;
  std::string note;
  std::optional<Record> r;
  if (bytes.size() > config().max_value_bytes) {
    why = Rejection::kCorrupt;
    note = fmt::format("{} bytes, over KJIT_REMOTE_MAX_VALUE_BYTES", bytes.size());
  } else {
    r = decode_record(bytes, key, trusted_, &why, &note);
    if (r && r->kind != kind) {
      why = Rejection::kCorrupt;
      note = "a record of the wrong kind";
      r.reset();
    }
  }
  if (r) return r;
  bool first = false;
  {
    std::lock_guard lock(warned_mutex_);
    first = warned_.insert(key.hex()).second;
  }
  // Once per key and process, like the warning: a builder that reads the value again under its
  // lease to replace it has not met a second bad value.
  if (first) {
    rejected_.fetch_add(1, std::memory_order_relaxed);
    if (is_trust_rejection(why)) rejected_signatures_.fetch_add(1, std::memory_order_relaxed);
    warn(fmt::format("remote cache {}: the {} of {} was rejected ({}: {}); it is not loaded{}", client_.where(),
                     kind == RecordKind::kEntry ? "entry" : "failure record", key.hex(), rejection_name(why), note,
                     client_.caller() == Caller::kOps ? " (the op uses the disk cache or a local compile)" : ""));
  }
  return std::nullopt;
}

std::optional<Entry> RemoteTier::accept_entry(const Key& key, std::string_view bytes) {
  std::optional<Record> r = accept(key, bytes, RecordKind::kEntry);
  if (!r) return std::nullopt;
  return std::move(r->entry);
}

RemoteTier::Lookup RemoteTier::fetch(const Key& key) {
  const SlotKeys k = slot_keys(config().ns, key);
  const std::string ttl = std::to_string(config().ttl_s);
  // A read-only host changes nothing, not even a TTL: its ACL may allow only reads.
  std::optional<Reply> r = config().mode == RemoteMode::kReadWrite ? client_.command({"GETEX", k.value, "EX", ttl})
                                                                   : client_.command({"GET", k.value});
  Lookup out;
  if (!r) {
    out.found = Found::kFault;
  } else if (r->type != Reply::Type::kString) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    out.found = Found::kMiss;
  } else if ((out.entry = accept_entry(key, r->str))) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    out.found = Found::kEntry;
  } else {
    misses_.fetch_add(1, std::memory_order_relaxed);
    out.found = Found::kRejected;
  }
  return out;
}

bool RemoteTier::record_manifest_line(const std::string& line) {
  return client_.command({"SADD", manifest_key(config().ns), line}).has_value();
}

std::vector<std::string> RemoteTier::manifest_lines() {
  const Reply r = call({"SMEMBERS", manifest_key(config().ns)});
  std::vector<std::string> lines;
  for (const Reply& e : r.elements) lines.push_back(e.str);
  std::sort(lines.begin(), lines.end());
  return lines;
}

void RemoteTier::release(const SlotKeys& keys, const std::string& token) {
  client_.command({"EVAL", kReleaseScript, "1", keys.lease, token});
}

bool RemoteTier::publish(const Entry& entry, bool replace) {
  if (!may_write()) return false;
  const std::string value = encode_record(RecordKind::kEntry, entry.key, encode(entry), signer());
  if (value.size() > config().max_value_bytes) {
    std::lock_guard lock(warned_mutex_);
    if (warned_.insert("size:" + entry.key.hex()).second) {
      warn(fmt::format("remote cache {}: entry {} is {} bytes, over KJIT_REMOTE_MAX_VALUE_BYTES={}; not published",
                       client_.where(), entry.key.hex(), value.size(), config().max_value_bytes));
    }
    return false;
  }
  const SlotKeys k = slot_keys(config().ns, entry.key);
  const std::string ttl = std::to_string(config().ttl_s);
  std::optional<Reply> r = replace ? client_.command({"SET", k.value, value, "EX", ttl})
                                   : client_.command({"SET", k.value, value, "NX", "EX", ttl});
  const bool written = r && r->type == Reply::Type::kStatus;
  if (written) publishes_.fetch_add(1, std::memory_order_relaxed);
  return written;
}

bool RemoteTier::publish_failure(const Key& key, const Failure& failure) {
  if (!may_write()) return false;
  const std::string value = encode_record(RecordKind::kFailure, key, encode_failure(failure), signer());
  if (value.size() > config().max_value_bytes) return false;
  const SlotKeys k = slot_keys(config().ns, key);
  std::optional<Reply> r =
      client_.command({"SET", k.failure, value, "NX", "EX", std::to_string(config().failure_ttl_s)});
  return r && r->type == Reply::Type::kStatus;
}

Entry RemoteTier::obtain(const Key& key, const std::function<bool(const Entry&)>& usable,
                         const std::function<Entry()>& compile, bool* compiled) {
  using Clock = std::chrono::steady_clock;
  *compiled = false;
  auto local = [&] {
    *compiled = true;
    return compile();
  };
  const SlotKeys k = slot_keys(config().ns, key);
  const bool rw = may_write();
  const std::string token = rw ? new_token() : std::string();
  const std::string lease_ms = std::to_string(config().lease_ms);
  bool waited = false;
  Clock::time_point deadline{};
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    bool owner = false;
    if (rw) {
      std::optional<Reply> r = client_.command({"SET", k.lease, token, "NX", "PX", lease_ms});
      if (!r) return local();
      owner = r->type == Reply::Type::kStatus;
    }
    // The owner's second look: another host may have published between our miss and our lease.
    std::optional<Reply> r = client_.command({"MGET", k.value, k.failure});
    if (!r || r->type != Reply::Type::kArray || r->elements.size() != 2) {
      if (owner) release(k, token);
      return local();
    }
    bool bad_value = false;
    if (r->elements[0].type == Reply::Type::kString) {
      std::optional<Entry> e = accept_entry(key, r->elements[0].str);
      if (e && usable(*e)) {
        if (owner) release(k, token);
        hits_.fetch_add(1, std::memory_order_relaxed);
        return std::move(*e);
      }
      bad_value = true;
      // Write-once: only a signing builder, under the lease, may replace a bad value.
      if (!owner || !signer_) {
        if (owner) release(k, token);
        return local();
      }
    } else if (r->elements[1].type == Reply::Type::kString) {
      std::optional<Record> f = accept(key, r->elements[1].str, RecordKind::kFailure);
      if (owner) release(k, token);
      if (!f) return local();
      hits_.fetch_add(1, std::memory_order_relaxed);
      throw CompileError(fmt::format("{}\n(recorded by the fleet tier: another host's compile of {} failed; "
                                     "it is not retried until the record expires)",
                                     f->failure->message, key.hex()),
                         f->failure->log, f->failure->options);
    }
    if (owner) {
      Entry e;
      try {
        e = local();
      } catch (const CompileError& err) {
        publish_failure(key, {err.what(), err.log(), err.options()});
        release(k, token);
        throw;
      } catch (...) {
        release(k, token);
        throw;
      }
      publish(e, bad_value);
      release(k, token);
      return e;
    }
    if (!rw) {
      // A read-only host waits only while a writer's lease says an entry is coming.
      std::optional<Reply> t = client_.command({"PTTL", k.lease});
      if (!t || t->type != Reply::Type::kInteger || t->integer <= 0) return local();
    }
    const Clock::time_point now = Clock::now();
    if (!waited) {
      waited = true;
      lease_waits_.fetch_add(1, std::memory_order_relaxed);
      // The lease bounds the wait: when it lapses we take it over (or, read-only, compile).
      deadline = now + std::chrono::milliseconds(config().lease_ms) + std::chrono::milliseconds(100);
    }
    if (now > deadline) {
      warn(fmt::format("remote cache {}: waited {} ms on the lease of {} without an entry; compiling locally",
                       client_.where(), config().lease_ms, key.hex()));
      return local();
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace kjit::cache::remote
