#pragma once
/// \file runtime/ops/call_memo.hpp
/// The repeat call of an op, per thread: the op's arguments written as a key of words → the launch
/// value they built. A serving loop calls each op with the same tensors layer after layer, step
/// after step; such a call is one key write, one probe and the launch, with no validation, no plan
/// and no build, because all three are pure functions of what the key holds:
///
///   - every field of the op's Args (Op::call_key writes them; tensors in the canonical form of
///     CallKeyWriter::put, free of padding);
///   - the pipeline's workspace and the Runtime's id (programs live as long as their Runtime);
///   - the device's tuning table, compared on each hit (a table installed or removed replans);
///   - under KJIT_JIT=async, for a launch value built from a fallback, whether a background
///     compile has ended since (FallbackMark: such a call is built again, and from then on runs
///     its exact program once that is loaded).
///
/// The device's attributes are fixed per ordinal and its context is made current on every hit,
/// as open_device does. Nothing a kernel reads from memory is keyed: a launch value holds device
/// addresses, never data. An op whose arguments point at host data that its launch depends on
/// (the paged prefill's host plan) writes that data's fields as well.
///
/// A miss runs the op's full path (validate, plan, build) and stores its launch value; a call
/// that throws stores nothing, so it throws again on the next call. Checked by
/// tests/runtime/call_memo_test.cc: every byte of each op's Args that is not padding reaches its
/// key.

#include <kjit/ops/attention.hpp>
#include <kjit/tensor.hpp>

