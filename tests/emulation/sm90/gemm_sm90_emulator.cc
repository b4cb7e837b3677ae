// Runs the real kernel_sources/fp8/gemm_sm90.cu (the Hopper FP8 GEMM: warp specialization, an
// mbarrier ring, TMA loads and stores, fp8 wgmma, setmaxnreg, CTA pairs multicasting a shared
// operand, split-K clusters reducing through distributed shared memory) on the host, end to end
// through the public API, as the prefill emulator beside it does (prefill_sm90_emulator.cc): kjit
// plans, compiles the cubin with NVRTC and launches on the stand-in driver
// (tests/support/simulated_driver.cc, an sm_90a device of KJIT_SIM_SMS = 8 SMs so a persistent
// grid's CTAs each walk several tiles), whose launch hook hands the launch here; the kernel text,
// compiled by g++ against the emulated PTX of tests/emulation/sm90/include (a std::thread per CUDA
// thread), computes it from the Params and TMA maps the runtime built. The clusters of a launch
// run one after another, the CTAs of each at once (emu_sm90.hpp: remote arrivals, multicast,
// mapa, the cluster barrier); a lone CTA is a cluster of one.
// Each case is kjit::fp8::gemm with GemmArgs forcing the kernel, tile, CTA pairs and split-K
// (as tests/gpu/fp8_test.cc's run_gemm: fresh random fp8 data, D poisoned with 0xFF, padded rows
// whose padding must stay untouched, a float64 reference). Cases: the persistent unpaired kernel
// on the staged tiles (TMA stores, and the copy-out when D is padded) and wave-fitting tiles
// (direct stores), bf16 and f32, per-tensor and per-channel scales, bias, K not a multiple of 128
// (TMA zero fill); B-pairs (multicast = 2: 64-row tiles, odd tile rows); A-pairs (multicast = 3:
// odd tile columns, a second half of A past M, a wave tile, the 64-row tile's 32-row halves, a
// constant weight on and off, column-major D whose swapped A' is the constant weight, 128x256);
// the planner's small-M choice (operands swapped into the 128x16 and 64x16 tiles, D transposed);
// split-K clusters of 2, 3 and 4, and of 3 on a swapped small tile; then a few of them with
// every wgmma group landing as late as its wait allows (a stage freed or refilled, by either CTA
// of a pair, before its wgmma's wait aborts). KJIT_EMU_CASES=text runs the matching cases only.
// A protocol deadlock aborts after emu_sm90.hpp's kWaitSeconds naming the barrier and what every
// thread of the cluster waits on; a CTA that exits while its peer still arrives on or multicasts
// into it aborts too. CTest runs it (label emulation) with the stand-in's environment
// (tests/CMakeLists.txt).
#include "fp8/gemm_sm90.cu"

#include "emu_launch_hook.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/fp8_gemm_case.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_fp8.hpp"

#include <kjit/ops/fp8.hpp>

#include <cxxabi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {
constexpr uint32_t kCtaSmem = 232448;  // an SM's opt-in dynamic shared memory
constexpr int kMaxCluster = 4;
}  // namespace

// The kernel's `extern __shared__ uint8_t smem_raw[]`: only its address is used (smem_u32), which
// each CTA maps to its own shared memory (Cta::symbol).
namespace kjit::fp8 {
alignas(1024) uint8_t smem_raw[kCtaSmem];
}  // namespace kjit::fp8

