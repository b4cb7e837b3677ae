// Runs the real kernel_sources/mla/swa_decode.cu text on the host: every CUDA thread is a
// std::thread, and the PTX wrappers the kernel reaches through mla/swa_ptx.cuh (mma.sync f16 and
// fp8, cp.async, bar.sync, cvt e4m3x2) and kjit/fast_math.cuh (ex2) are replaced by emulations
// written from the PTX ISA (include/mla/swa_ptx.cuh here, ../include/kjit/fast_math.cuh). Checks the fragment and dim permutations, the swizzle, the cp.async
// ownership and barriers, the score exchange, masking, the P normalization and the split merge
// against the float64 reference without a GPU. cp.async copies land either at issue or at the
// last moment a wait allows (a missing wait or barrier then reads stale bytes: shared memory
// starts as garbage). The kernels get the Params the op builds (SwaDecodeOp: validate, plan,
// params over host buffers), so its strides, flags and workspace offsets are checked too.
// -DSWA_EMU_ARCH picks the arch path: 80 (f16 mma, E4M3 by bit operations),
// 89 (fp8 mma on the raw bytes, q and P split into E4M3 hi + lo; sm_89 and sm_120), 90 (f16 mma,
// cvt for K, bit operations for V; sm_90 and sm_100). CTest runs all three (label emulation;
// tests/CMakeLists.txt gives them their own include order). By hand:
//
//   for arch in 80 89 90; do
//     g++ -std=c++17 -O2 -DSWA_EMU_ARCH=$arch -Wno-unknown-pragmas -pthread \
//         -Itests/emulation/swa/include -Itests/emulation/include -I. -Iinclude -Ikernel_sources \
//         -I/usr/local/cuda/include tests/emulation/swa/swa_decode_emulator.cc \
//         tools/testing/reference_swa.cc tools/testing/compare.cc tools/testing/gpu.cc \
//         -Lbuild -lkjit -lfmt -Wl,-rpath,$PWD/build -o /tmp/swa_emulator$arch && /tmp/swa_emulator$arch
//   done
#include "mla/swa_decode.cu"

#include "runtime/ops/mla/swa_decode.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_swa.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

namespace emu {
Block g_block;
thread_local Dim3 t_thread, t_block;
thread_local Block* t_cta = nullptr;
bool g_late_copies = false;
thread_local AsyncState t_async;
}  // namespace emu

namespace kjit::mla {
alignas(128) unsigned char smem[232448];
namespace swa_detail::emu_detail {
emu::Barrier g_named[16];
int g_named_count[16];
}  // namespace swa_detail::emu_detail
}  // namespace kjit::mla

namespace {

using namespace kjit::mla;
namespace kt = kjit::testing;
namespace ed = kjit::mla::swa_detail::emu_detail;

void launch(int grid, int threads, const std::function<void()>& kernel) {
  for (int b = 0; b < grid; ++b) {
    emu::g_block.barrier.reset(threads);
    for (auto& w : emu::g_block.warps) w.barrier.reset(32);
    for (int id = 1; id < 16; ++id) {
      ed::g_named[id].reset(64);  // every named barrier of the kernel joins two warps
      ed::g_named_count[id] = 64;
    }
    std::memset(smem, 0x7f, sizeof(smem));  // stale garbage (E4M3 NaN bytes) from "a previous CTA"
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([=] {
        emu::t_thread.x = static_cast<unsigned>(t);
        emu::t_block.x = static_cast<unsigned>(b);
        emu::t_async = {};
        kernel();
        if (!emu::t_async.committed.empty() || !emu::t_async.open.empty()) {
          // Copies still in flight at exit: harmless on the device only if nobody reads them.
          emu::t_async = {};
        }
      });
    }
    for (auto& t : ts) t.join();
  }
}

template <int kGroup, int kTile, int kWindow, int kCache>
void run_decode(const SwaDecodeParams& p, int ctas) {
  launch(ctas, SwaShape<512, kGroup, kTile>::kThreads,
         [&] { swa_decode_kernel<512, kGroup, kTile, kWindow, kCache>(p); });
}

template <int kGroup, int kTile, int kWindow>
void dispatch_cache(int cache, const SwaDecodeParams& p, int ctas) {
  if (cache == kSwaCacheE4M3) run_decode<kGroup, kTile, kWindow, kSwaCacheE4M3>(p, ctas);
  else run_decode<kGroup, kTile, kWindow, kSwaCacheE5M2>(p, ctas);
}

