#pragma once
// The shared-memory matrix descriptors wgmma reads its shared-memory operands through (PTX ISA
// "Matrix Descriptor Format"): plain bit packing, no PTX, so the host emulation of wgmma
// (tests/emulation/sm90) encodes operands with these same functions.
#include "kjit/config.cuh"

namespace kjit::sm90 {

/// Shared-memory matrix descriptor of a K-major tile written by TMA with 128-byte swizzling:
/// rows of 128 bytes, 8-row (1024-byte) swizzle atoms. Start address (bits 0-13, >> 4), leading
/// byte offset (bits 16-29) unused for swizzled K-major layouts, stride byte offset (bits 32-45)
/// = 1024 between 8-row groups, swizzle mode 1 = 128B (bits 62-63). The tile base is
/// 1024-byte aligned; a k step inside the 128-byte row advances the start address by its bytes.
KJIT_DEVICE uint64_t smem_desc_k128(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3ffff) >> 4) | (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}

/// Shared-memory matrix descriptor of an MN-major operand written by TMA with the 128-byte
/// swizzle (PTX ISA "Matrix Descriptor Format"; CUTLASS's canonical GMMA layout
/// Swizzle<3,4,3> o ((8,n),(8,k)) : ((1,LBO),(8,SBO)) in 16-byte units): rows of 128 bytes along
/// MN (64 bf16), one row per k; 8-row (1024-byte) swizzle atoms. Stride byte offset (bits 32-45)
/// = 1024 between 8-row groups along k; leading byte offset (bits 16-29) = `mn_block_bytes`
/// between consecutive 64-element blocks along MN. The base is 1024-byte aligned.
KJIT_DEVICE uint64_t smem_desc_mn128(uint32_t addr, uint32_t mn_block_bytes) {
  return static_cast<uint64_t>((addr & 0x3ffff) >> 4) | (static_cast<uint64_t>((mn_block_bytes >> 4) & 0x3fff) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (1ull << 62);
}

}  // namespace kjit::sm90
