// Listener registry and NVTX ranges (see events.hpp).
#include "runtime/events.hpp"

#include <kjit/error.hpp>

#include "cache/warn.hpp"

#include <fmt/format.h>
#include <nvtx3/nvToolsExt.h>

#include <exception>

namespace kjit {

const char* event_kind_name(EventKind kind) noexcept {
  switch (kind) {
    case EventKind::kCompile: return "compile";
    case EventKind::kDiskHit: return "disk_hit";
    case EventKind::kLoad: return "load";
    case EventKind::kRejected: return "rejected";
    case EventKind::kRefused: return "refused";
    case EventKind::kFallbackLaunch: return "fallback_launch";
    case EventKind::kBackgroundCompileDone: return "background_compile_done";
    case EventKind::kNoFallback: return "no_fallback";
    case EventKind::kBackgroundCompileAbandoned: return "background_compile_abandoned";
  }
  return "unknown";
}

namespace detail {

uint64_t EventHub::add(EventListener listener) {
  if (!listener) throw InvalidArgument("Runtime::add_listener: the listener is an empty function");
  auto slot = std::make_shared<Slot>();
  slot->fn = std::move(listener);
  std::lock_guard lock(mutex_);
  slot->id = next_id_++;
  auto list = std::make_shared<List>(*list_);
  list->push_back(slot);
  list_ = std::move(list);
  active_.store(true, std::memory_order_release);
  return slot->id;
}

bool EventHub::remove(uint64_t id) {
  std::lock_guard lock(mutex_);
  auto list = std::make_shared<List>();
  for (const auto& s : *list_) {
    if (s->id != id) list->push_back(s);
  }
  if (list->size() == list_->size()) return false;
  active_.store(!list->empty(), std::memory_order_release);
  list_ = std::move(list);
  return true;
}

void EventHub::emit(const Event& event) noexcept {
  std::shared_ptr<const List> list;
  {
    std::lock_guard lock(mutex_);
    list = list_;
  }
  for (const auto& slot : *list) {
    std::string why;
    try {
      slot->fn(event);
      continue;
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
      why = "an exception that is not a std::exception";
    }
    if (!slot->reported.exchange(true)) {
      warn(fmt::format("event listener {} threw on a {} event ({}); the op went on, and later exceptions of this "
                       "listener are not reported",
                       slot->id, event_kind_name(event.kind), why));
    }
  }
}

namespace {

nvtxDomainHandle_t kjit_domain() {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("kjit");
  return domain;
}

}  // namespace

NvtxRange::NvtxRange(bool on, const char* verb, const std::string& family, const std::string& params,
                     const std::string& target)
    : on_(on) {
  if (!on_) return;
  const std::string text = fmt::format("{} {} {} {}", verb, family, params, target);
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = text.c_str();  // NVTX copies the text before returning
  nvtxDomainRangePushEx(kjit_domain(), &a);
}

NvtxRange::~NvtxRange() {
  if (on_) nvtxDomainRangePop(kjit_domain());
}

}  // namespace detail
}  // namespace kjit
