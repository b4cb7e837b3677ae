#pragma once
// Host emulation of cp.async (16-byte global → shared copies with zero fill, commit groups and
// waits), shared by the decode and SWA emulators. With g_late_copies a copy lands at the last
// moment a wait allows (a missing wait or barrier then reads stale shared memory); otherwise it
// lands at issue (a stage refilled while still being read shows up instead).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace emu {

struct Copy {
  unsigned char* dst;
  const void* src;
  bool valid;
};
struct AsyncState {
  std::vector<Copy> open;
  std::vector<std::vector<Copy>> committed;
};
inline bool g_late_copies = false;
inline thread_local AsyncState t_async;  ///< this CUDA thread's copies in flight

inline void land(const Copy& c) {
  if (c.valid) {
    std::memcpy(c.dst, c.src, 16);
  } else {
    std::memset(c.dst, 0, 16);
  }
}

/// cp.async.cg 16 bytes from `src` to byte `dst` of the shared array `smem`; `valid` false
/// zero-fills. Both addresses must be 16-byte aligned, as on the device.
inline void cp_async_16(unsigned char* smem, uint32_t dst, const void* src, bool valid) {
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0 || dst % 16 != 0) {
    std::fprintf(stderr, "emulator: misaligned cp.async %p -> %u\n", src, dst);
    std::abort();
  }
  const Copy c{smem + dst, src, valid};
  if (g_late_copies) {
    t_async.open.push_back(c);
  } else {
    land(c);
  }
}

inline void cp_async_commit() {
  t_async.committed.push_back(std::move(t_async.open));
  t_async.open.clear();
}

/// Lands the oldest groups until at most `pending` committed groups remain in flight.
inline void cp_async_wait(int pending) {
  auto& groups = t_async.committed;
  while (static_cast<int>(groups.size()) > pending) {
    for (const Copy& c : groups.front()) land(c);
    groups.erase(groups.begin());
  }
}

}  // namespace emu