namespace {

using kjit::DType;
using kjit::TensorRef;
namespace f8 = kjit::fp8;
namespace kt = kjit::testing;
using kt::Fp8Format;

int g_emulated = 0;      // launches the hook ran
bool g_unknown = false;  // a launch of a kernel not emulated here
unsigned g_grid = 0, g_cluster = 0;  // the last launch's grid and cluster size
std::string g_params;                // and what its Params say of the schedule

// Each CTA's shared memory (a cluster's CTAs at once), and its block barrier and warp scratch.
alignas(1024) uint8_t g_smem[kMaxCluster][kCtaSmem];

/// Runs `kernel` over the launch's grid: its clusters (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, 1-D
/// as kjit launches them; none: clusters of one) one after another, the CTAs of each at once,
/// each CUDA thread a std::thread.
template <class Params>
void run_grid(const CUlaunchConfig& c, void (*kernel)(Params), const Params& p) {
  const unsigned threads = c.blockDimX * c.blockDimY * c.blockDimZ;
  unsigned size = 1;
  for (unsigned i = 0; i < c.numAttrs; ++i) {
    if (c.attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) size = c.attrs[i].value.clusterDim.x;
  }
  if (size < 1 || size > kMaxCluster || c.gridDimX % size != 0 || c.gridDimY != 1 || c.gridDimZ != 1) {
    std::fprintf(stderr, "launch shape not emulated: grid %u x %u x %u, cluster %u\n", c.gridDimX, c.gridDimY,
                 c.gridDimZ, size);
    std::abort();
  }
  g_grid = c.gridDimX, g_cluster = size;
  for (unsigned first = 0; first < c.gridDimX; first += size) {
    emu::sm90::Cluster cluster;
    cluster.size = size;
    cluster.expected = static_cast<int>(size * threads);
    std::vector<std::unique_ptr<emu::sm90::Cta>> ctas;
    std::vector<std::unique_ptr<emu::Block>> blocks;
    for (unsigned r = 0; r < size; ++r) {
      ctas.push_back(std::make_unique<emu::sm90::Cta>());
      emu::sm90::Cta& cta = *ctas.back();
      cta.smem = g_smem[r];
      cta.symbol = f8::smem_raw;
      cta.smem_bytes = c.sharedMemBytes;
      cta.rank = r;
      cta.cluster = &cluster;
      cta.running = static_cast<int>(threads);
      cluster.ctas[r] = &cta;
      emu::sm90::t_my_cta = &cta;
      emu::sm90::start_register_pool(threads);
      emu::sm90::t_my_cta = nullptr;
      blocks.push_back(std::make_unique<emu::Block>());
      blocks.back()->barrier.reset(static_cast<int>(threads));
      for (auto& w : blocks.back()->warps) w.barrier.reset(32);
      std::memset(g_smem[r], 0xFF, sizeof(g_smem[r]));  // NaN (0x7f/0xff fp8, f32) until written
    }
    std::vector<std::thread> ts;
    ts.reserve(size * threads);
    for (unsigned r = 0; r < size; ++r) {
      for (unsigned t = 0; t < threads; ++t) {
        ts.emplace_back([&, r, t] {
          emu::t_thread = {t, 0, 0};
          emu::t_block = {first + r, 0, 0};
          emu::t_grid = {c.gridDimX, c.gridDimY, c.gridDimZ};
          emu::t_cta = blocks[r].get();
          emu::sm90::t_my_cta = ctas[r].get();
          emu::t_async = {};
          emu::sm90::t_wgmma = {};
          emu::sm90::t_phases_seen.clear();
          kernel(p);
          if (!emu::sm90::t_wgmma.open.empty() || !emu::sm90::t_wgmma.committed.empty()) {
            emu::sm90::fail("exited with wgmma groups not waited for");
          }
          --ctas[r]->running;
        });
      }
    }
    for (auto& t : ts) t.join();
  }
}

/// The kernel's barriers by address (the layout of gemm_sm90.cu: the stages from shared address 0,
/// the epilogue's staging, then full[s] and empty[s]), for the deadlock report.
template <int kBM, int kBN, int kStages>
std::string gemm_mbarrier_name(uint32_t bar) {
  const uint32_t bars = kStages * f8::sm90_stage_bytes(kBM, kBN) + f8::sm90_epilogue_bytes(kBN);
  const uint32_t i = (bar - bars) / 8;
  if (bar < bars || (bar - bars) % 8 != 0 || i >= 2 * kStages) return "not one of the ring's barriers";
  return std::string(i < kStages ? "full[" : "empty[") + std::to_string(i % kStages) + "]";
}

template <int kFa, int kFb, bool kF32, int kBM, int kBN, int kStages>
void run_gemm_kernel(const CUlaunchConfig& c, void** params) {
  emu::sm90::g_mbarrier_name = &gemm_mbarrier_name<kBM, kBN, kStages>;
  const f8::GemmSm90Params& p = *static_cast<const f8::GemmSm90Params*>(params[0]);
  g_params = std::to_string(kBM) + "x" + std::to_string(kBN) + "x" + std::to_string(kStages) + " stages, " +
             std::to_string(p.tiles_m) + "x" + std::to_string(p.tiles_n) + " tiles, pairs " +
             std::to_string(p.cluster_m) + "x" + std::to_string(p.cluster_n) + (p.tma_store ? ", TMA stores" : "") +
             (p.const_a ? ", const_a" : "") + (p.const_b ? ", const_b" : "") + (p.d_trans ? ", d_trans" : "") +
             (p.splits > 1 ? ", split-K " + std::to_string(p.splits) : "");
  run_grid(c, &f8::gemm_sm90_kernel<kFa, kFb, kF32, kBM, kBN, kStages>, p);
}

/// The stand-in driver's launch hook: the instantiations emulated here, by demangled name.
void on_launch(const char* name, const CUlaunchConfig* c, void** params) {
  struct Kernel {
    const char* name;
    void (*run)(const CUlaunchConfig&, void**);
  };
#define KJIT_EMU_GEMM(FA, FB, F32, BM, BN, S) \
  {"kjit::fp8::gemm_sm90_kernel<" #FA ", " #FB ", " #F32 ", " #BM ", " #BN ", " #S ">", &run_gemm_kernel<FA, FB, F32, BM, BN, S>}
  static const Kernel kKernels[] = {
      KJIT_EMU_GEMM(0, 0, false, 128, 128, 6), KJIT_EMU_GEMM(0, 0, true, 128, 128, 6),
      KJIT_EMU_GEMM(0, 1, false, 128, 256, 3), KJIT_EMU_GEMM(0, 0, false, 128, 80, 6),
      KJIT_EMU_GEMM(0, 0, true, 128, 160, 6),  KJIT_EMU_GEMM(0, 0, false, 64, 128, 6),
      KJIT_EMU_GEMM(0, 0, false, 128, 16, 8),  KJIT_EMU_GEMM(0, 0, false, 64, 16, 8),
  };
#undef KJIT_EMU_GEMM
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string full = status == 0 && demangled != nullptr ? demangled : name;
  std::free(demangled);
  const size_t open = full.find('(');
  std::string bare = full.substr(0, open);
  if (bare.rfind("void ", 0) == 0) bare = bare.substr(5);
  for (const Kernel& k : kKernels) {
    if (bare == k.name) {
      k.run(*c, params);
      ++g_emulated;
      return;
    }
  }
  std::fprintf(stderr, "launch of a kernel not emulated here: %s\n", full.c_str());
  g_unknown = true;
}

using Scales = kt::GemmScales;
using GCase = kt::Fp8GemmCase;

int g_failed = 0;
int g_cases = 0;

/// Runs case `c` (one launch, emulated) against the float64 reference
/// (kjit::testing::run_fp8_gemm_case).
void check(const GCase& c) {
  static std::random_device device;
  const uint64_t seed = (static_cast<uint64_t>(device()) << 32) | device();
  const std::string what =
      c.describe() + (emu::sm90::g_late_wgmma ? " late-wgmma" : "") + " seed=" + std::to_string(seed);
  // KJIT_EMU_CASES=text: only the cases whose description contains it (say, "multicast=3").
  if (const char* only = std::getenv("KJIT_EMU_CASES"); only != nullptr && what.find(only) == std::string::npos) return;
  ++g_cases;
  const int before = g_emulated;
  const auto start = std::chrono::steady_clock::now();
  try {
    const kt::Fp8GemmResult r = kt::run_fp8_gemm_case(c, seed);
    const bool ok = r.ok() && g_emulated == before + 1 && !g_unknown;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s %s: %s%s [%s; grid %u, clusters of %u; %.1f s]\n", ok ? "ok  " : "FAIL", what.c_str(),
                r.describe().c_str(), g_emulated != before + 1 ? ", not one emulated launch" : "", g_params.c_str(), g_grid,
                g_cluster, secs);
    if (!ok) ++g_failed;
  } catch (const std::exception& e) {
    std::printf("FAIL %s: threw %s\n", what.c_str(), e.what());
    ++g_failed;
  }
  std::fflush(stdout);
}

/// A case the emulator runs: the wgmma kernel forced, operands unpadded, no pairs or split-K
/// unless asked.
GCase gemm(int64_t m, int64_t n, int64_t k, f8::GemmTile t, int multicast = 1, int splits = 1) {
  GCase c;
  c.m = m, c.n = n, c.k = k, c.tile = t, c.multicast = multicast, c.splits = splits;
  c.kernel = f8::GemmKernel::kWgmma;
  c.padded = false;
  return c;
}

}  // namespace

