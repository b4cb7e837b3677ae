// Runs the real kernel_sources/mla/swa_decode.cu text on the host: every CUDA thread is a
// std::thread, and the PTX wrappers the kernel reaches through mla/swa_ptx.cuh (mma.sync f16 and
// fp8, cp.async, bar.sync, cvt e4m3x2) and kjit/fast_math.cuh (ex2) are replaced by emulations
// written from the PTX ISA (include/mla/swa_ptx.cuh here, ../include/kjit/fast_math.cuh). Checks the fragment and dim permutations, the swizzle, the cp.async
// ownership and barriers, the score exchange, masking, the P normalization, the split merge and
// the cluster split's merge through distributed shared memory (the CTAs of a cluster run at
// once, each with its own shared memory; the barrier.cluster protocol is checked, see
// include/mla/swa_ptx.cuh) against the float64 reference without a GPU. cp.async copies land either at issue or at the
// last moment a wait allows (a missing wait or barrier then reads stale bytes: shared memory
// starts as garbage). The kernels get the Params the op builds (SwaDecodeOp: validate, plan,
// params over host buffers), so its strides, flags and workspace offsets are checked too.
// -DSWA_EMU_ARCH picks the arch path: 80 (f16 mma, E4M3 by bit operations),
// 89 (fp8 mma on the raw bytes, q and P split into E4M3 hi + lo; sm_89 and sm_120), 90 (f16 mma,
// cvt for K, bit operations for V; sm_90 and sm_100). CTest runs all three (label emulation;
// tests/CMakeLists.txt gives them their own include order). Arguments: [seed [text a case's
// description must contain, e.g. cluster]]. By hand:
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
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>


namespace kjit::mla::swa_detail::emu_detail {
thread_local Cta* t_cta = nullptr;
thread_local Cluster* t_cluster = nullptr;
thread_local ClusterThread t_cluster_thread;
}  // namespace kjit::mla::swa_detail::emu_detail

namespace {

using namespace kjit::mla;
namespace kt = kjit::testing;
namespace ed = kjit::mla::swa_detail::emu_detail;

/// Runs `kernel` over `grid` CTAs of `threads` threads, `cluster` CTAs at a time (a cluster
/// launch: they run concurrently, each with its own shared memory, and meet at barrier.cluster).
void launch(int grid, int threads, int cluster, const std::function<void()>& kernel) {
  if (grid % cluster != 0) ed::fail("grid not a multiple of the cluster size");
  std::vector<std::unique_ptr<ed::Cta>> ctas;
  std::vector<unsigned char*> memory;
  for (int r = 0; r < cluster; ++r) {
    ctas.push_back(std::make_unique<ed::Cta>());
    memory.push_back(static_cast<unsigned char*>(std::aligned_alloc(128, ed::kSmemBytes)));
  }
  for (int b0 = 0; b0 < grid; b0 += cluster) {
    ed::Cluster group;
    group.size = cluster;
    group.count = cluster * threads;
    for (int r = 0; r < cluster; ++r) {
      ed::Cta& cta = *ctas[r];
      cta.block.barrier.reset(threads);
      for (auto& w : cta.block.warps) w.barrier.reset(32);
      for (int id = 1; id < 16; ++id) {
        cta.named[id].reset(64);  // every named barrier of the kernel joins two warps
        cta.named_count[id] = 64;
      }
      cta.smem = memory[r];
      std::memset(cta.smem, 0x7f, ed::kSmemBytes);  // stale garbage (E4M3 NaN bytes) from "a previous CTA"
      cta.rank = r;
      cta.exit_waits = INT64_MAX;
      cta.read_phase = -1;
      cta.running = threads;
      group.ctas[r] = &cta;
    }
    std::vector<std::thread> ts;
    for (int r = 0; r < cluster; ++r) {
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&, r, t] {
          emu::t_thread.x = static_cast<unsigned>(t);
          emu::t_block.x = static_cast<unsigned>(b0 + r);
          emu::t_cta = &ctas[r]->block;
          ed::t_cta = ctas[r].get();
          ed::t_cluster = &group;
          ed::t_cluster_thread = {};
          emu::t_async = {};
          kernel();
          // Copies still in flight at exit: harmless on the device only if nobody reads them.
          emu::t_async = {};
          ed::thread_exits();
        });
      }
    }
    for (auto& t : ts) t.join();
    ed::check_cluster(group);
  }
  for (unsigned char* m : memory) std::free(m);
}

