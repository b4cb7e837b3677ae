#pragma once
// Host emulation of kernel_sources/kjit/smem.cuh: shared addresses are byte offsets into the
// emulated CTA's dynamic shared memory, each access bounds-checked (emu_sm90.hpp). A pointer into
// the kernel's extern __shared__ array (Cta::symbol, one host array for every CTA of a cluster)
// is the same offset into the CTA's own shared memory.
#include "kjit/config.cuh"

namespace kjit {

inline uint32_t smem_u32(const void* ptr) {
  const ::emu::sm90::Cta& c = ::emu::sm90::cta();
  return static_cast<uint32_t>(static_cast<const uint8_t*>(ptr) - (c.symbol != nullptr ? c.symbol : c.smem));
}
inline void st_shared_u16(uint32_t addr, uint32_t v) {
  const uint16_t h = static_cast<uint16_t>(v);
  std::memcpy(::emu::sm90::smem_write(addr, 2), &h, 2);
}
inline void st_shared_u32(uint32_t addr, uint32_t v) { std::memcpy(::emu::sm90::smem_write(addr, 4), &v, 4); }
inline void st_shared_v2(uint32_t addr, uint32_t a, uint32_t b) {
  const uint32_t v[2] = {a, b};
  std::memcpy(::emu::sm90::smem_write(addr, 8), v, 8);
}
inline void st_shared_v4(uint32_t addr, uint4 v) { std::memcpy(::emu::sm90::smem_write(addr, 16), &v, 16); }
inline void st_shared_f32x2(uint32_t addr, float a, float b) {
  const float v[2] = {a, b};
  std::memcpy(::emu::sm90::smem_write(addr, 8), v, 8);
}
inline void st_shared_f32x4(uint32_t addr, float a, float b, float c, float d) {
  const float v[4] = {a, b, c, d};
  std::memcpy(::emu::sm90::smem_write(addr, 16), v, 16);
}
inline uint32_t ld_shared_u32(uint32_t addr) {
  uint32_t v;
  std::memcpy(&v, ::emu::sm90::smem_at(addr, 4), 4);
  return v;
}
inline uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  std::memcpy(&v, ::emu::sm90::smem_at(addr, 16), 16);
  return v;
}

}  // namespace kjit
