// Runs the real kernel_sources/attention/prefill_sm90.cu kernels (the sm_90a dense prefill and
// the ragged paged prefill: warp specialization, mbarriers, named barriers, TMA, wgmma) on the
// host, end to end through the public API: kjit plans, uploads, compiles the cubin with NVRTC
// and launches on the stand-in driver (tests/support/simulated_driver.cc, as an sm_90a device
// whose memory is host memory), whose launch hook hands the launch here; the kernel text,
// compiled by g++ against the emulated PTX of tests/emulation/sm90/include (a std::thread per
// CUDA thread, one CTA at a time), computes it from the Params and TMA maps the runtime built.
// Each case is the GPU suite's runner (kjit::testing::run_paged_prefill_case / run_prefill_case:
// fresh random data, poisoned outputs, NaN in unused page slots and dead K/V rows, float64
// reference). Dense: TMA loads of Q, K and V and the TMA store of O, ragged tails, GQA, both head
// dims, causal and not, LSE. Paged: TMA page loads and the
// gathered tail tile, the gather at any page size, the persistent schedule over few CTAs (the K/V
// ring, Q handover and pingpong turns carried across units), a CTA per unit, packed GQA, both
// head dims, the 192-row tile, causal and not, LSE; then copies and wgmma groups landing at the
// last moment their waits allow, where a shared-memory write under an unretired wgmma aborts (a
// stage released before its wgmma's wait: moving the V release above its wait fails here, as does
// loading a request's tail tile by TMA, whose rows past kv_len read the pool's NaN slots).
// CTest runs it (label emulation) with the stand-in's environment (tests/CMakeLists.txt).
#include "attention/prefill_sm90.cu"

#include "emu_launch_hook.hpp"
#include "tools/testing/gpu.hpp"
#include "tools/testing/reference_attention.hpp"

#include <kjit/ops/attention.hpp>


#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {
constexpr uint32_t kCtaSmem = 232448;  // an SM's opt-in dynamic shared memory
}  // namespace

// The kernels' `extern __shared__ uint8_t smem_raw[]`.
namespace kjit::attention::detail {
alignas(1024) uint8_t smem_raw[kCtaSmem];
}  // namespace kjit::attention::detail