template <int kGroup, int kTile, int kWindow, int kCache, int kCluster = 1>
void run_decode(const SwaDecodeParams& p, int ctas) {
  launch(ctas, SwaShape<512, kGroup, kTile>::kThreads, kCluster,
         [&] { swa_decode_kernel<512, kGroup, kTile, kWindow, kCache, kCluster>(p); });
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

/// The cluster splits the cases below run (each one more instantiation of the kernel).
struct ClusterInstance {
  int group, tile, window, cache, cluster;
  void (*run)(const SwaDecodeParams&, int);
};
constexpr int kE4 = kSwaCacheE4M3, kE5 = kSwaCacheE5M2;
const ClusterInstance kClusterInstances[] = {
    {16, 64, 128, kE4, 8, &run_decode<16, 64, 128, kE4, 8>},  {16, 64, 128, kE5, 4, &run_decode<16, 64, 128, kE5, 4>},
    {16, 64, 128, kE4, 2, &run_decode<16, 64, 128, kE4, 2>},  {32, 64, 128, kE4, 2, &run_decode<32, 64, 128, kE4, 2>},
    {32, 64, 128, kE5, 8, &run_decode<32, 64, 128, kE5, 8>},  {16, 64, 512, kE4, 8, &run_decode<16, 64, 512, kE4, 8>},
    {16, 64, 64, kE4, 4, &run_decode<16, 64, 64, kE4, 4>},    {32, 128, 256, kE5, 2, &run_decode<32, 128, 256, kE5, 2>},
    {16, 64, 128, kE4, 4, &run_decode<16, 64, 128, kE4, 4>},  {16, 128, 512, kE4, 4, &run_decode<16, 128, 512, kE4, 4>},
};

void dispatch(int group, int tile, int window, int cache, int cluster, const SwaDecodeParams& p, int ctas) {
  if (cluster > 1) {
    for (const ClusterInstance& i : kClusterInstances) {
      if (i.group == group && i.tile == tile && i.window == window && i.cache == cache && i.cluster == cluster) {
        return i.run(p, ctas);
      }
    }
    ed::fail("a cluster split the emulator has no instance of (add it to kClusterInstances)");
  }
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
  /// The device's compute capability major the planner sees: 8 (sm_80, the mma.sync kernel's
  /// plans), or 9 for cluster splits (planned or requested; the wgmma kernel is not emulated,
  /// so those cases request a group or T · NH / 64 items too few for it).
  int cc_major = 8;
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
  device.cc_major = forced.cc_major;
  device.sm_count = 132;
  device.max_smem_per_block_optin = forced.max_smem;
  const detail::SwaPlan plan = detail::plan_swa_decode(dims, device);
  std::vector<float> ws(plan.workspace_bytes / 4 + 4, NAN);
  const SwaDecodeParams p = detail::SwaDecodeOp::params(args, dims, plan, ws.data());

  emu::g_late_copies = late;
  if (plan.heads_per_cta == kSwaWgmmaHeads) ed::fail("the case planned the wgmma kernel, which is not emulated");
  dispatch(plan.heads_per_cta, plan.tile, static_cast<int>(pr.window), static_cast<int>(pr.format), plan.cluster_split,
           p, static_cast<int>(plan.ctas));
  if (plan.num_splits > 1) {
    launch(static_cast<int>((T * NH + kSwaMergeRowsPerCta - 1) / kSwaMergeRowsPerCta), kSwaMergeThreads, 1,
           [&] { swa_merge_kernel<512>(p); });
  }

  kt::SwaCaseResult r = kt::swa_check(c, pr, layout, out, lse);
  r.seed = seed;
  r.num_splits = plan.num_splits;
  const bool ok = r.ok(kt::kSwaOutTol, kt::kSwaLseTol);
  std::printf("%s %s [group %d tile %d split_len %d cluster %d] %s: %s\n", ok ? "ok  " : "FAIL", c.describe().c_str(),
              plan.heads_per_cta, plan.tile, plan.split_len, plan.cluster_split, late ? "late-copies" : "early-copies",
              r.describe().c_str());
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
  // Cluster splits (sm_90+): every cluster size, both groups and formats, lens 0 and 1, lens
  // below the window, invalid indices, an empty row, LSE on and off; each CTA's slice one step
  // (16 positions) up to a whole 128-position tile. Only on the arch paths of targets with
  // clusters: 90 (sm_90, sm_100) and 89 (the fp8 path of sm_120).
  const size_t unclustered = cases.size();
  // A case on an sm_90 device: T tokens, NH heads, window W, the request head_group / cluster_split
  // (0: the planner's), then `tweak`.
  auto add_sm90 = [&](int tokens, int heads, int window, int group, int cluster, auto&& tweak) {
    Forced sm90;
    sm90.cc_major = 9;
    add(
        [&](kt::SwaCase& c) {
          c.tokens = tokens;
          c.heads = heads;
          c.window = window;
          c.head_group = group;
          c.cluster_split = cluster;
          c.lse = true;
          tweak(c);
        },
        sm90);
  };
  // The planner's T = 1 plan on sm_90: clusters of 8 CTAs of 16 heads × 16 positions.
  add_sm90(1, 32, 128, 0, 0, [](kt::SwaCase&) {});
  // 8 CTAs of 16 positions; lens 0, 1, W − 1, W, W + 5, −3; invalid indices.
  add_sm90(6, 16, 128, 0, 8, [](kt::SwaCase& c) {
    c.lens = kt::SwaCase::Lens::kEdges;
    c.invalid_fraction = 0.2;
  });
  // 4 CTAs of 32 positions, E5M2 over its whole range, random lens (slices past the end attend
  // nothing), strided views, no LSE.
  add_sm90(3, 16, 128, 0, 4, [](kt::SwaCase& c) {
    c.format = kt::Fp8Format::kE5M2;
    c.full_range = true;
    c.scale_lo = 1e-3f;
    c.scale_hi = 1e-2f;
    c.lens = kt::SwaCase::Lens::kRandom;
    c.strided = true;
    c.lse = false;
  });
  // 2 CTAs of 64 positions with groups of 16 and of 32 (two m-tiles), an empty row, i32 lens.
  for (int group : {16, 32}) {
    add_sm90(3, 32, 128, group, 2, [](kt::SwaCase& c) {
      c.all_invalid_row = true;
      c.lens = kt::SwaCase::Lens::kEdges;
      c.lens_i32 = true;
    });
  }
  // Groups of 32 in 8 CTAs of 16 positions, E5M2, scales far from one.
  add_sm90(1, 32, 128, 32, 8, [](kt::SwaCase& c) {
    c.format = kt::Fp8Format::kE5M2;
    c.mixed_scales = true;
  });
  // W = 512 in 8 CTAs of 64 positions; W = 64 in 4 of 16; W = 256 in 2 of 128 (the 128 tile).
  add_sm90(1, 16, 512, 0, 8, [](kt::SwaCase& c) { c.invalid_fraction = 0.1; });
  add_sm90(6, 16, 64, 0, 4, [](kt::SwaCase& c) {
    c.lens = kt::SwaCase::Lens::kEdges;
    c.repeated = true;
    c.lse = false;
  });
  add_sm90(1, 32, 256, 32, 2, [](kt::SwaCase& c) {
    c.block_size = 256;
    c.format = kt::Fp8Format::kE5M2;
    c.lens = kt::SwaCase::Lens::kRandom;
  });
  if (SWA_EMU_ARCH == 80) cases.resize(unclustered);
  // An optional second argument runs only the cases whose description contains it ("cluster").
  const std::string only = argc > 2 ? argv[2] : "";
  int failures = 0;
  for (const auto& [c, f] : cases) {
    if (c.describe().find(only) == std::string::npos) continue;
    for (bool late : {false, true}) failures += !run(c, f, late, seed);
  }
  std::printf("%d failures\n", failures);
  return failures != 0;
}
