#pragma once
/// \file kernel_table.hpp
/// The hot-path table of a typed op: a small POD key (the op's specialization choice plus the
/// runtime and the device it is loaded for) → the loaded program. A repeat of the thread's last
/// call is one memcmp; another hit is one hash probe under a shared lock: no strings, no
/// allocation. A miss builds the ProgramSpec and asks the Runtime. Programs live as long as
/// their Runtime and are context-independent libraries, so keying by device ordinal (never
/// reused, unlike a destroyed context's address) serves every context of the device, including
/// ones created later.

#include <kjit/runtime.hpp>

#include "runtime/async_jit.hpp"  // RuntimeAccess::at_hand, background_loaded
#include "runtime/driver.hpp"  // context_device
#include "runtime/ops/pod_memo.hpp"  // thread_memo

#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace kjit::detail {

/// FNV-1a over the object bytes of a POD key (keys must have no padding holes: zero-initialize
/// them with `Key k{}` before filling).
template <class Key>
struct PodHash {
  size_t operator()(const Key& key) const noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(&key);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(Key); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

template <class Key>
struct PodEqual {
  bool operator()(const Key& a, const Key& b) const noexcept {
    return std::memcmp(&a, &b, sizeof(Key)) == 0;
  }
};

/// Op key → loaded program, per (runtime, device). `Choice` is the op's trivially copyable
/// specialization choice (head_dim, variant, ...), zero-initialized before it is filled. `Tag`
/// (the op) gives each op's table its own per-thread memo of the last hit, so a thread that
/// calls several ops in turn (a model layer) finds each one's last hit there.
template <class Choice, class Tag = void>
class KernelTable {
 public:
  /// The program for `choice` on the device of `context` (the one ensure_context returned: its
  /// device is remembered per thread, so this makes no driver call), loading it through
  /// `runtime` on the first call. `make_spec` runs only on a miss. With a launch `stream`, a miss
  /// while that stream is being captured is Runtime::load's CaptureMiss (the capture query is
  /// made on the miss path only).
  template <class MakeSpec>
  const LoadedProgram& get(Runtime& runtime, CUcontext context, const Choice& choice, MakeSpec&& make_spec,
                           const CUstream* stream = nullptr) {
    const Entry key = entry_of(runtime, context, choice);
    // A serving loop calls an op with the same choice over and over: remember this thread's last
    // hit so the common call takes no lock at all.
    Memo& memo = thread_memo<Memo>();
    if (memo.table == this && PodEqual<Entry>()(memo.key, key)) return *memo.program;
    const LoadedProgram* program = find(key);
    if (!program) {
      program = stream != nullptr ? &runtime.load(make_spec(), context, *stream) : &runtime.load(make_spec(), context);
      insert(key, program);
    }
    memo = Memo{this, key, program};
    return *program;
  }

  /// KJIT_JIT=async, a miss's first look: the program for `choice` if it is in this table or a
  /// background compile loaded it (RuntimeAccess::background_loaded; this table then holds it).
  /// Memory only: builds no spec, hashes no key, touches no file. `Choice` has `family` and `point`.
  const LoadedProgram* loaded(Runtime& runtime, CUcontext context, const Choice& choice) {
    const Entry key = entry_of(runtime, context, choice);
    if (const LoadedProgram* program = find(key)) return program;
    const LoadedProgram* program = RuntimeAccess::background_loaded(runtime, *choice.family, choice.point, context);
    if (program) insert(key, program);
    return program;
  }

  /// KJIT_JIT=async: the program for `choice` if it is at hand without compiling: in this table,
  /// or RuntimeAccess::at_hand's (loaded, or read from memory, the disk cache and, when `exact`,
  /// the fleet tier, and loaded unless `capturing`), which this table then holds. Null
  /// otherwise; never compiles. `make_spec` runs only when the table lacks it.
  template <class MakeSpec>
  const LoadedProgram* at_hand(Runtime& runtime, CUcontext context, const Choice& choice, MakeSpec&& make_spec,
                               bool capturing, bool exact) {
    const Entry key = entry_of(runtime, context, choice);
    if (const LoadedProgram* program = find(key)) return program;
    const LoadedProgram* program = RuntimeAccess::at_hand(runtime, make_spec(), context, capturing, exact);
    if (program) insert(key, program);
    return program;
  }

 private:
  struct Entry {
    uint64_t runtime;  // Runtime::id(): never reused, unlike a destroyed Runtime's address
    int64_t device;  // 64 bits: no padding between the pointer and `choice`
    Choice choice;
  };
  struct Memo {
    const KernelTable* table = nullptr;
    Entry key{};
    const LoadedProgram* program = nullptr;
  };
  static Entry entry_of(const Runtime& runtime, CUcontext context, const Choice& choice) {
    Entry key{};
    key.runtime = runtime.id();
    key.device = context_device(context);
    key.choice = choice;
    return key;
  }
  const LoadedProgram* find(const Entry& key) {
    std::shared_lock lock(mutex_);
    auto it = table_.find(key);
    return it == table_.end() ? nullptr : it->second;
  }
  void insert(const Entry& key, const LoadedProgram* program) {
    std::unique_lock lock(mutex_);
    table_.emplace(key, program);
  }
  std::shared_mutex mutex_;
  std::unordered_map<Entry, const LoadedProgram*, PodHash<Entry>, PodEqual<Entry>> table_;
};

}  // namespace kjit::detail