template <int kGroup, int kTile>
void dispatch_window(int window, int cache, const SwaDecodeParams& p, int ctas) {
  switch (window) {
    case 64: dispatch_cache<kGroup, kTile, 64>(cache, p, ctas); break;
    case 128: dispatch_cache<kGroup, kTile, 128>(cache, p, ctas); break;
    case 256: dispatch_cache<kGroup, kTile, 256>(cache, p, ctas); break;
    default: dispatch_cache<kGroup, kTile, 512>(cache, p, ctas); break;
  }
}

void dispatch(int group, int tile, int window, int cache, const SwaDecodeParams& p, int ctas) {
  if (group == 16 && tile == 64) dispatch_window<16, 64>(window, cache, p, ctas);
  if (group == 16 && tile == 128) dispatch_window<16, 128>(window, cache, p, ctas);
  if (group == 32 && tile == 64) dispatch_window<32, 64>(window, cache, p, ctas);
  if (group == 32 && tile == 128) dispatch_window<32, 128>(window, cache, p, ctas);
}

void* aligned_copy(const void* src, size_t bytes) {
  void* p = std::aligned_alloc(128, (bytes + 127) / 128 * 128 + 128);
  std::memcpy(p, src, bytes);
  return p;
}

struct Forced {
  /// The device's opt-in shared memory per CTA the planner sees (an H200's by default; a small
  /// value forces the 64-position tile).
  int max_smem = 232448;
};

