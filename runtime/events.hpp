#pragma once
/// \file runtime/events.hpp
/// The runtime's side of kjit/events.hpp: the listener registry each Runtime owns, and the NVTX
/// ranges (KJIT_NVTX=1) around compiles and loads. Both work only on the runtime's slow paths.

#include <kjit/events.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kjit::detail {

/// The listeners of one Runtime. Registration takes a lock and copies the list (it is rare);
/// emit() takes the lock only to copy one shared pointer, then calls each listener without it,
/// so a listener may register or remove listeners, and a slow one never blocks registration.
class EventHub {
 public:
  /// Adds `listener`; returns the id remove() takes (never 0). Throws InvalidArgument for an
  /// empty function.
  uint64_t add(EventListener listener);
  /// Removes a listener; false when `id` is not registered (already removed, or never was). A
  /// call running on another thread may still finish.
  bool remove(uint64_t id);
  /// Whether any listener is registered: callers skip building an Event when not.
  bool active() const noexcept { return active_.load(std::memory_order_acquire); }
  /// Calls every listener with `event`. A listener that throws is reported once (kjit::warn,
  /// naming its id and the exception) and is kept; nothing propagates.
  void emit(const Event& event) noexcept;

 private:
  struct Slot {
    uint64_t id = 0;
    EventListener fn;
    std::atomic<bool> reported{false};
  };
  using List = std::vector<std::shared_ptr<Slot>>;
  std::mutex mutex_;
  std::shared_ptr<const List> list_ = std::make_shared<const List>();
  uint64_t next_id_ = 1;
  std::atomic<bool> active_{false};
};

/// An NVTX range in the "kjit" domain, pushed on construction and popped on destruction on the
/// same thread, named "<verb> <family> <params> <target>". With `on` false (KJIT_NVTX unset) it
/// does nothing and builds no string. NVTX itself costs nothing unless a tool (Nsight Systems)
/// injects its library.
class NvtxRange {
 public:
  NvtxRange(bool on, const char* verb, const std::string& family, const std::string& params, const std::string& target);
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  bool on_;
};

}  // namespace kjit::detail
