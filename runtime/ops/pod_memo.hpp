#pragma once
/// \file runtime/ops/pod_memo.hpp
/// A per-thread memo of a pure host function on the op hot path (a TMA descriptor encode, a
/// planner search): a fixed array of slots in small sets, picked by a hash of the POD key's
/// bytes. A hit is one hash over the key's words and a memcmp per way of its set: no lock, no
/// string, no allocation. A miss runs the function and stores it in the set, evicting an older
/// key when the set is full, so the memo never grows; an evicted key is just computed again.
/// The key must hold every input of the function (a value computed from anything else would be
/// served for a call it does not describe) and compare by bytes: zero-initialize it (`Key k{}`)
/// and give it no padding and no floats (checked: has_unique_object_representations).
///
/// Each thread owns its instances (thread_memo), so the function may run once per thread for
/// the same key; what it computes is the same on every thread.

#include "runtime/driver.hpp"  // KJIT_FAST_TLS

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

namespace kjit::detail {

/// A hash of `bytes` bytes at `data`, eight at a time: enough to spread keys over the slots.
inline uint64_t pod_words_hash(const void* data, size_t bytes) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0x9e3779b97f4a7c15ull ^ bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h ^ (h >> 32);
}

/// Key → Value for one thread: `kSlots` slots in sets of `kWays` (both powers of two). A key
/// lives in the set its hash picks; a miss fills a free way or else evicts the set's ways in
/// turn, so a handful of keys that share a set (a call's q, k, v and out maps) all stay.
template <class Key, class Value, size_t kSlots, size_t kWays = 4>
class PodMemo {
  static_assert(std::has_unique_object_representations_v<Key>, "memo keys compare by bytes: no padding, no floats");
  static_assert(std::is_trivially_copyable_v<Value>, "memo values are copied into their slot");
  static_assert(kWays > 0 && (kWays & (kWays - 1)) == 0, "a power of two of ways");
  static_assert(kSlots >= kWays && (kSlots & (kSlots - 1)) == 0, "a power of two of slots");
  static constexpr size_t kSets = kSlots / kWays;
  /// The set is picked by the key's first bytes (a TMA key's address and sizes): keys that
  /// differ only further on share a set, which holds kWays of them, and still compare whole.
  static constexpr size_t kHashedBytes = 64;

 public:
  /// The value of `key`: the stored one when its set holds `key`, else `make(key)` (which
  /// returns a Value), stored in the set. When `make` throws, nothing is stored and the set
  /// keeps what it had. The reference is valid until the next get on this memo: copy what you
  /// need.
  template <class Make>
  const Value& get(const Key& key, Make&& make) {
    const size_t set = pod_words_hash(&key, std::min(sizeof(Key), kHashedBytes)) & (kSets - 1);
    Slot* ways = &slots_[set * kWays];
    for (size_t w = 0; w < kWays; ++w) {
      if (ways[w].used && std::memcmp(&ways[w].key, &key, sizeof(Key)) == 0) {
        ++hits_;
        return ways[w].value;
      }
    }
    ++misses_;
    const Value value = make(key);
    size_t victim = 0;
    while (victim < kWays && ways[victim].used) ++victim;
    if (victim == kWays) victim = next_victim_[set]++ & (kWays - 1);
    Slot& slot = ways[victim];
    slot.used = true;
    slot.key = key;
    slot.value = value;
    return slot.value;
  }

  /// Forgets every entry (the counters stay).
  void clear() noexcept {
    for (Slot& s : slots_) s.used = false;
  }
  /// Calls answered from a slot, and calls that ran `make`, since the thread's first.
  uint64_t hits() const noexcept { return hits_; }
  uint64_t misses() const noexcept { return misses_; }
  /// Keys stored now (at most kSlots).
  size_t size() const noexcept {
    size_t n = 0;
    for (const Slot& s : slots_) n += s.used ? 1 : 0;
    return n;
  }

 private:
  struct Slot {  // value first: an over-aligned Value pads less there
    Value value{};
    Key key{};
    bool used = false;
  };
  Slot slots_[kSlots];
  uint8_t next_victim_[kSets] = {};
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

/// The calling thread's `Memo`, allocated on its first use and freed when the thread exits. The
/// repeat calls read one initial-exec TLS pointer (libkjit is a shared library: see
/// KJIT_FAST_TLS), so the memo's own size stays out of the static TLS block (which a library
/// loaded with dlopen, as by Python, must fit in a few hundred bytes). An instantiation in
/// another binary (a test, a tool) is a second memo: harmless for a cache, but counters are read
/// through the library's accessor (tma_map_memo, split_chunk_memo).
template <class Memo>
Memo& thread_memo() {
  KJIT_FAST_TLS thread_local Memo* memo = nullptr;
  if (memo != nullptr) return *memo;
  struct Owner {
    Memo** fast;
    std::unique_ptr<Memo> owned = std::make_unique<Memo>();
    ~Owner() { *fast = nullptr; }
  };
  thread_local Owner owner{&memo};
  memo = owner.owned.get();
  return *memo;
}

}  // namespace kjit::detail