namespace {

using kjit::attention::PrefillParams;
namespace ka = kjit::attention;

int g_emulated = 0;      // launches the hook ran
bool g_unknown = false;  // a launch of a kernel not emulated here

/// Runs `kernel` over the launch's grid, one CTA at a time, each CUDA thread a std::thread.
template <class Params>
void run_grid(const CUlaunchConfig& c, void (*kernel)(const Params&), const Params& p) {
  const unsigned threads = c.blockDimX * c.blockDimY * c.blockDimZ;
  for (unsigned z = 0; z < c.gridDimZ; ++z) {
    for (unsigned y = 0; y < c.gridDimY; ++y) {
      for (unsigned x = 0; x < c.gridDimX; ++x) {
        emu::sm90::Cta cta;
        cta.smem = ka::detail::smem_raw;
        cta.smem_bytes = c.sharedMemBytes;
        emu::sm90::g_cta = &cta;
        emu::sm90::start_register_pool(threads);
        emu::g_block.barrier.reset(static_cast<int>(threads));
        for (auto& w : emu::g_block.warps) w.barrier.reset(32);
        std::memset(ka::detail::smem_raw, 0xFF, sizeof(ka::detail::smem_raw));  // bf16 NaN until written
        std::vector<std::thread> ts;
        ts.reserve(threads);
        for (unsigned t = 0; t < threads; ++t) {
          ts.emplace_back([&, t, x, y, z] {
            emu::t_thread = {t, 0, 0};
            emu::t_block = {x, y, z};
            emu::t_grid = {c.gridDimX, c.gridDimY, c.gridDimZ};
            emu::t_async = {};
            emu::sm90::t_wgmma = {};
            kernel(p);
            if (!emu::t_async.open.empty() || !emu::t_async.committed.empty()) {
              emu::sm90::fail("exited with cp.async copies in flight");
            }
            if (!emu::sm90::t_wgmma.open.empty() || !emu::sm90::t_wgmma.committed.empty()) {
              emu::sm90::fail("exited with wgmma groups not waited for");
            }
          });
        }
        for (auto& t : ts) t.join();
        emu::sm90::g_cta = nullptr;
      }
    }
  }
}

template <int kHeadDim, int kRows, bool kTma>
void paged_kernel(const PrefillParams& p) {
  ka::paged_prefill_sm90_kernel<kHeadDim, kRows, kTma>(p);
}
template <int kHeadDim>
void dense_kernel(const ka::PrefillSm90Params& p) {
  ka::prefill_sm90_kernel<kHeadDim>(p);
}
template <int kHeadDim, int kRows, bool kTma>
void run_paged(const CUlaunchConfig& c, void** params) {
  run_grid(c, &paged_kernel<kHeadDim, kRows, kTma>, *static_cast<const PrefillParams*>(params[0]));
}
template <int kHeadDim>
void run_dense(const CUlaunchConfig& c, void** params) {
  run_grid(c, &dense_kernel<kHeadDim>, *static_cast<const ka::PrefillSm90Params*>(params[0]));
}

/// The stand-in driver's launch hook: the kernels emulated here, by lowered name.
void on_launch(const char* name, const CUlaunchConfig* c, void** params) {
  struct Kernel {
    const char* lowered;
    void (*run)(const CUlaunchConfig&, void**);
  };
  static const Kernel kKernels[] = {
      {"_ZN4kjit9attention25paged_prefill_sm90_kernelILi128ELi128ELb0EEEvNS0_13PrefillParamsE", &run_paged<128, 128, false>},
      {"_ZN4kjit9attention25paged_prefill_sm90_kernelILi128ELi128ELb1EEEvNS0_13PrefillParamsE", &run_paged<128, 128, true>},
      {"_ZN4kjit9attention25paged_prefill_sm90_kernelILi64ELi128ELb0EEEvNS0_13PrefillParamsE", &run_paged<64, 128, false>},
      {"_ZN4kjit9attention25paged_prefill_sm90_kernelILi64ELi128ELb1EEEvNS0_13PrefillParamsE", &run_paged<64, 128, true>},
      {"_ZN4kjit9attention25paged_prefill_sm90_kernelILi64ELi192ELb0EEEvNS0_13PrefillParamsE", &run_paged<64, 192, false>},
      {"_ZN4kjit9attention25paged_prefill_sm90_kernelILi64ELi192ELb1EEEvNS0_13PrefillParamsE", &run_paged<64, 192, true>},
      {"_ZN4kjit9attention19prefill_sm90_kernelILi128EEEvNS0_17PrefillSm90ParamsE", &run_dense<128>},
      {"_ZN4kjit9attention19prefill_sm90_kernelILi64EEEvNS0_17PrefillSm90ParamsE", &run_dense<64>},
  };
  for (const Kernel& k : kKernels) {
    if (std::strcmp(name, k.lowered) == 0) {
      k.run(*c, params);
      ++g_emulated;
      return;
    }
  }
  std::fprintf(stderr, "launch of a kernel not emulated here: %s\n", name);
  g_unknown = true;
}

/// A case for the Hopper kernel (kjit::testing::paged_prefill_case, the wgmma variant forced).
kjit::testing::PagedPrefillCase ragged(std::vector<int> q, std::vector<int> kv, int hq, int hkv, int hd, int page,
                                       bool causal) {
  kjit::testing::PagedPrefillCase c =
      kjit::testing::paged_prefill_case(std::move(q), std::move(kv), hq, hkv, hd, page, causal);
  c.variant = ka::AttentionVariant::kWgmma;
  return c;
}

int g_failed = 0;
int g_cases = 0;

kjit::testing::AttentionCaseResult run_case(const kjit::testing::PagedPrefillCase& c, uint64_t seed) {
  return kjit::testing::run_paged_prefill_case(c, seed);
}
kjit::testing::AttentionCaseResult run_case(const kjit::testing::PrefillCase& c, uint64_t seed) {
  return kjit::testing::run_prefill_case(c, seed);
}

/// Runs case `c` (its one launch emulated) against the float64 reference.
template <class Case>
void check(const Case& c) {
  static std::random_device device;
  const uint64_t seed = (static_cast<uint64_t>(device()) << 32) | device();
  const int before = g_emulated;
  std::string what = c.describe() + " seed=" + std::to_string(seed) +
                     (emu::g_late_copies ? " late copies" : "") + (emu::sm90::g_late_wgmma ? " late wgmma" : "");
  ++g_cases;
  try {
    const kjit::testing::AttentionCaseResult r = run_case(c, seed);
    const bool ok = r.ok(1e-2, 1e-4) && g_emulated == before + 1 && !g_unknown;
    std::printf("%s %s: %s\n", ok ? "ok  " : "FAIL", what.c_str(), r.describe().c_str());
    if (!ok) ++g_failed;
  } catch (const std::exception& e) {
    std::printf("FAIL %s: threw %s\n", what.c_str(), e.what());
    ++g_failed;
  }
  std::fflush(stdout);
}

}  // namespace

