#pragma once
// Hopper (sm_90a) warpgroup MMA: wgmma.mma_async with bf16 or E4M3/E5M2 inputs and f32
// accumulators, its fences and group waits (the shared-memory matrix descriptors its operands
// are read through: kjit/wgmma_desc.cuh), and setmaxnreg (the register split between the producer and consumer
// warpgroups of a warp-specialized kernel). Callers compile these only for sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL).
//
// Accumulator layout of an m64nN step (PTX ISA, "wgmma D fragments"): thread t of the warpgroup,
// warp w = t / 32, lane l: d[4j + r] = D[16w + l/4 + 8(r/2)][8j + 2(l%4) + (r%2)], j < N / 8.
#include "kjit/config.cuh"
#include "kjit/fp8_format.h"
#include "kjit/wgmma_desc.cuh"

// wgmma accumulator operand lists: the N / 2 f32 registers d[0..] of an m64nN step, as asm
// outputs (KJIT_SM90_ACC<n>) and as the matching "{%0, ..., %<n-1>}" register vector
// (KJIT_SM90_ACC<n>_REGS); the asm's own inputs follow at %<n>. Built from blocks of eight
// (KJIT_SM90_D<i>: d[8i .. 8i+7]; KJIT_SM90_R<i>: "%8i, ..., %8i+7").
#define KJIT_SM90_D0 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define KJIT_SM90_R0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define KJIT_SM90_D1 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define KJIT_SM90_R1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define KJIT_SM90_D2 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define KJIT_SM90_R2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define KJIT_SM90_D3 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define KJIT_SM90_R3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define KJIT_SM90_D4 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define KJIT_SM90_R4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define KJIT_SM90_D5 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define KJIT_SM90_R5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define KJIT_SM90_D6 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define KJIT_SM90_R6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define KJIT_SM90_D7 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define KJIT_SM90_R7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define KJIT_SM90_D8 "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define KJIT_SM90_R8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define KJIT_SM90_D9 "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define KJIT_SM90_R9 "%72, %73, %74, %75, %76, %77, %78, %79"
#define KJIT_SM90_D10 "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define KJIT_SM90_R10 "%80, %81, %82, %83, %84, %85, %86, %87"
#define KJIT_SM90_D11 "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define KJIT_SM90_R11 "%88, %89, %90, %91, %92, %93, %94, %95"
#define KJIT_SM90_D12 "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103])
#define KJIT_SM90_R12 "%96, %97, %98, %99, %100, %101, %102, %103"
#define KJIT_SM90_D13 "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define KJIT_SM90_R13 "%104, %105, %106, %107, %108, %109, %110, %111"
#define KJIT_SM90_D14 "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119])
#define KJIT_SM90_R14 "%112, %113, %114, %115, %116, %117, %118, %119"
#define KJIT_SM90_D15 "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define KJIT_SM90_R15 "%120, %121, %122, %123, %124, %125, %126, %127"
#define KJIT_SM90_ACC8 KJIT_SM90_D0
#define KJIT_SM90_ACC8_REGS "{" KJIT_SM90_R0 "}"
#define KJIT_SM90_ACC16 KJIT_SM90_D0, KJIT_SM90_D1
#define KJIT_SM90_ACC16_REGS "{" KJIT_SM90_R0 ", " KJIT_SM90_R1 "}"
#define KJIT_SM90_ACC32 KJIT_SM90_D0, KJIT_SM90_D1, KJIT_SM90_D2, KJIT_SM90_D3
#define KJIT_SM90_ACC32_REGS "{" KJIT_SM90_R0 ", " KJIT_SM90_R1 ", " KJIT_SM90_R2 ", " KJIT_SM90_R3 "}"
#define KJIT_SM90_ACC40 KJIT_SM90_D0, KJIT_SM90_D1, KJIT_SM90_D2, KJIT_SM90_D3, KJIT_SM90_D4
#define KJIT_SM90_ACC40_REGS "{" KJIT_SM90_R0 ", " KJIT_SM90_R1 ", " KJIT_SM90_R2 ", " KJIT_SM90_R3 ", " KJIT_SM90_R4 "}"
#define KJIT_SM90_ACC48 KJIT_SM90_D0, KJIT_SM90_D1, KJIT_SM90_D2, KJIT_SM90_D3, KJIT_SM90_D4, KJIT_SM90_D5
#define KJIT_SM90_ACC48_REGS "{" KJIT_SM90_R0 ", " KJIT_SM90_R1 ", " KJIT_SM90_R2 ", " KJIT_SM90_R3 ", " KJIT_SM90_R4 ", " KJIT_SM90_R5 "}"
#define KJIT_SM90_ACC56 KJIT_SM90_D0, KJIT_SM90_D1, KJIT_SM90_D2, KJIT_SM90_D3, KJIT_SM90_D4, KJIT_SM90_D5, KJIT_SM90_D6
#define KJIT_SM90_ACC56_REGS "{" KJIT_SM90_R0 ", " KJIT_SM90_R1 ", " KJIT_SM90_R2 ", " KJIT_SM90_R3 ", " KJIT_SM90_R4 ", " KJIT_SM90_R5 ", " KJIT_SM90_R6 "}"
#define KJIT_SM90_ACC64 KJIT_SM90_D0, KJIT_SM90_D1, KJIT_SM90_D2, KJIT_SM90_D3, KJIT_SM90_D4, KJIT_SM90_D5, KJIT_SM90_D6, KJIT_SM90_D7
#define KJIT_SM90_ACC64_REGS "{" KJIT_SM90_R0 ", " KJIT_SM90_R1 ", " KJIT_SM90_R2 ", " KJIT_SM90_R3 ", " KJIT_SM90_R4 ", " KJIT_SM90_R5 ", " KJIT_SM90_R6 ", " KJIT_SM90_R7 "}"
#define KJIT_SM90_ACC80 KJIT_SM90_D0, KJIT_SM90_D1, KJIT_SM90_D2, KJIT_SM90_D3, KJIT_SM90_D4, KJIT_SM90_D5, KJIT_SM90_D6, KJIT_SM90_D7, KJIT_SM90_D8, KJIT_SM90_D9
#define KJIT_SM90_ACC80_REGS "{" KJIT_SM90_R0 ", " KJIT_SM90_R1 ", " KJIT_SM90_R2 ", " KJIT_SM90_R3 ", " KJIT_SM90_R4 ", " KJIT_SM90_R5 ", " KJIT_SM90_R6 ", " KJIT_SM90_R7 ", " KJIT_SM90_R8 ", " KJIT_SM90_R9 "}"
#define KJIT_SM90_ACC96 KJIT_SM90_D0, KJIT_SM90_D1, KJIT_SM90_D2, KJIT_SM90_D3, KJIT_SM90_D4, KJIT_SM90_D5, KJIT_SM90_D6, KJIT_SM90_D7, KJIT_SM90_D8, KJIT_SM90_D9, KJIT_SM90_D10, KJIT_SM90_D11
#define KJIT_SM90_ACC96_REGS "{" KJIT_SM90_R0 ", " KJIT_SM90_R1 ", " KJIT_SM90_R2 ", " KJIT_SM90_R3 ", " KJIT_SM90_R4 ", " KJIT_SM90_R5 ", " KJIT_SM90_R6 ", " KJIT_SM90_R7 ", " KJIT_SM90_R8 ", " KJIT_SM90_R9 ", " KJIT_SM90_R10 ", " KJIT_SM90_R11 "}"
#define KJIT_SM90_ACC112 KJIT_SM90_D0, KJIT_SM90_D1, KJIT_SM90_D2, KJIT_SM90_D3, KJIT_SM90_D4, KJIT_SM90_D5, KJIT_SM90_D6, KJIT_SM90_D7, KJIT_SM90_D8, KJIT_SM90_D9, KJIT_SM90_D10, KJIT_SM90_D11, KJIT_SM90_D12, KJIT_SM90_D13
#define KJIT_SM90_ACC112_REGS "{" KJIT_SM90_R0 ", " KJIT_SM90_R1 ", " KJIT_SM90_R2 ", " KJIT_SM90_R3 ", " KJIT_SM90_R4 ", " KJIT_SM90_R5 ", " KJIT_SM90_R6 ", " KJIT_SM90_R7 ", " KJIT_SM90_R8 ", " KJIT_SM90_R9 ", " KJIT_SM90_R10 ", " KJIT_SM90_R11 ", " KJIT_SM90_R12 ", " KJIT_SM90_R13 "}"
#define KJIT_SM90_ACC128 KJIT_SM90_D0, KJIT_SM90_D1, KJIT_SM90_D2, KJIT_SM90_D3, KJIT_SM90_D4, KJIT_SM90_D5, KJIT_SM90_D6, KJIT_SM90_D7, KJIT_SM90_D8, KJIT_SM90_D9, KJIT_SM90_D10, KJIT_SM90_D11, KJIT_SM90_D12, KJIT_SM90_D13, KJIT_SM90_D14, KJIT_SM90_D15
#define KJIT_SM90_ACC128_REGS "{" KJIT_SM90_R0 ", " KJIT_SM90_R1 ", " KJIT_SM90_R2 ", " KJIT_SM90_R3 ", " KJIT_SM90_R4 ", " KJIT_SM90_R5 ", " KJIT_SM90_R6 ", " KJIT_SM90_R7 ", " KJIT_SM90_R8 ", " KJIT_SM90_R9 ", " KJIT_SM90_R10 ", " KJIT_SM90_R11 ", " KJIT_SM90_R12 ", " KJIT_SM90_R13 ", " KJIT_SM90_R14 ", " KJIT_SM90_R15 "}"