bool run(const kt::SwaCase& c, Forced forced, bool late, uint64_t seed) {
  kt::SwaProblem pr = kt::make_swa_problem(c, seed);
  const int64_t T = pr.tokens, NH = pr.heads, D = pr.head_dim;
  const int64_t slots = pr.num_blocks * pr.block_size;
  const kt::SwaLayout layout = kt::swa_layout(c, pr);

  // Device-like layouts (padded when c.strided), the cache's block padding bytes 0x7f: E4M3 NaN,
  // so reading them shows.
  const std::vector<uint16_t> q16 = kt::swa_q_bf16(pr, layout);
  std::vector<uint8_t> kv(static_cast<size_t>(pr.num_blocks * layout.block_rows * D + 16), 0x7f);
  for (int64_t b = 0; b < pr.num_blocks; ++b)
    std::memcpy(kv.data() + b * layout.block_rows * D, pr.kv.data() + b * pr.block_size * D, pr.block_size * D);
  std::vector<uint16_t> sc16(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) sc16[s] = kt::float_to_bf16(pr.inv_scale[s]);
  std::vector<int32_t> lens32(pr.lens.begin(), pr.lens.end());
  void* qd = aligned_copy(q16.data(), q16.size() * 2);
  void* kvd = aligned_copy(kv.data(), kv.size());
  std::vector<uint16_t> out(q16.size(), 0xFFFF);
  std::vector<float> lse(static_cast<size_t>(std::max<int64_t>(T * layout.lse_token_stride, 4)), NAN);

  // The op's own host steps (device 0 stands in for host memory): validate, plan for an H200's
  // SMs with `forced.max_smem` per CTA on an sm_80 part (the mma.sync kernel; the wgmma one is
  // not emulated), and the Params it launches with.
  const SwaDecodeArgs args =
      kt::swa_args(c, pr, layout,
                   {qd, kvd, sc16.data(), pr.indices.data(),
                    c.lens_i32 ? static_cast<void*>(lens32.data()) : static_cast<void*>(pr.lens.data()), out.data(),
                    lse.data()});
  const detail::SwaDims dims = detail::SwaDecodeOp::validate(args);
  kjit::DeviceInfo device;
  device.cc_major = 8;
  device.sm_count = 132;
  device.max_smem_per_block_optin = forced.max_smem;
  const detail::SwaPlan plan = detail::plan_swa_decode(dims, device);
  std::vector<float> ws(plan.workspace_bytes / 4 + 4, NAN);
  const SwaDecodeParams p = detail::SwaDecodeOp::params(args, dims, plan, ws.data());

  emu::g_late_copies = late;
  dispatch(plan.heads_per_cta, plan.tile, static_cast<int>(pr.window), static_cast<int>(pr.format), p,
           static_cast<int>(plan.ctas));
  if (plan.num_splits > 1) {
    launch(static_cast<int>((T * NH + kSwaMergeRowsPerCta - 1) / kSwaMergeRowsPerCta), kSwaMergeThreads,
           [&] { swa_merge_kernel<512>(p); });
  }

  kt::SwaCaseResult r = kt::swa_check(c, pr, layout, out, lse);
  r.seed = seed;
  r.num_splits = plan.num_splits;
  const bool ok = r.ok(kt::kSwaOutTol, kt::kSwaLseTol);
  std::printf("%s %s [group %d tile %d split_len %d] %s: %s\n", ok ? "ok  " : "FAIL", c.describe().c_str(), plan.heads_per_cta,
              plan.tile, plan.split_len, late ? "late-copies" : "early-copies", r.describe().c_str());
  std::fflush(stdout);
  std::free(qd);
  std::free(kvd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::random_device{}();
  std::printf("seed %llu, arch path %d (%s)\n", static_cast<unsigned long long>(seed), SWA_EMU_ARCH,
              KJIT_SWA_FP8_MMA    ? "fp8 mma"
              : KJIT_SWA_CVT_E4M3 ? "f16 mma, K by cvt, V by bit operations"
                                  : "f16 mma, bit operations");
  std::vector<std::pair<kt::SwaCase, Forced>> cases;
  auto add = [&](auto&& tweak, Forced f = {}) {
    kt::SwaCase c;
    c.tokens = 3;
    c.heads = 32;
    c.window = 128;
    c.block_size = 64;
    tweak(c);
    cases.push_back({c, f});
  };
  // Group 16, one split, every edge length, invalid indices, strided views, LSE.
  add([](kt::SwaCase& c) {
    c.tokens = 6;
    c.head_group = 16;
    c.num_splits = 1;
    c.lens = kt::SwaCase::Lens::kEdges;
    c.invalid_fraction = 0.15;
    c.strided = true;
    c.lse = true;
  });
  // Group 32 (two m-tiles share the loads), an empty row, repeated slots, i32 lens.
  add([](kt::SwaCase& c) {
    c.head_group = 32;
    c.num_splits = 1;
    c.all_invalid_row = true;
    c.repeated = true;
    c.lens_i32 = true;
    c.lse = true;
  });
  // Splits and the merge: 3 splits of 48; E4M3 over its whole range with scales 1e-3 and 300.
  add([](kt::SwaCase& c) {
    c.tokens = 2;
    c.num_splits = 3;
    c.full_range = true;
    c.mixed_scales = true;
    c.lens = kt::SwaCase::Lens::kRandom;
    c.lse = true;
  });
  // The planner's T = 1 plan (unsplit: 8 CTAs of 16 heads); default softmax scale.
  add([](kt::SwaCase& c) {
    c.tokens = 1;
    c.heads = 128;
    c.softmax_scale = 0.f;
    c.u8_cache = false;
    c.lse = true;
  });
  // W = 64 on the 64-position tile; E5M2.
  add([](kt::SwaCase& c) {
    c.window = 64;
    c.head_group = 16;
    c.format = kt::Fp8Format::kE5M2;
    c.full_range = true;
    c.scale_lo = 1e-3f;
    c.scale_hi = 1e-2f;
    c.lens = kt::SwaCase::Lens::kRandom;
  });
  // W = 256 with groups of 32: at least two splits of 128; block size 256, strided cache.
  add([](kt::SwaCase& c) {
    c.tokens = 2;
    c.window = 256;
    c.block_size = 256;
    c.head_group = 32;
    c.invalid_fraction = 0.3;
    c.strided = true;
    c.lse = true;
  });
  // W = 512 in 32 splits of 16.
  add([](kt::SwaCase& c) {
    c.tokens = 1;
    c.window = 512;
    c.num_splits = 32;
    c.scale_lo = 100.f;
    c.scale_hi = 300.f;
    c.lse = true;
  });
  // Groups of 32 on the 64-position tile (what a 99 KiB part with head_group 32 gets): two
  // splits of 64 per W = 128 window.
  add(
      [](kt::SwaCase& c) {
        c.head_group = 32;
        c.lens = kt::SwaCase::Lens::kEdges;
        c.tokens = 4;
        c.lse = true;
      },
      Forced{60000});
  int failures = 0;
  for (const auto& [c, f] : cases) {
    for (bool late : {false, true}) failures += !run(c, f, late, seed);
  }
  std::printf("%d failures\n", failures);
  return failures != 0;
}
