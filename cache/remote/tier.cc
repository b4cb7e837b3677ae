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

// A bounded read of one value (ARGV[1]: the cap): nil when there is none, its length (an
// integer) when it is over the cap, so its bytes never leave the server, else its bytes. An
// empty value is returned as it is (it is junk to refuse, not a miss).
#define KJIT_BOUNDED_LUA                                        \
  "local function bounded(k, ttl) "                            \
  "local n = redis.call('strlen', k) "                          \
  "if n > tonumber(ARGV[1]) then return n end "                 \
  "if n > 0 and ttl ~= '' then return redis.call('getex', k, 'EX', ttl) end " \
  "return redis.call('get', k) end "

// fetch() on a read-write host: KEYS[1] the value; ARGV[2] the TTL to refresh it to.
constexpr std::string_view kFetchScript = KJIT_BOUNDED_LUA "return bounded(KEYS[1], ARGV[2])";

// A read-write host's claim: takes the lease (KEYS[3]) for ARGV[2] (the token) for ARGV[3] ms
// unless a live one exists, and reads the value (KEYS[1]) and the failure record (KEYS[2]),
// bounded. Returns {1 if the lease is ours, value, failure}. A claim sent again after a lost
// reply finds its own token and is the owner still.
constexpr std::string_view kClaimScript = KJIT_BOUNDED_LUA
    "local owner = 0 "
    "if redis.call('set', KEYS[3], ARGV[2], 'NX', 'PX', ARGV[3]) or redis.call('get', KEYS[3]) == ARGV[2] then "
    "owner = 1 end "
    "return {owner, bounded(KEYS[1], ''), bounded(KEYS[2], '')}";
#undef KJIT_BOUNDED_LUA

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
  c.oversized = oversized_.load();
  c.round_trips = client_.round_trips();
  return c;
}

std::optional<Record> RemoteTier::accept(const Key& key, std::string_view bytes, RecordKind kind) {
  Rejection why = Rejection::kNone;
  std::string note;
  std::optional<Record> r;
  if (bytes.size() > config().max_value_bytes) {
    why = Rejection::kOversized;
    note = fmt::format("{} bytes, over KJIT_REMOTE_MAX_VALUE_BYTES={}", bytes.size(), config().max_value_bytes);
  } else {
    r = decode_record(bytes, key, trusted_, &why, &note);
    if (r && r->kind != kind) {
      why = Rejection::kCorrupt;
      note = "a record of the wrong kind";
      r.reset();
    }
  }
  if (!r) refuse(key, kind, why, note);
  return r;
}

std::optional<Record> RemoteTier::take(const Key& key, const Reply& slot, RecordKind kind) {
  if (slot.type == Reply::Type::kString) return accept(key, slot.str, kind);
  if (slot.type == Reply::Type::kInteger) {
    refuse(key, kind, Rejection::kOversized, oversized_note(static_cast<uint64_t>(slot.integer)));
  }
  return std::nullopt;
}

std::string RemoteTier::oversized_note(uint64_t bytes) const {
  return fmt::format("{} bytes, over KJIT_REMOTE_MAX_VALUE_BYTES={}; not downloaded", bytes, config().max_value_bytes);
}

void RemoteTier::refuse(const Key& key, RecordKind kind, Rejection why, const std::string& note) {
  if (!count_refusal(key.hex(), why)) return;
  warn(fmt::format("remote cache {}: the {} of {} was rejected ({}: {}); it is not loaded{}", client_.where(),
                   kind == RecordKind::kEntry ? "entry" : "failure record", key.hex(), rejection_name(why), note,
                   client_.caller() == Caller::kOps ? " (the op uses the disk cache or a local compile)" : ""));
}

