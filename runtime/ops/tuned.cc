// Tuned choices: the per-device table the planners read (see tuned.hpp).
#include "runtime/ops/tuned.hpp"

#include <kjit/error.hpp>
#include <kjit/runtime.hpp>

#include "cache/remote/tune_share.hpp"
#include "cache/tune_table.hpp"
#include "cache/warn.hpp"
#include "runtime/fleet.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

namespace kjit::detail {
namespace {

bool key_less(const TunedKey& a, const TunedKey& b) noexcept { return std::memcmp(&a, &b, sizeof(TunedKey)) < 0; }

/// The most CTAs a portable thread-block cluster may have.
constexpr int kMaxCluster = 8;

/// Why `c`'s recorded resources exceed `info`'s device, or "".
std::string over_limits(const cache::TuneChoice& c, const DeviceInfo& info) {
  if (info.max_threads_per_block > 0 && c.threads > info.max_threads_per_block) {
    return fmt::format("{} threads per CTA, the device allows {}", c.threads, info.max_threads_per_block);
  }
  if (c.smem > info.max_smem_per_block_optin) {
    return fmt::format("{} bytes of shared memory per CTA, the device allows {}", c.smem, info.max_smem_per_block_optin);
  }
  if (c.registers > 0 && info.regs_per_block > 0 && int64_t{c.registers} * c.threads > info.regs_per_block) {
    return fmt::format("{} registers × {} threads, the device's CTA register file holds {}", c.registers, c.threads,
                       info.regs_per_block);
  }
  if (c.cluster > 1 && !info.target().has_clusters()) {
    return fmt::format("clusters of {} CTAs, which {} does not have", c.cluster, info.target().str());
  }
  if (c.cluster > kMaxCluster) return fmt::format("clusters of {} CTAs, at most {} are portable", c.cluster, kMaxCluster);
  return {};
}

/// Reads and checks the table of `info`'s device; warns about everything it leaves out. The
/// process's configuration (cache dir, KJIT_TUNING, the fleet tier) is Runtime::global()'s,
/// read once: the fleet's table comes through that runtime's one RemoteTier.
std::unique_ptr<TunedTable> load_table(const DeviceInfo& device) {
  const Runtime& runtime = Runtime::global();
  if (!runtime.config().tuning) return nullptr;
  const DeviceInfo& info = device_identity(device.ordinal);  // the fingerprint's fields too
  const std::string& root = runtime.config().cache_dir;
  const std::string id = info.fingerprint_id();
  const std::string path = cache::table_path(root, id);
  cache::TuneTable file;
  try {
    bool found = cache::read_table(path, &file);
    // The fleet's table of this kind of device (KJIT_REMOTE), merged in: newer measurements win.
    cache::remote::merge_fleet_table(fleet_tier(runtime), id, &file, &found);
    if (!found) {
      const std::vector<std::string> others = cache::list_tables(root);
      if (!others.empty()) {
        std::string names;
        for (const std::string& n : others) names += (names.empty() ? "" : ", ") + n;
        warn(fmt::format("no tuning table for device {} ({}, fingerprint {}) in {}: the tables there ({}) are for "
                         "other devices or drivers and are ignored; default plans run (kjit tune makes one)",
                         info.ordinal, info.name, id, cache::tuning_dir(root), names));
      }
      return nullptr;
    }
  } catch (const std::exception& e) {
    warn(fmt::format("{}; default plans run on device {}", e.what(), info.ordinal));
    return nullptr;
  }
  if (file.fingerprint_id != id || file.fingerprint_text != info.fingerprint()) {
    warn(fmt::format("tuning table {} was measured on another device ({}) than device {} ({}); it is ignored and "
                     "default plans run",
                     path, file.fingerprint_text, info.ordinal, info.fingerprint()));
    return nullptr;
  }
  std::vector<std::string> dropped;
  auto table = std::make_unique<TunedTable>(tuned_table_from(file, info, &dropped));
  for (const std::string& d : dropped) warn(fmt::format("tuning table {}: {}; the default plan runs there", path, d));
  return table;
}

constexpr int kMaxDevices = 64;

struct Slot {
  std::atomic<bool> loaded{false};
  std::atomic<const TunedTable*> table{nullptr};
};

std::array<Slot, kMaxDevices>& slots() {
  static std::array<Slot, kMaxDevices> s;
  return s;
}

std::mutex& slots_mutex() {
  static std::mutex m;
  return m;
}

/// Tables stay alive for the process: a planner on another thread may hold a pointer into one.
std::vector<std::unique_ptr<TunedTable>>& kept() {
  static std::vector<std::unique_ptr<TunedTable>> k;
  return k;
}

}  // namespace

int TuneOpSpec::knob_count() const noexcept {
  int n = 0;
  while (n < kMaxTuneKnobs && knobs[n] != nullptr) ++n;
  return n;
}

std::string TuneOpSpec::describe(const TunedChoice& choice) const {
  std::string s = choice.family ? choice.family->name + " " + choice.family->describe(choice.point) : "(no kernel)";
  for (int i = 0; i < knob_count(); ++i) s += fmt::format(" {}={}", knobs[i], choice.knobs[i]);
  return s;
}

const TuneOpSpec* find_tune_op(std::string_view name) {
  for (const TuneOpSpec* op : tune_ops()) {
    if (name == op->name) return op;
  }
  return nullptr;
}

const TunedChoice* TunedTable::find(const TunedKey& key) const noexcept {
  const auto it = std::lower_bound(items_.begin(), items_.end(), key,
                                   [](const auto& item, const TunedKey& k) { return key_less(item.first, k); });
  if (it == items_.end() || !PodEqual<TunedKey>()(it->first, key)) return nullptr;
  return &it->second;
}

void TunedTable::set(const TunedKey& key, const TunedChoice& choice) {
  const auto it = std::lower_bound(items_.begin(), items_.end(), key,
                                   [](const auto& item, const TunedKey& k) { return key_less(item.first, k); });
  if (it != items_.end() && PodEqual<TunedKey>()(it->first, key)) {
    it->second = choice;
  } else {
    items_.insert(it, {key, choice});
  }
}

std::string tuned_choice_from(const TuneOpSpec& op, const cache::TuneChoice& stored, const DeviceInfo& info,
                              TunedChoice* out) {
  TunedChoice c;
  if (!stored.family.empty()) {
    try {
      c.family = &family(stored.family);
    } catch (const Error& e) {
      return fmt::format("unknown family '{}'", stored.family);
    }
    // The point's text is "name=value ..." (Family::describe); parse it back through the family.
    ParamMap params;
    size_t at = 0;
    const std::string& text = stored.point;
    while (at < text.size()) {
      size_t end = text.find(' ', at);
      if (end == std::string::npos) end = text.size();
      const std::string word = text.substr(at, end - at);
      const size_t eq = word.find('=');
      if (!word.empty()) {
        if (eq == std::string::npos || eq == 0) return fmt::format("point '{}' is not name=value words", text);
        params[word.substr(0, eq)] = word.substr(eq + 1);
      }
      at = end + 1;
    }
    try {
      c.point = c.family->parse(params);
    } catch (const Error& e) {
      return fmt::format("point '{}' of {}: {}", text, stored.family, e.what());
    }
  }
  const int n = op.knob_count();
  for (const auto& [name, value] : stored.knobs) {
    int i = 0;
    while (i < n && name != op.knobs[i]) ++i;
    if (i == n) return fmt::format("{} has no knob '{}'", op.name, name);
    if (value < INT32_MIN || value > INT32_MAX) return fmt::format("knob {}={} is out of range", name, value);
    c.knobs[i] = static_cast<int32_t>(value);
  }
  for (int i = 0; i < n; ++i) {
    if (stored.knobs.find(op.knobs[i]) == stored.knobs.end()) return fmt::format("knob '{}' is missing", op.knobs[i]);
  }
  if (std::string why = op.fits(c, info); !why.empty()) return why;
  *out = c;
  return {};
}

cache::TuneChoice stored_choice_of(const TuneOpSpec& op, const TunedChoice& choice) {
  cache::TuneChoice c;
  if (choice.family != nullptr) {
    c.family = choice.family->name;
    c.point = choice.family->describe(choice.point);
  }
  for (int i = 0; i < op.knob_count(); ++i) c.knobs[op.knobs[i]] = choice.knobs[i];
  return c;
}

TunedTable tuned_table_from(const cache::TuneTable& file, const DeviceInfo& info, std::vector<std::string>* dropped) {
  TunedTable table;
  for (const cache::TuneEntry& e : file.entries) {
    const std::string where = fmt::format("entry op={} bucket=[{}]", e.op, fmt::join(e.bucket, ","));
    const TuneOpSpec* op = find_tune_op(e.op);
    if (op == nullptr) {
      dropped->push_back(where + ": unknown op");
      continue;
    }
    if (e.bucket.size() > static_cast<size_t>(kMaxTuneBucket)) {
      dropped->push_back(fmt::format("{}: a bucket of {} numbers (at most {})", where, e.bucket.size(), kMaxTuneBucket));
      continue;
    }
    if (std::string why = over_limits(e.winner, info); !why.empty()) {
      dropped->push_back(fmt::format("{}: {} needs {}", where, e.winner.describe(), why));
      continue;
    }
    if (e.planner != op->planner) {
      dropped->push_back(fmt::format("{}: tuned against revision {} of the {} planner, this kjit plans with revision {} "
                                     "(re-run kjit tune {})",
                                     where, e.planner, op->name, op->planner, op->name));
      continue;
    }
    TunedChoice choice;
    if (std::string why = tuned_choice_from(*op, e.winner, info, &choice); !why.empty()) {
      dropped->push_back(fmt::format("{}: {}: {}", where, e.winner.describe(), why));
      continue;
    }
    // Where the default plan won, the planner's own answer is the tuned one.
    if (e.winner.family == e.default_choice.family && e.winner.point == e.default_choice.point &&
        e.winner.knobs == e.default_choice.knobs) {
      continue;
    }
    TunedKey key{};
    key.op = static_cast<int32_t>(op->id);
    bool in_range = true;
    for (size_t i = 0; i < e.bucket.size(); ++i) {
      in_range = in_range && e.bucket[i] >= INT32_MIN && e.bucket[i] <= INT32_MAX;
      key.bucket[i] = static_cast<int32_t>(e.bucket[i]);
    }
    if (!in_range) {
      dropped->push_back(where + ": a bucket value outside 32 bits");
      continue;
    }
    table.set(key, choice);
  }
  return table;
}

const TunedTable* tuned_table(const DeviceInfo& info) noexcept {
  if (info.ordinal < 0 || info.ordinal >= kMaxDevices) return nullptr;
  Slot& slot = slots()[static_cast<size_t>(info.ordinal)];
  if (slot.loaded.load(std::memory_order_acquire)) return slot.table.load(std::memory_order_acquire);
  try {
    std::lock_guard<std::mutex> lock(slots_mutex());
    if (!slot.loaded.load(std::memory_order_acquire)) {
      std::unique_ptr<TunedTable> table = load_table(info);
      if (table && !table->empty()) {
        slot.table.store(table.get(), std::memory_order_release);
        kept().push_back(std::move(table));
      }
      slot.loaded.store(true, std::memory_order_release);
    }
  } catch (const std::exception& e) {
    warn(fmt::format("reading the tuning table of device {} failed: {}; default plans run", info.ordinal, e.what()));
    slot.loaded.store(true, std::memory_order_release);
  }
  return slot.table.load(std::memory_order_acquire);
}

void install_tuned_table(int ordinal, TunedTable table) {
  if (ordinal < 0 || ordinal >= kMaxDevices) throw InvalidArgument(fmt::format("device ordinal {} out of range", ordinal));
  std::lock_guard<std::mutex> lock(slots_mutex());
  Slot& slot = slots()[static_cast<size_t>(ordinal)];
  if (table.empty()) {
    slot.table.store(nullptr, std::memory_order_release);
  } else {
    auto kept_table = std::make_unique<TunedTable>(std::move(table));
    slot.table.store(kept_table.get(), std::memory_order_release);
    kept().push_back(std::move(kept_table));
  }
  slot.loaded.store(true, std::memory_order_release);
}

void reload_tuned_table(int ordinal) {
  if (ordinal < 0 || ordinal >= kMaxDevices) throw InvalidArgument(fmt::format("device ordinal {} out of range", ordinal));
  std::lock_guard<std::mutex> lock(slots_mutex());
  Slot& slot = slots()[static_cast<size_t>(ordinal)];
  slot.table.store(nullptr, std::memory_order_release);
  slot.loaded.store(false, std::memory_order_release);
}

}  // namespace kjit::detail
