#pragma once
// The PTX building blocks of the mma.sync attention kernels (decode.cu, prefill.cu): mma.sync
// m16n8k16 bf16 and ldmatrix (kjit/mma.cuh), cp.async (kjit/cp_async.cuh), shared addresses
// (kjit/smem.cuh) and bf16 packing (kjit/f16_bits.cuh), plus the XOR swizzle of their
// shared-memory tiles and the dynamic shared-memory base. The kernels reach this PTX only through
// this header, so the host emulator (tests/emulation/) can stand in for exactly this file.
//
// Requires sm_80+ (mma.sync bf16, ldmatrix, cp.async). Callers guard with KJIT_HAS_SM80.
#include "kjit/config.cuh"
#include "kjit/cp_async.cuh"
#include "kjit/mma.cuh"
#include "kjit/f16_bits.cuh"
#include "kjit/smem.cuh"

namespace kjit::attention {

/// The CTA's dynamic shared memory (the bytes its launch reserved), 128-byte aligned. Kernels
/// take their base from here rather than declaring the extern array themselves, so the host
/// emulator can give each CTA of a cluster its own.
KJIT_DEVICE uint8_t* dynamic_smem() {
  extern __shared__ __align__(128) uint8_t kjit_attention_dynamic_smem[];
  return kjit_attention_dynamic_smem;
}

/// Byte offset of 16-byte chunk `chunk` of row `row` in a row-major tile of `kRowBytes`-byte rows
/// (kRowBytes a multiple of 128). The chunk index is XORed with row % 8, so the eight row
/// addresses one ldmatrix phase reads (same logical chunk, eight consecutive rows) land in eight
/// different 16-byte bank groups, and a warp's cp.async stores of whole rows stay conflict-free.
template <int kRowBytes>
KJIT_DEVICE uint32_t swizzle_offset(int row, int chunk) {
  static_assert(kRowBytes % 128 == 0, "swizzled rows must span whole 128-byte bank sweeps");
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

}  // namespace kjit::attention