int main() {
  if (!emu::install_launch_hook(&on_launch, "LD_LIBRARY_PATH, KJIT_SIM_HOST_PATH=1, KJIT_SIM_CC=9.0, KJIT_SIM_SMS=8")) return 1;
  kjit::testing::use_device(0);
  using T = f8::GemmTile;

  // 1. Unpaired, persistent (8 SMs: each CTA walks several tiles, the ring running across them).
  // 128x128 at 256 x 1096 (2 x 9 tiles), K = 272 (a partial last k-tile): TMA stores, bf16; then
  // padded D (the copy-out), f32, per-channel scales and a bias.
  {
    GCase c = gemm(256, 1096, 272, T::k128x128);
    check(c);
    c.out = DType::kF32, c.padded = true, c.scales = Scales::kChannel, c.bias = DType::kF32;
    check(c);
  }
  // 128x256 (3 stages), e4m3 x e5m2, M = 333 (a partial third tile row), N = 520 (3 columns, the
  // last one mostly past N), bf16 bias.
  {
    GCase c = gemm(333, 520, 400, T::k128x256);
    c.fb = DType::kE5M2, c.bias = DType::kBF16;
    check(c);
  }
  // Wave-fitting tiles (direct stores): 128x80 at M = 200 over 13 tile columns, bf16; 128x160,
  // f32, one k-tile.
  {
    GCase c = gemm(200, 1000, 656, T::k128x80);
    c.scales = Scales::kChannel;
    check(c);
    c = gemm(200, 1000, 128, T::k128x160);
    c.out = DType::kF32;
    check(c);
  }

  // 2. B-pairs (multicast = 2: a cluster's CTAs take m-tiles 2u, 2u + 1 of one tile column, each
  // loads its A and half of B, multicast into both): the 64-row tile at M = 100 (one pair per
  // column) and M = 40 (the second CTA's tile wholly past M: it loads, multicasts, frees, stores
  // nothing); 128x128 at M = 256 and M = 333 (3 tile rows: the last pair's second CTA idle).
  for (int64_t m : {100, 40}) check(gemm(m, 1096, 656, T::k64x128, 2));
  for (int64_t m : {256, 333}) {
    GCase c = gemm(m, 520, 400, T::k128x128, 2);
    c.scales = Scales::kChannel;
    check(c);
  }
  // A-pairs (multicast = 3: n-tiles 2v, 2v + 1 of one tile row, each loads half of A multicast
  // into both, and its own B): 128x128 at M = 256 and M = 333 over N = 1096 (9 tile columns: the
  // last pair's second CTA has no tile), TMA stores and the padded copy-out, constant weight on
  // and off; M = 150 (the last tile row's second half of A wholly past M: its box clamped); the
  // wave tile 128x80 at M = 200 (13 tile columns), bf16, b_constant on and off.
  {
    GCase c = gemm(256, 1096, 400, T::k128x128, 3);
    check(c);
    c.m = 333, c.padded = true, c.out = DType::kF32, c.scales = Scales::kChannel, c.b_constant = true;
    check(c);
    c = gemm(333, 1096, 272, T::k128x128, 3);
    c.b_constant = true;
    check(c);
    c = gemm(150, 1096, 656, T::k128x128, 3);
    check(c);
    for (bool constant : {false, true}) {
      c = gemm(200, 1000, 656, T::k128x80, 3);
      c.b_constant = constant;
      check(c);
    }
    // 128x256 (3 stages) at M = 333 over N = 520 (3 tile columns: the second pair's second CTA
    // idle), e4m3 x e5m2.
    c = gemm(333, 520, 400, T::k128x256, 3);
    c.fb = DType::kE5M2;
    check(c);
    // The 64-row tile (32-row halves of A) at M = 100 over 9 tile columns, a constant weight.
    c = gemm(100, 1096, 656, T::k64x128, 3);
    c.b_constant = true;
    check(c);
    // Column-major D: the host swaps the operands (A' = B, the constant weight, whose halves are
    // multicast early, before the wait for the previous grid; B' = A): 520 x 1000 becomes
    // 1000 x 520 (8 tile rows, 5 tile columns of 128: odd), f32.
    c = gemm(520, 1000, 400, T::k128x128, 3);
    c.d_colmajor = true, c.b_constant = true, c.out = DType::kF32;
    check(c);
  }

  // 3. Split-K clusters of 2, 3 and 4 (each CTA's partial tile in its shared memory, summed in
  // rank order through ld.shared::cluster): 100 x 256 (2 tiles), K = 1040 (9 k-tiles, uneven
  // slices); f32 at 3 with per-channel scales and a bias.
  // The planner's own choice for a small-M problem (the operands swapped into a small tile).
  check(gemm(16, 1000, 1040, T::kAuto, 0, 0));
  check(gemm(16, 200, 2080, T::kAuto, 0, 0));
  // And with split-K forced: the swapped small tile's cluster reduction through its transposed
  // staging (stage_trans / flush_trans).
  check(gemm(16, 200, 2080, T::kAuto, 0, 3));
  for (int splits : {2, 3, 4}) {
    GCase c = gemm(100, 256, 1040, T::k128x128, 1, splits);
    if (splits == 3) c.out = DType::kF32, c.scales = Scales::kChannel, c.bias = DType::kF32;
    check(c);
  }

  // 4. Every wgmma group landing as late as its wait allows: a stage freed (in either CTA of a
  // pair) or refilled (by either CTA's TMA) before the wgmma reading it has retired aborts.
  emu::sm90::g_late_wgmma = true;
  {
    GCase c = gemm(333, 1096, 272, T::k128x128, 3);
    c.b_constant = true;
    check(c);
    check(gemm(100, 1096, 656, T::k64x128, 2));
    check(gemm(200, 1000, 656, T::k128x80));
    c = gemm(200, 1000, 656, T::k128x80, 3);
    c.b_constant = true;
    check(c);
    check(gemm(100, 256, 1040, T::k128x128, 1, 4));
  }

  std::printf("%d of %d cases failed (%d launches emulated)\n", g_failed, g_cases, g_emulated);
  return g_failed == 0 && g_cases > 0 ? 0 : 1;
}