namespace kjit::sm90 {

KJIT_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
KJIT_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
KJIT_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

/// Register budget of the producer (decrease) and consumer (increase) warpgroups.
template <int kRegs>
KJIT_DEVICE void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
KJIT_DEVICE void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// --- bf16: m64nNk16 (32 or 64 f32 accumulators per thread) ---------------------------------

#define KJIT_WGMMA_BF16_SS_N64                                                                      \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                                       \
      KJIT_SM90_ACC32_REGS ", "                                                                     \
      "%32, %33, p, 1, 1, 0, 0;\n}\n"                                                               \
      : KJIT_SM90_ACC32                                                                             \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

#define KJIT_WGMMA_BF16_RS_N64                                                                      \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                                       \
      KJIT_SM90_ACC32_REGS ", "                                                                     \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                                 \
      : KJIT_SM90_ACC32                                                                             \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

#define KJIT_WGMMA_BF16_SS_N128                                                                     \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "                                      \
      KJIT_SM90_ACC64_REGS ", "                                                                     \
      "%64, %65, p, 1, 1, 0, 0;\n}\n"                                                               \
      : KJIT_SM90_ACC64                                                                             \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

#define KJIT_WGMMA_BF16_RS_N128                                                                     \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                  \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "                                      \
      KJIT_SM90_ACC64_REGS ", "                                                                     \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                 \
      : KJIT_SM90_ACC64                                                                             \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

/// d (+)= A · B for one m64nNk16 bf16 step of the warpgroup, A (64 × 16) and B (N × 16) both
/// K-major from shared-memory descriptors; scale_d = 0 overwrites d.
template <int kN>
KJIT_DEVICE void wgmma_bf16_ss(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d) {
  static_assert(kN == 64 || kN == 128, "wgmma N");
  if constexpr (kN == 64) {
    KJIT_WGMMA_BF16_SS_N64;
  } else {
    KJIT_WGMMA_BF16_SS_N128;
  }
}

/// d (+)= A · B for one m64nNk16 bf16 step, A from registers and B from an MN-major
/// (transposed) shared-memory descriptor. A fragment (as mma.m16n8k16's, per warp's 16 rows):
/// a[0] = (row l/4, k 2(l%4)..+1), a[1] = (row l/4 + 8, same k), a[2] = (row l/4, k + 8),
/// a[3] = (row l/4 + 8, k + 8), bf16x2 with the lower k in the low half. So the D fragments of two
/// adjacent n8 tiles, packed to bf16, are the A fragment of one k16 step (P stays in registers).
template <int kN>
KJIT_DEVICE void wgmma_bf16_rs_tb(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc_b, uint32_t scale_d) {
  static_assert(kN == 64 || kN == 128, "wgmma N");
  if constexpr (kN == 64) {
    KJIT_WGMMA_BF16_RS_N64;
  } else {
    KJIT_WGMMA_BF16_RS_N128;
  }
}

#undef KJIT_WGMMA_BF16_SS_N64
#undef KJIT_WGMMA_BF16_RS_N64
#undef KJIT_WGMMA_BF16_SS_N128
#undef KJIT_WGMMA_BF16_RS_N128

// --- fp8 (E4M3 / E5M2): m64nNk32 ----------------------------------------------------------

// m64nNk32: N / 2 f32 accumulators per thread (KJIT_SM90_ACC<N/2>), then desc_a, desc_b and
// scale_d at %<N/2>, %<N/2 + 1>, %<N/2 + 2>.
#define KJIT_WGMMA_M64NK32(N, ACC, ACC_REGS, IN_A, IN_B, IN_SCALE, TA, TB)                           \
  asm volatile(                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, " IN_SCALE ", 0;\n"                                           \
      "wgmma.mma_async.sync.aligned.m64n" N "k32.f32." TA "." TB " "                                 \
      ACC_REGS ", " IN_A ", " IN_B ", p, 1, 1;\n}\n"                                                   \
      : ACC                                                                                         \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define KJIT_WGMMA_M64N16K32(TA, TB) \
  KJIT_WGMMA_M64NK32("16", KJIT_SM90_ACC8, KJIT_SM90_ACC8_REGS, "%8", "%9", "%10", TA, TB)
#define KJIT_WGMMA_M64N32K32(TA, TB) \
  KJIT_WGMMA_M64NK32("32", KJIT_SM90_ACC16, KJIT_SM90_ACC16_REGS, "%16", "%17", "%18", TA, TB)
#define KJIT_WGMMA_M64N64K32(TA, TB) \
  KJIT_WGMMA_M64NK32("64", KJIT_SM90_ACC32, KJIT_SM90_ACC32_REGS, "%32", "%33", "%34", TA, TB)
#define KJIT_WGMMA_M64N80K32(TA, TB) \
  KJIT_WGMMA_M64NK32("80", KJIT_SM90_ACC40, KJIT_SM90_ACC40_REGS, "%40", "%41", "%42", TA, TB)
#define KJIT_WGMMA_M64N96K32(TA, TB) \
  KJIT_WGMMA_M64NK32("96", KJIT_SM90_ACC48, KJIT_SM90_ACC48_REGS, "%48", "%49", "%50", TA, TB)
#define KJIT_WGMMA_M64N112K32(TA, TB) \
  KJIT_WGMMA_M64NK32("112", KJIT_SM90_ACC56, KJIT_SM90_ACC56_REGS, "%56", "%57", "%58", TA, TB)
#define KJIT_WGMMA_M64N128K32(TA, TB) \
  KJIT_WGMMA_M64NK32("128", KJIT_SM90_ACC64, KJIT_SM90_ACC64_REGS, "%64", "%65", "%66", TA, TB)
#define KJIT_WGMMA_M64N160K32(TA, TB) \
  KJIT_WGMMA_M64NK32("160", KJIT_SM90_ACC80, KJIT_SM90_ACC80_REGS, "%80", "%81", "%82", TA, TB)
#define KJIT_WGMMA_M64N192K32(TA, TB) \
  KJIT_WGMMA_M64NK32("192", KJIT_SM90_ACC96, KJIT_SM90_ACC96_REGS, "%96", "%97", "%98", TA, TB)
#define KJIT_WGMMA_M64N224K32(TA, TB) \
  KJIT_WGMMA_M64NK32("224", KJIT_SM90_ACC112, KJIT_SM90_ACC112_REGS, "%112", "%113", "%114", TA, TB)
#define KJIT_WGMMA_M64N256K32(TA, TB) \
  KJIT_WGMMA_M64NK32("256", KJIT_SM90_ACC128, KJIT_SM90_ACC128_REGS, "%128", "%129", "%130", TA, TB)

/// d (+)= A · B for one m64nNk32 step of the warpgroup: A 64 × 32 in format kFa and B N × 32 in
/// format kFb (fp8::kFormatE4M3 / fp8::kFormatE5M2), both K-major from shared-memory descriptors;
/// scale_d = 0 overwrites d.
template <int kN, int kFa, int kFb>
KJIT_DEVICE void wgmma_fp8(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d) {
  static_assert(kN == 16 || kN == 32 || kN == 64 || kN == 80 || kN == 96 || kN == 112 || kN == 128 || kN == 160 ||
                    kN == 192 || kN == 224 || kN == 256,
                "wgmma N (those the fp8 GEMM's tiles use)");
#define KJIT_WGMMA_PICK(M)                                                                          \
  if constexpr (kFa == fp8::kFormatE4M3 && kFb == fp8::kFormatE4M3) {                               \
    M("e4m3", "e4m3");                                                                              \
  } else if constexpr (kFa == fp8::kFormatE4M3 && kFb == fp8::kFormatE5M2) {                        \
    M("e4m3", "e5m2");                                                                              \
  } else if constexpr (kFa == fp8::kFormatE5M2 && kFb == fp8::kFormatE4M3) {                        \
    M("e5m2", "e4m3");                                                                              \
  } else {                                                                                          \
    M("e5m2", "e5m2");                                                                              \
  }
  if constexpr (kN == 16) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N16K32)
  } else if constexpr (kN == 32) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N32K32)
  } else if constexpr (kN == 64) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N64K32)
  } else if constexpr (kN == 80) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N80K32)
  } else if constexpr (kN == 96) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N96K32)
  } else if constexpr (kN == 112) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N112K32)
  } else if constexpr (kN == 128) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N128K32)
  } else if constexpr (kN == 160) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N160K32)
  } else if constexpr (kN == 192) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N192K32)
  } else if constexpr (kN == 224) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N224K32)
  } else if constexpr (kN == 256) {
    KJIT_WGMMA_PICK(KJIT_WGMMA_M64N256K32)
  }
#undef KJIT_WGMMA_PICK
}

#undef KJIT_WGMMA_M64NK32
#undef KJIT_WGMMA_M64N16K32
#undef KJIT_WGMMA_M64N32K32
#undef KJIT_WGMMA_M64N64K32
#undef KJIT_WGMMA_M64N80K32
#undef KJIT_WGMMA_M64N96K32
#undef KJIT_WGMMA_M64N112K32
#undef KJIT_WGMMA_M64N128K32
#undef KJIT_WGMMA_M64N160K32
#undef KJIT_WGMMA_M64N192K32
#undef KJIT_WGMMA_M64N224K32
#undef KJIT_WGMMA_M64N256K32

}  // namespace kjit::sm90