int main() {
  if (!emu::install_launch_hook(&on_launch, "LD_LIBRARY_PATH, KJIT_SIM_HOST_PATH=1, KJIT_SIM_CC=9.0")) return 1;
  kjit::testing::use_device(0);
  using ka::PackGqa;
  using ka::PageLoad;

  // The dense kernel: q tiles past a ragged end (TMA clips the store), a causal diagonal with
  // more keys than queries (chunked prefill), GQA 1 and 4, both head dims (hd64: 192-row tiles).
  for (int hd : {64, 128}) {
    for (bool causal : {false, true}) {
      kjit::testing::PrefillCase c =
          kjit::testing::prefill_case(2, causal ? 200 : 77, causal ? 333 : 260, causal ? 8 : 2, 2, hd, causal);
      c.variant = ka::AttentionVariant::kWgmma;
      check(c);
    }
  }
  // A warpgroup whose rows attend fewer KV tiles than its CTA skips the first ones: rows past q_len
  // (the last q tile's 8 rows leave one or two warpgroups none) over 8 tiles, more than the ring's
  // stages, and the causal diagonal's short rows.
  for (int hd : {64, 128}) {
    kjit::testing::PrefillCase c = kjit::testing::prefill_case(1, hd == 64 ? 200 : 136, 1000, 4, 2, hd, true);
    c.variant = ka::AttentionVariant::kWgmma;
    check(c);
  }
  // TMA page loads over pages of 16, 32 and 64 tokens: KV ending on a tile (no gathered tail), on
  // a page, inside a page, one key, none; persistent over 2 CTAs and a CTA per unit; packed
  // causal, unpacked full; hd128, and hd64 at 192 and 128 rows.
  const std::vector<int> q = {64, 300, 1, 77, 5, 129};
  const std::vector<int> kv = {256, 400, 1, 333, 0, 129};
  for (int page : {16, 32, 64}) {
    for (bool causal : {false, true}) {
      kjit::testing::PagedPrefillCase c = ragged(q, kv, 8, 2, 128, page, causal);
      c.tile_rows = 128;
      c.pack_gqa = causal ? PackGqa::kOn : PackGqa::kOff;
      c.page_load = PageLoad::kTma;
      c.max_ctas = page == 32 ? 0 : 2;
      c.persistent = page != 32;
      check(c);
    }
  }
  // The same at hd64: the 192-row tile (three consumer warpgroups) and the 128-row one.
  for (int rows : {192, 128}) {
    const bool causal = rows == 192;
    kjit::testing::PagedPrefillCase c = ragged(q, kv, 8, 2, 64, rows == 192 ? 16 : 32, causal);
    c.tile_rows = rows;
    c.pack_gqa = causal ? PackGqa::kOn : PackGqa::kOff;
    c.page_load = PageLoad::kTma;
    c.max_ctas = 2;
    c.persistent = causal;
    check(c);
  }
  // The gather: pages of 1 and 3 tokens, GQA 1/3/4, both head dims, the 192-row tile at hd64,
  // rows that see no key (q > kv under causal), empty requests; persistent on 3 CTAs and not.
  const std::vector<int> q2 = {1, 0, 191, 43, 200};
  const std::vector<int> kv2 = {1, 40, 300, 40, 260};
  for (int hd : {64, 128}) {
    for (int ratio : {1, 3, 4}) {
      kjit::testing::PagedPrefillCase c = ragged(q2, kv2, 2 * ratio, 2, hd, ratio == 3 ? 3 : 1, ratio != 1);
      c.tile_rows = 128;
      c.pack_gqa = ratio == 4 ? PackGqa::kOn : PackGqa::kOff;
      c.page_load = PageLoad::kGather;
      c.max_ctas = 3;
      c.persistent = ratio != 3;
      check(c);
      if (hd == 64) {
        c.tile_rows = 192;
        check(c);
      }
    }
  }
  // The same on the stage ring wrapped many times over one CTA, then with every copy and every
  // wgmma group landing as late as its wait allows.
  kjit::testing::PagedPrefillCase one = ragged({300, 1, 129}, {1000, 300, 129}, 4, 2, 128, 16, true);
  one.tile_rows = 128;
  one.pack_gqa = PackGqa::kOn;
  one.max_ctas = 1;
  for (PageLoad load : {PageLoad::kTma, PageLoad::kGather}) {
    one.page_load = load;
    check(one);
  }
  emu::g_late_copies = true;
  emu::sm90::g_late_wgmma = true;
  for (PageLoad load : {PageLoad::kTma, PageLoad::kGather}) {
    one.page_load = load;
    check(one);
  }
  kjit::testing::PagedPrefillCase wide = ragged(q2, kv2, 8, 2, 64, 16, true);
  wide.tile_rows = 192;
  wide.max_ctas = 2;
  check(wide);

  std::printf("%d of %d cases failed (%d launches emulated)\n", g_failed, g_cases, g_emulated);
  return g_failed == 0 && g_cases > 0 ? 0 : 1;
}
