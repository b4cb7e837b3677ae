#pragma once
// The PTX building blocks of the fp8 sliding-window decode kernel (mla/swa_decode.cu): mma.sync
// m16n8k16 f16 and m16n8k32 E4M3/E5M2 (kjit/mma.cuh), the E4M3 conversions (kjit/fp8_cvt.cuh),
// cp.async, named barriers, shared addresses, ex2 and prefetch, the CTA's dynamic shared memory,
// the thread-block cluster barrier and distributed shared memory reads (kjit/cluster.cuh: sm_90+,
// used by the cluster split only), plus which of them this arch runs. The kernel reaches this PTX only through this header, so the host emulator
// (tests/emulation/swa/) can stand in for exactly this file. Requires sm_80+ (callers guard with
// KJIT_HAS_SM80).
#include "kjit/config.cuh"
#include "kjit/cluster.cuh"
#include "kjit/cp_async.cuh"
#include "kjit/fast_math.cuh"
#include "kjit/fp8_cvt.cuh"
#include "kjit/mma.cuh"
#include "kjit/named_barrier.cuh"
#include "kjit/prefetch.cuh"
#include "kjit/smem.cuh"

// mma.sync with E4M3/E5M2 operands (m16n8k32) runs natively on sm_89 and sm_120+ (ptxas expands
// it into conversions and f16 mma on sm_90/sm_100): there the kernel multiplies the cached fp8
// bytes as they are. Elsewhere it converts them to f16 and uses the f16 mma; cvt.f16x2.e4m3x2
// exists from sm_89.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
#define KJIT_SWA_FP8_MMA 1
#else
#define KJIT_SWA_FP8_MMA 0
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define KJIT_SWA_CVT_E4M3 1
#else
#define KJIT_SWA_CVT_E4M3 0
#endif

namespace kjit::mla::swa_detail {

/// The CTA's dynamic shared memory, where the kernel's layout (SwaShape) starts. Reached through
/// this header so that the emulator can give each CTA of a cluster its own.
KJIT_DEVICE unsigned char* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char swa_dynamic_smem[];
  return swa_dynamic_smem;
}

}  // namespace kjit::mla::swa_detail