#include "runtime/async_jit.hpp"     // background_epoch
#include "runtime/ops/pod_memo.hpp"  // thread_memo

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kjit::detail {

/// Writes an op call's inputs into `capacity` words in a fixed order: a tensor as its address, a
/// word of dtype and rank, one of its device, and all kMaxDims sizes and strides (those past its rank only
/// cost a miss when they differ); a scalar, an enum or a bool as one word; a float as its bits.
/// Past `capacity` nothing more is written and ok() turns false (the call then takes the full
/// path). Also hashes the tensor addresses, which pick the memo's set: calls that differ only in
/// which buffers they read (each layer's own K and V) spread over the sets.
class CallKeyWriter {
 public:
  CallKeyWriter(uint64_t* words, size_t capacity) noexcept : words_(words), capacity_(capacity) {}

  void put(const TensorRef& t) noexcept {
    constexpr size_t kTensorWords = 3 + 2 * TensorRef::kMaxDims;
    if (size_ + kTensorWords > capacity_) {
      size_ = capacity_ + 1;
      return;
    }
    const auto address = reinterpret_cast<uintptr_t>(t.data);
    words_[size_] = address;
    words_[size_ + 1] = static_cast<uint64_t>(t.dtype) | static_cast<uint64_t>(static_cast<uint32_t>(t.ndim)) << 8;
    words_[size_ + 2] = static_cast<uint64_t>(static_cast<uint32_t>(t.device));
    std::memcpy(&words_[size_ + 3], t.shape, sizeof(t.shape));
    std::memcpy(&words_[size_ + 3 + TensorRef::kMaxDims], t.strides, sizeof(t.strides));
    size_ += kTensorWords;
    hash_ = (hash_ ^ address) * 0xff51afd7ed558ccdull;
    hash_ ^= hash_ >> 29;
  }
  void put(const attention::PagedKVCache& c) noexcept {
    put(c.k);
    put(c.v);
    put(c.indptr);
    put(c.page_indices);
    put(c.last_page_len);
  }
  void put(float f) noexcept {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    put_word(bits);
  }
  void put(const void* p) noexcept { put_word(reinterpret_cast<uintptr_t>(p)); }
  template <class T, std::enable_if_t<std::is_integral_v<T> || std::is_enum_v<T>, int> = 0>
  void put(T v) noexcept {
    put_word(static_cast<uint64_t>(v));
  }
  /// put() of each value in turn.
  template <class... T>
  void put_all(const T&... v) noexcept {
    (put(v), ...);
  }

  bool ok() const noexcept { return size_ <= capacity_; }
  /// Words written (meaningful while ok()).
  size_t size() const noexcept { return size_; }
  uint64_t hash() const noexcept { return hash_ ^ (hash_ >> 32); }

 private:
  void put_word(uint64_t w) noexcept {
    if (size_ >= capacity_) {
      size_ = capacity_ + 1;
      return;
    }
    words_[size_++] = w;
  }

  uint64_t* words_;
  size_t capacity_;
  size_t size_ = 0;
  uint64_t hash_ = 0x9e3779b97f4a7c15ull;
};

/// The generation of every thread's call memos. forget_op_calls() moves it on; a memo that sees a
/// new generation forgets its calls before its next probe.
uint64_t call_memo_generation() noexcept;
/// Makes every thread's call memos forget their calls: the next call of each op takes the full
/// path (for tests and benchmarks that time or check that path; nothing else needs it, since a
/// stored call is only ever served for the same key).
void forget_op_calls() noexcept;

/// Whether Op declares `static void call_key(const Args&, CallKeyWriter&)`: its calls go through
/// the call memo.
template <class Op, class = void>
struct HasCallKey : std::false_type {};
template <class Op>
struct HasCallKey<Op, std::void_t<decltype(Op::call_key(std::declval<const typename Op::Args&>(),
                                                        std::declval<CallKeyWriter&>()))>> : std::true_type {};

/// The words of Op's call key: Op::kCallKeyWords where declared, else its Args' bytes over eight
/// plus what one word per scalar may add and the memo's own three (runtime, workspace address
/// and bytes).
template <class Op, class = void>
struct CallKeyWords : std::integral_constant<size_t, sizeof(typename Op::Args) / 8 + 24> {};
template <class Op>
struct CallKeyWords<Op, std::void_t<decltype(Op::kCallKeyWords)>> : std::integral_constant<size_t, Op::kCallKeyWords> {};

/// Whether a launch value runs a fallback (KJIT_JIT=async, runtime/ops/fallback.hpp), and until
/// when it may be launched again without planning anew.
struct FallbackMark {
  /// 0: built from the call's own programs. Else 1 + the background_epoch() its build began in:
  /// once a background compile has loaded a program since, the call is built again (and runs
  /// its exact program if that was the one), so a stored call never pins a fallback.
  uint64_t epoch = 0;
  /// With `epoch`: the Runtime's count of launches from a fallback (RuntimeStats::fallback_launches).
  std::atomic<uint64_t>* launches = nullptr;

  /// Whether a stored launch value may still be launched as it is: exact, or a fallback while no
  /// background compile has ended since it was built. One compare for an exact one.
  bool current() const noexcept { return epoch == 0 || epoch == background_epoch() + 1; }
  /// Counts one launch from a fallback; nothing for an exact launch value.
  void count() const noexcept {
    if (epoch != 0) launches->fetch_add(1, std::memory_order_relaxed);
  }
};

/// A stored call: its launch value and what a hit checks beyond the key.
template <class Launch>
struct CallEntry {
  Launch launch;
  const void* table = nullptr;  ///< the device's tuning table when it was built
  int device = 0;               ///< the device the call validated to
  FallbackMark fallback;        ///< whether `launch` runs a fallback (checked on each hit)

  /// Launches `launch` on `stream`, counting it when it runs a fallback.
  void launch_on(CUstream stream) const {
    fallback.count();
    launch.launch(stream);
  }
};

/// Key words → CallEntry for one thread: kSlots slots in sets of kWays, the set picked by the
/// writer's hash; a miss fills a free way or evicts the set's ways in turn. 256 slots hold a
/// 96-layer model's per-layer calls of one op with few sets overflowing (a memo of 128 missed on
/// about one call in six of a 96-layer loop). Allocated per thread on its first call of the op:
/// about 2 KB a slot (key and launch value).
template <class Op, size_t kSlots = 256, size_t kWays = 4>
class CallMemo {
  static_assert((kSlots & (kSlots - 1)) == 0 && (kWays & (kWays - 1)) == 0 && kSlots >= kWays, "powers of two");
  static constexpr size_t kSets = kSlots / kWays;
  static constexpr size_t kWords = CallKeyWords<Op>::value;
  using Entry = CallEntry<typename Op::Launch>;

 public:
  /// A key being written for this memo.
  struct Key {
    Key() = default;
    Key(const Key&) = delete;  // the writer points into this key's words
    Key& operator=(const Key&) = delete;
    uint64_t words[kWords];
    CallKeyWriter writer{words, kWords};
  };

  /// The stored entry of `key`, or null. A caller that finds the entry stale (another tuning
  /// table) overwrites it in place: the key stays, so it is never stored twice.
  Entry* find(const Key& key) noexcept {
    const uint64_t generation = call_memo_generation();
    if (generation != generation_) {
      clear();
      generation_ = generation;
    }
    Slot* ways = &slots_[set_of(key) * kWays];
    const size_t bytes = key.writer.size() * sizeof(uint64_t);
    for (size_t w = 0; w < kWays; ++w) {
      if (ways[w].words == key.writer.size() && std::memcmp(ways[w].key, key.words, bytes) == 0) {
        ++hits_;
        return &ways[w].entry;
      }
    }
    return nullptr;
  }
  /// Stores `entry` under `key`, which find() did not hold (evicting an older key of its set when
  /// the set is full), and returns the stored copy, valid until the next store.
  const Entry& store(const Key& key, const Entry& entry) {
    ++misses_;
    const size_t set = set_of(key);
    Slot* ways = &slots_[set * kWays];
    size_t victim = 0;
    while (victim < kWays && ways[victim].words != 0) ++victim;
    if (victim == kWays) victim = next_victim_[set]++ & (kWays - 1);
    Slot& slot = ways[victim];
    slot.words = key.writer.size();
    std::memcpy(slot.key, key.words, slot.words * sizeof(uint64_t));
    slot.entry = entry;
    return slot.entry;
  }
  /// Forgets every call (the counters stay).
  void clear() noexcept {
    for (Slot& s : slots_) s.words = 0;
  }
  uint64_t hits() const noexcept { return hits_; }
  uint64_t misses() const noexcept { return misses_; }

 private:
  struct Slot {
    Entry entry{};
    size_t words = 0;  ///< 0: empty
    uint64_t key[kWords];
  };
  static size_t set_of(const Key& key) noexcept { return key.writer.hash() & (kSets - 1); }

  Slot slots_[kSlots];
  uint8_t next_victim_[kSets] = {};
  uint64_t generation_ = 0;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace kjit::detail