bool RemoteTier::count_refusal(const std::string& what, Rejection why) {
  {
    std::lock_guard lock(warned_mutex_);
    // Once per key and process, like the warning: a builder that reads the value again under its
    // lease to replace it has not met a second bad value.
    if (!warned_.insert(what).second) return false;
  }
  rejected_.fetch_add(1, std::memory_order_relaxed);
  if (is_trust_rejection(why)) rejected_signatures_.fetch_add(1, std::memory_order_relaxed);
  if (why == Rejection::kOversized) oversized_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::optional<Reply> RemoteTier::read_range(const std::string& redis_key, long long length, std::string head) {
  const uint64_t cap = config().max_value_bytes;
  Reply out;
  if (length <= 0) return out;  // none (or empty: nothing a read-only host could replace)
  if (static_cast<uint64_t>(length) > cap) {
    out.type = Reply::Type::kInteger;
    out.integer = length;
    return out;
  }
  if (head.size() != static_cast<uint64_t>(length)) {
    // The rest, with GETRANGE rather than GET: a value swapped for a larger one since the STRLEN
    // still costs at most cap + 1 bytes in all.
    std::optional<Reply> r = client_.command({"GETRANGE", redis_key, std::to_string(head.size()), std::to_string(cap)});
    if (!r) return std::nullopt;
    if (r->type == Reply::Type::kString) head += r->str;
  }
  if (head.empty()) return out;  // deleted meanwhile
  if (head.size() > cap) {
    out.type = Reply::Type::kInteger;
    out.integer = static_cast<long long>(head.size());
    return out;
  }
  out.type = Reply::Type::kString;
  out.str = std::move(head);
  return out;
}

std::optional<Reply> RemoteTier::read_bounded(const std::string& redis_key, bool refresh_ttl) {
  const uint64_t cap = config().max_value_bytes;
  if (refresh_ttl) {
    return client_.command({"EVAL", kFetchScript, "1", redis_key, std::to_string(cap), std::to_string(config().ttl_s)});
  }
  // A read-only host changes nothing, not even a TTL (its ACL may allow only reads), and sends
  // no script. Its length and its first bytes in one round trip: a value up to kPrefetchBytes
  // needs no other.
  const uint64_t first = std::min<uint64_t>(kPrefetchBytes, cap + 1);
  std::optional<std::vector<Reply>> r =
      client_.pipeline({{"STRLEN", redis_key}, {"GETRANGE", redis_key, "0", std::to_string(first - 1)}});
  if (!r || r->size() != 2 || (*r)[0].type != Reply::Type::kInteger) return std::nullopt;
  return read_range(redis_key, (*r)[0].integer, std::move((*r)[1].str));
}

RemoteTier::Lookup RemoteTier::fetch(const Key& key) {
  const SlotKeys k = slot_keys(config().ns, key);
  std::optional<Reply> r = read_bounded(k.value, config().mode == RemoteMode::kReadWrite);
  Lookup out;
  if (!r) {
    out.found = Found::kFault;
  } else if (r->nil()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    out.found = Found::kMiss;
  } else if (std::optional<Record> rec = take(key, *r, RecordKind::kEntry)) {
    out.entry = std::move(rec->entry);
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
  const std::string cap = std::to_string(config().max_value_bytes);
  // The wait follows the lease (while anyone holds a live one, an entry is coming), up to this.
  const Clock::time_point give_up = Clock::now() + std::chrono::milliseconds(config().max_wait_ms);
  bool waited = false;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    bool owner = false;
    Reply value, failure;
    long long lease_left = 0;  // read-only: the lease's PTTL
    if (rw) {
      // Lease and second look in one round trip: another host may have published between our
      // miss and our lease.
      std::optional<Reply> r = client_.command({"EVAL", kClaimScript, "3", k.value, k.failure, k.lease, cap, token, lease_ms});
      if (!r || r->type != Reply::Type::kArray || r->elements.size() != 3) return local();
      owner = r->elements[0].type == Reply::Type::kInteger && r->elements[0].integer == 1;
      value = std::move(r->elements[1]);
      failure = std::move(r->elements[2]);
    } else {
      std::optional<std::vector<Reply>> r = client_.pipeline({{"STRLEN", k.value}, {"STRLEN", k.failure}, {"PTTL", k.lease}});
      if (!r || r->size() != 3) return local();
      std::optional<Reply> v = read_range(k.value, (*r)[0].integer);
      if (!v) return local();
      value = std::move(*v);
      if (value.nil()) {
        std::optional<Reply> f = read_range(k.failure, (*r)[1].integer);
        if (!f) return local();
        failure = std::move(*f);
      }
      lease_left = (*r)[2].integer;
    }
    bool bad_value = false;
    if (!value.nil()) {
      std::optional<Record> e = take(key, value, RecordKind::kEntry);
      if (e && usable(*e->entry)) {
        if (owner) release(k, token);
        hits_.fetch_add(1, std::memory_order_relaxed);
        return std::move(*e->entry);
      }
      bad_value = true;
      // Write-once: only a signing builder, under the lease, may replace a bad value.
      if (!owner || !signer_) {
        if (owner) release(k, token);
        return local();
      }
    } else if (!failure.nil()) {
      std::optional<Record> f = take(key, failure, RecordKind::kFailure);
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
      {
        // Renewed while we compile and publish, so a compile of any length is done once.
        LeaseKeeper::Hold hold = keeper_.hold(k.lease, token);
        try {
          e = local();
        } catch (const CompileError& err) {
          publish_failure(key, {err.what(), err.log(), err.options()});
          hold.reset();
          release(k, token);
          throw;
        } catch (...) {
          hold.reset();
          release(k, token);
          throw;
        }
        publish(e, bad_value);
      }
      release(k, token);
      return e;
    }
    // A read-only host waits only while a writer's lease says an entry is coming.
    if (!rw && lease_left <= 0) return local();
    const Clock::time_point now = Clock::now();
    if (!waited) {
      waited = true;
      lease_waits_.fetch_add(1, std::memory_order_relaxed);
    }
    if (now >= give_up) {
      warn(fmt::format("remote cache {}: waited {} ms (KJIT_REMOTE_MAX_WAIT_MS) on live leases of {} without an "
                       "entry; compiling locally",
                       client_.where(), config().max_wait_ms, key.hex()));
      return local();
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, give_up - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace kjit::cache::remote
