#pragma once
// The stand-in driver's CUtensorMap (tests/support/simulated_driver.cc): cuTensorMapEncodeTiled's
// arguments packed into the map's 128 bytes, a deterministic function of every argument and not
// the hardware's encoding. The stand-in packs; the Hopper kernel emulator
// (tests/emulation/sm90) unpacks, so a kernel run there reads the maps the runtime encoded.
//
// Layout: base (8 bytes), dims − 1 (5 × 5 bytes), the byte strides of dims 1..4 / 16 (4 × 5
// bytes), box − 1 (5 × 1), element strides (5 × 1), then dtype, rank, interleave, swizzle, L2
// promotion and OOB fill (1 byte each): 69 bytes, the rest zero.
#include <cuda.h>

#include <cstdint>
#include <cstring>

namespace kjit::testing {

struct SimTensorMap {
  uint64_t base = 0;
  uint64_t dims[5] = {};     ///< elements per dim (innermost first); unused dims 1
  uint64_t strides[4] = {};  ///< byte stride of dims 1..4 (multiples of 16)
  uint32_t box[5] = {};      ///< box elements per dim; unused dims 1
  uint32_t elem_strides[5] = {};
  uint8_t dtype = 0, rank = 0, interleave = 0, swizzle = 0, l2 = 0, oob = 0;
};

/// Bytes of one element of each CUtensorMapDataType, by its value.
constexpr int kSimTensorMapElemBytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};

inline void pack_sim_tensor_map(const SimTensorMap& m, void* map128) {
  unsigned char out[128] = {};
  size_t at = 0;
  auto put = [&](uint64_t v, size_t bytes) {
    std::memcpy(out + at, &v, bytes);
    at += bytes;
  };
  put(m.base, 8);
  for (int i = 0; i < 5; ++i) put(i < m.rank ? m.dims[i] - 1 : 0, 5);
  for (int i = 0; i < 4; ++i) put(i + 1 < m.rank ? m.strides[i] / 16 : 0, 5);
  for (int i = 0; i < 5; ++i) put(i < m.rank ? m.box[i] - 1 : 0, 1);
  for (int i = 0; i < 5; ++i) put(i < m.rank ? m.elem_strides[i] : 0, 1);
  for (uint8_t v : {m.dtype, m.rank, m.interleave, m.swizzle, m.l2, m.oob}) put(v, 1);
  std::memcpy(map128, out, sizeof(out));
}

inline SimTensorMap unpack_sim_tensor_map(const void* map128) {
  const auto* in = static_cast<const unsigned char*>(map128);
  size_t at = 0;
  auto get = [&](size_t bytes) {
    uint64_t v = 0;
    std::memcpy(&v, in + at, bytes);
    at += bytes;
    return v;
  };
  SimTensorMap m;
  m.base = get(8);
  for (auto& d : m.dims) d = get(5) + 1;
  for (auto& s : m.strides) s = get(5) * 16;
  for (auto& b : m.box) b = static_cast<uint32_t>(get(1) + 1);
  for (auto& e : m.elem_strides) e = static_cast<uint32_t>(get(1));
  for (uint8_t* v : {&m.dtype, &m.rank, &m.interleave, &m.swizzle, &m.l2, &m.oob}) *v = static_cast<uint8_t>(get(1));
  return m;
}

}  // namespace kjit::testing
