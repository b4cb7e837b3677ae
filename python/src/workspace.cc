#include "workspace.hpp"

#include <kjit/device_buffer.hpp>

#include <utility>
#include <vector>

namespace kjit::python {

namespace {

struct Entry {
  int device;
  CUstream stream;
  void* ptr;
  size_t bytes;
  nb::object owner;     // the framework tensor holding `ptr`; None: `memory` holds it
  DeviceBuffer memory;  // cuMemAlloc'd when no framework allocates
};

// Guarded by the GIL: every caller is a binding holding it. Never destroyed: entries may hold
// Python objects, which must not be released after the interpreter has gone.
std::vector<Entry>& g_entries = *new std::vector<Entry>;
std::vector<Entry>& g_retired = *new std::vector<Entry>;
size_t g_last = 0;

Entry allocate(OpCall& call, int device, size_t bytes) {
  if (call.has_exchange_api()) {
    TensorRef ref;
    nb::object owner = call.allocate(DType::kU8, {static_cast<int64_t>(bytes)}, &ref);
    return {device, call.stream(), ref.data, bytes, std::move(owner), DeviceBuffer()};
  }
  DeviceBuffer memory(device, bytes);
  void* ptr = memory.data();
  return {device, call.stream(), ptr, bytes, nb::object(), std::move(memory)};
}

}  // namespace

void* workspace(OpCall& call, int device, size_t bytes) {
  if (bytes == 0) return nullptr;
  const CUstream stream = call.stream();
  if (g_last < g_entries.size()) {
    const Entry& e = g_entries[g_last];
    if (e.device == device && e.stream == stream && e.bytes >= bytes) return e.ptr;
  }
  for (size_t i = 0; i < g_entries.size(); ++i) {
    Entry& e = g_entries[i];
    if (e.device != device || e.stream != stream) continue;
    g_last = i;
    if (e.bytes >= bytes) return e.ptr;
    Entry grown = allocate(call, device, bytes > 2 * e.bytes ? bytes : 2 * e.bytes);
    g_retired.push_back(std::move(e));
    e = std::move(grown);
    return e.ptr;
  }
  g_entries.push_back(allocate(call, device, bytes));
  g_last = g_entries.size() - 1;
  return g_entries.back().ptr;
}

size_t clear_workspaces() {
  size_t freed = 0;
  for (std::vector<Entry>* list : {&g_entries, &g_retired}) {
    for (Entry& e : *list) {
      e.memory.free();  // a framework's tensor goes with its reference, below
      freed += e.bytes;
    }
    list->clear();
  }
  g_last = 0;
  return freed;
}

size_t workspace_bytes_held() {
  size_t n = 0;
  for (std::vector<Entry>* list : {&g_entries, &g_retired}) {
    for (const Entry& e : *list) n += e.bytes;
  }
  return n;
}

}  // namespace kjit::python
