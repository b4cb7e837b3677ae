// Runs the real kernel_sources/attention/decode.cu and decode_merge.cu text on the host: every CUDA thread is a
// std::thread, and the PTX wrappers the kernel reaches through attention/mma.cuh (mma.sync,
// ldmatrix, cp.async), kjit/fast_math.cuh (ex2, lg2) and kjit/cluster.cuh (cluster barrier,
// mapa, ld.shared::cluster) are replaced by emulations written from the PTX ISA's definitions
// (include/attention/mma.cuh, include/kjit/fast_math.cuh and include/kjit/cluster.cuh here).
// Checks the fragment layouts, swizzle, pipeline, masking, split merge and M-tiling against the
// float64 reference without a GPU, over a contiguous cache (ContigKV) and a page pool (PagedKV:
// shuffled pages of 1, 3, 16 and 64 tokens, the page table read ahead). Every split plan of at
// most kDecodeMaxClusterSplits splits also runs with the cluster merge (the kernel's
// kClusterMerge: the CTAs of each cluster run at once, each with its own shared memory) and
// must give the merge kernel's bits exactly.
// cp.async copies land either at issue or at the last moment a wait allows, which exposes a
// missing wait or a stage refilled while in use.
// CTest runs it (label emulation; tests/CMakeLists.txt gives it its own include order). By hand:
//
//   g++ -std=c++17 -O2 -Wno-unknown-pragmas -pthread -Itests/emulation/include -I. -Iinclude \
//       -Ikernel_sources -I/usr/local/cuda/include tests/emulation/attention_decode_emulator.cc \
//       tools/testing/reference_attention.cc tools/testing/compare.cc tools/testing/gpu.cc \
//       -Lbuild -lkjit -lfmt -Wl,-rpath,$PWD/build -o /tmp/decode_emulator && /tmp/decode_emulator
#include "attention/decode.cu"
#include "attention/decode_merge.cu"

#include "runtime/ops/attention/decode.hpp"
#include "tests/runtime/decode_dims.hpp"
#include "tools/testing/compare.hpp"
#include "tools/testing/host_types.hpp"
#include "tools/testing/reference_attention.hpp"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace {
/// Shared memory of one emulated CTA (an SM's 227 KiB), and of a whole cluster.
constexpr uint32_t kCtaSmem = 232448;
}  // namespace

namespace emu {
thread_local uint32_t t_smem_offset = 0;
thread_local Barrier* t_cluster_barrier = nullptr;
thread_local uint32_t t_cluster_rank = 0;
thread_local uint32_t t_cluster_size = 1;
uint32_t g_cluster_cta_bytes = kCtaSmem;
}  // namespace emu

namespace kjit::attention {
alignas(128) uint8_t smem[kCtaSmem * kDecodeMaxClusterSplits];
}  // namespace kjit::attention

namespace {

using namespace kjit::attention;
namespace kt = kjit::testing;

void launch(int grid, int threads, const std::function<void()>& kernel) {
  for (int b = 0; b < grid; ++b) {
    emu::g_block.barrier.reset(threads);
    for (auto& w : emu::g_block.warps) w.barrier.reset(32);
    std::memset(smem, 0xA5, sizeof(smem));  // stale garbage from "a previous CTA"
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([=] {
        emu::t_thread.x = static_cast<unsigned>(t);
        emu::t_block.x = static_cast<unsigned>(b);
        emu::t_async = {};
        kernel();
      });
    }
    for (auto& t : ts) t.join();
  }
}

/// A cluster launch: the CTAs of each cluster of `cluster` consecutive ones run at once, CTA
/// rank r in its own region [r · kCtaSmem, (r + 1) · kCtaSmem) of the shared array with its own
/// block barrier and warp scratch, and one cluster barrier over all their threads.
void launch_clusters(int grid, int cluster, int threads, const std::function<void()>& kernel) {
  for (int first = 0; first < grid; first += cluster) {
    std::vector<std::unique_ptr<emu::Block>> blocks;
    for (int r = 0; r < cluster; ++r) {
      blocks.push_back(std::make_unique<emu::Block>());
      blocks.back()->barrier.reset(threads);
      for (auto& w : blocks.back()->warps) w.barrier.reset(32);
    }
    emu::Barrier cluster_barrier;
    cluster_barrier.reset(cluster * threads);
    std::memset(smem, 0xA5, static_cast<size_t>(cluster) * kCtaSmem);  // stale garbage
    std::vector<std::thread> ts;
    for (int r = 0; r < cluster; ++r) {
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([=, &blocks, &cluster_barrier] {
          emu::t_thread.x = static_cast<unsigned>(t);
          emu::t_block.x = static_cast<unsigned>(first + r);
          emu::t_cta = blocks[r].get();
          emu::t_smem_offset = static_cast<uint32_t>(r) * kCtaSmem;
          emu::t_cluster_barrier = &cluster_barrier;
          emu::t_cluster_rank = static_cast<uint32_t>(r);
          emu::t_cluster_size = static_cast<uint32_t>(cluster);
          emu::t_async = {};
          kernel();
        });
      }
    }
    for (auto& t : ts) t.join();
  }
}

/// The decode kernel at `rows` (and, merging with the merge kernel, decode_merge_kernel), or with
/// the cluster merge: clusters of num_splits CTAs and no merge kernel.
template <int kHeadDim, class KV, bool kCluster>
void run_kernels(int rows, const DecodeParams& p, int ctas, const DecodeMergeParams& m, int merge_ctas) {
  constexpr int kThreads = DecodeShape<kHeadDim>::kThreads;
  const std::function<void()> kernel = [&] {
    if (rows == 8) {
      decode_kernel<kHeadDim, 8, KV, kCluster>(p);
    } else {
      decode_kernel<kHeadDim, 16, KV, kCluster>(p);
    }
  };
  if (kCluster && p.num_splits > 1) {
    launch_clusters(ctas, p.num_splits, kThreads, kernel);
    return;
  }
  launch(ctas, kThreads, kernel);
  if (!kCluster && p.num_splits > 1) launch(merge_ctas, kDecodeMergeThreads, [&] { decode_merge_kernel<kHeadDim>(m); });
}

template <int kHeadDim, class KV>
void run_merge(bool cluster, int rows, const DecodeParams& p, int ctas, const DecodeMergeParams& m, int merge_ctas) {
  if (cluster) {
    run_kernels<kHeadDim, KV, true>(rows, p, ctas, m, merge_ctas);
  } else {
    run_kernels<kHeadDim, KV, false>(rows, p, ctas, m, merge_ctas);
  }
}

struct Case {
  int batch, len, q_heads, kv_heads, head_dim, splits;
  bool ragged, mask, pad;
  int page = 0;  // > 0: a PagedKV pool of pages this size, in shuffled order
};

/// What one run gave: whether it matched the reference, its split count and its raw outputs.
struct Run {
  bool ok = false;
  int splits = 0;
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

/// Runs `c` (its data from `seed`) with `cluster` the merge: the cluster merge plans as the op
/// would for merge=cluster (an automatic count among 1..kDecodeMaxClusterSplits).
Run run(const Case& c, bool late, uint64_t seed, bool cluster) {
  emu::g_late_copies = late;
  std::mt19937_64 rng(seed);
  const int64_t B = c.batch, L = c.len, Hq = c.q_heads, Hkv = c.kv_heads, D = c.head_dim;
  kt::DecodeProblem pr = kt::random_decode_problem(B, L, Hq, Hkv, D, rng());
  pr.kv_lens.assign(B, static_cast<int32_t>(L));
  if (c.ragged) {
    for (int64_t b = 1; b < B; ++b) pr.kv_lens[b] = std::uniform_int_distribution<int>(0, static_cast<int>(L))(rng);
  }
  if (c.mask) {
    pr.mask.resize(B * L);
    for (auto& m : pr.mask) m = rng() % 10 < 7;
    if (B > 1) std::fill(pr.mask.begin() + (B - 1) * L, pr.mask.end(), 0);
  }
  // Device-like layouts: k/v with a padded token stride; dead tokens and padding hold NaN.
  const int64_t l_cap = L + (c.pad ? 3 : 0), h_cap = Hkv + (c.pad ? 1 : 0);
  std::vector<uint16_t> q16(B * Hq * D), k16(B * l_cap * h_cap * D + 64, 0xFFFF), v16(k16.size(), 0xFFFF);
  for (size_t i = 0; i < q16.size(); ++i) q16[i] = kt::float_to_bf16(pr.q[i]);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < pr.kv_lens[b]; ++t)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t d = 0; d < D; ++d) {
          k16[((b * l_cap + t) * h_cap + h) * D + d] = kt::float_to_bf16(pr.k[((b * L + t) * Hkv + h) * D + d]);
          v16[((b * l_cap + t) * h_cap + h) * D + d] = kt::float_to_bf16(pr.v[((b * L + t) * Hkv + h) * D + d]);
        }
  // 16-byte aligned copies of the host arrays (cp.async needs aligned rows).
  auto aligned = [](const void* src, size_t bytes) {
    void* p = std::aligned_alloc(128, (bytes + 127) / 128 * 128 + 128);
    std::memcpy(p, src, bytes);
    return p;
  };
  void* qd = aligned(q16.data(), q16.size() * 2);
  void* kd = aligned(k16.data(), k16.size() * 2);
  void* vd = aligned(v16.data(), v16.size() * 2);
  std::vector<uint16_t> out(B * Hq * D, 0xFFFF);
  std::vector<float> lse(B * Hq, NAN);

  // PagedKV: each sequence's tokens on its own pages of a shared pool, the pages in shuffled
  // order and one spare page; slots past a sequence's length hold NaN.
  const int64_t P = c.page;
  std::vector<int32_t> indptr(1, 0), page_ids, last_len;
  void* kp = nullptr;
  void* vp = nullptr;
  if (P > 0) {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = (pr.kv_lens[b] + P - 1) / P;
      indptr.push_back(indptr.back() + static_cast<int32_t>(n));
      last_len.push_back(n == 0 ? 0 : static_cast<int32_t>(pr.kv_lens[b] - (n - 1) * P));
    }
    const int64_t pages = indptr.back() + 1;
    std::vector<int32_t> order(static_cast<size_t>(pages));
    for (int64_t i = 0; i < pages; ++i) order[i] = static_cast<int32_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    page_ids.assign(order.begin(), order.begin() + indptr.back());
    std::vector<uint16_t> kpool(pages * P * h_cap * D + 64, 0xFFFF), vpool(kpool.size(), 0xFFFF);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < pr.kv_lens[b]; ++t)
        for (int64_t h = 0; h < Hkv; ++h)
          for (int64_t d = 0; d < D; ++d) {
            const int64_t at = ((page_ids[indptr[b] + t / P] * P + t % P) * h_cap + h) * D + d;
            kpool[at] = kt::float_to_bf16(pr.k[((b * L + t) * Hkv + h) * D + d]);
            vpool[at] = kt::float_to_bf16(pr.v[((b * L + t) * Hkv + h) * D + d]);
          }
    kp = aligned(kpool.data(), kpool.size() * 2);
    vp = aligned(vpool.data(), vpool.size() * 2);
  }

  const detail::DecodePlan plan = detail::plan_decode(decode_dims(B, L, Hq, Hkv, D), c.splits, 132, 2, 0,
                                                      cluster ? DecodeMerge::kCluster : DecodeMerge::kKernel, true);
  if (plan.merge != (cluster && plan.num_splits > 1 ? DecodeMerge::kCluster : DecodeMerge::kKernel)) {
    std::printf("FAIL the plan's merge is %s\n", decode_merge_name(plan.merge));
    return {};
  }
  std::vector<float> ws(plan.workspace_bytes / 4 + 4, NAN);

  DecodeParams p{};
  p.q = qd;
  p.k = kd;
  p.v = vd;
  p.kv_lens = pr.kv_lens.data();
  p.mask = c.mask ? pr.mask.data() : nullptr;
  p.out = out.data();
  p.lse = lse.data();
  if (!cluster) {  // the cluster merge gets no workspace
    p.o_part = ws.data();
    p.lse_part = reinterpret_cast<float*>(reinterpret_cast<char*>(ws.data()) + plan.o_part_bytes);
  }
  p.q_stride_b = Hq * D;
  p.q_stride_h = D;
  p.k_stride_b = p.v_stride_b = l_cap * h_cap * D;
  p.k_stride_l = p.v_stride_l = h_cap * D;
  p.k_stride_h = p.v_stride_h = D;
  p.mask_stride_b = L;
  p.mask_stride_l = 1;
  p.out_stride_b = Hq * D;
  p.out_stride_h = D;
  p.lse_stride_b = Hq;
  p.lse_stride_h = 1;
  p.batch = static_cast<int32_t>(B);
  p.q_heads = static_cast<int32_t>(Hq);
  p.kv_heads = static_cast<int32_t>(Hkv);
  p.group = static_cast<int32_t>(Hq / Hkv);
  p.max_kv_len = static_cast<int32_t>(L);
  p.num_splits = plan.num_splits;
  p.split_tokens = plan.split_tokens;
  p.m_tiles = plan.m_tiles;
  if (P > 0) {
    p.k = kp;
    p.v = vp;
    p.kv_lens = nullptr;
    p.k_stride_b = p.v_stride_b = P * h_cap * D;  // page stride
    p.kv_indptr = indptr.data();
    p.kv_page_indices = page_ids.data();
    p.kv_last_page_len = last_len.data();
    p.page_size = static_cast<int32_t>(P);
    p.page_div = kjit::fast_div_of(static_cast<uint32_t>(P));
    p.page_rows = static_cast<int32_t>(P);
    p.split_tokens = 0;  // each sequence splits its own length
  }
  p.scale_log2 = static_cast<float>(pr.scale) * 1.4426950408889634f;
  detail::set_grid_divisors(p);
  DecodeMergeParams m{};
  m.o_part = p.o_part;
  m.lse_part = p.lse_part;
  m.out = p.out;
  m.lse = p.lse;
  m.out_stride_b = p.out_stride_b;
  m.out_stride_h = p.out_stride_h;
  m.lse_stride_b = p.lse_stride_b;
  m.lse_stride_h = p.lse_stride_h;
  m.batch = p.batch;
  m.q_heads = p.q_heads;
  m.num_splits = p.num_splits;
  const int merge_ctas = static_cast<int>((B * Hq + kDecodeMergeRowsPerCta - 1) / kDecodeMergeRowsPerCta);
  const int ctas = static_cast<int>(plan.ctas);
  if (P > 0) {
    if (D == 64) run_merge<64, PagedKV>(cluster, plan.heads_per_cta, p, ctas, m, merge_ctas);
    if (D == 128) run_merge<128, PagedKV>(cluster, plan.heads_per_cta, p, ctas, m, merge_ctas);
    if (D == 256) run_merge<256, PagedKV>(cluster, plan.heads_per_cta, p, ctas, m, merge_ctas);
  } else {
    if (D == 64) run_merge<64, ContigKV>(cluster, plan.heads_per_cta, p, ctas, m, merge_ctas);
    if (D == 128) run_merge<128, ContigKV>(cluster, plan.heads_per_cta, p, ctas, m, merge_ctas);
    if (D == 256) run_merge<256, ContigKV>(cluster, plan.heads_per_cta, p, ctas, m, merge_ctas);
  }

  const kt::DecodeReference ref = kt::decode_reference(pr);
  std::vector<float> outf(out.size());
  for (size_t i = 0; i < out.size(); ++i) outf[i] = kt::bf16_to_float(out[i]);
  const kt::Comparison co = kt::compare(outf, ref.out);
  const kt::Comparison cl = kt::compare(lse, ref.lse);
  const bool ok = co.ok(1e-2) && cl.ok(1e-4);
  std::printf("%s B%d L%d Hq%d Hkv%d D%d splits=%d(%d) rows=%d m_tiles=%d%s%s%s page=%d %s merge=%s: out %s | lse %s\n",
              ok ? "ok  " : "FAIL", c.batch, c.len, c.q_heads, c.kv_heads, c.head_dim, c.splits, plan.num_splits,
              plan.heads_per_cta, plan.m_tiles, c.ragged ? " ragged" : "", c.mask ? " mask" : "", c.pad ? " padded" : "", c.page,
              late ? "late-copies" : "early-copies", decode_merge_name(plan.merge), co.describe().c_str(),
              cl.describe().c_str());
  std::free(qd);
  std::free(kd);
  std::free(vd);
  std::free(kp);
  std::free(vp);
  return Run{ok, plan.num_splits, std::move(out), std::move(lse)};
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const Case cases[] = {
      {2, 150, 8, 2, 128, 1, true, true, true},   // rows 8, 3 tiles, ragged, mask, padded
      {2, 150, 8, 2, 128, 3, true, false, false}, // split merge
      {1, 300, 4, 1, 64, 2, false, true, true},   // hd64 128-token tiles
      {2, 100, 8, 2, 256, 1, true, true, false},  // hd256 d-split warps
      {1, 100, 8, 2, 256, 3, false, false, true},
      {2, 70, 24, 2, 128, 1, true, false, false}, // group 12: rows 16
      {1, 65, 32, 1, 128, 2, false, true, false}, // group 32: two M tiles
      {1, 40, 32, 2, 256, 1, false, false, true}, // group 16 at hd256
      {1, 130, 16, 1, 64, 1, false, false, false},// group 16 at hd64
      {3, 1, 8, 2, 128, 0, true, false, false},   // kv_len 1 and 0
      {3, 1, 8, 2, 128, 2, true, true, false},    // the same with a mask (no mask byte before token 0)
      {2, 0, 8, 2, 64, 0, false, false, false},   // empty cache
      // PagedKV: tiles across pages and pages across tiles, the split each sequence's own.
      {3, 300, 8, 2, 128, 1, true, true, true, 16},
      {2, 300, 8, 2, 128, 3, true, false, false, 3},   // page size not a power of two
      {2, 200, 4, 1, 64, 2, true, false, true, 1},
      {2, 150, 8, 2, 256, 2, true, true, false, 64},
      {3, 1, 8, 2, 128, 0, true, false, false, 16},    // kv_len 1 and 0
      // Cluster-merge cases: 8 splits (the largest cluster) and odd counts, empty splits (a
      // ragged batch with a request of length 0 and short ones), two M tiles per KV head (the
      // cluster's split-innermost grid), rows 16, every head_dim, and every split count's slice
      // of the output over the cluster's CTAs.
      {2, 520, 8, 2, 128, 8, true, true, false},       // 8 splits of 65 tokens, ragged + mask
      {3, 300, 8, 2, 64, 5, true, false, true},        // 5 splits, a request of length 0
      {1, 200, 32, 1, 128, 4, false, false, false},    // group 32: two M tiles in 4-CTA clusters
      {2, 90, 24, 2, 256, 7, true, false, false},      // rows 16 at hd256, 7 splits
      {3, 70, 8, 2, 128, 6, true, false, false, 16},   // paged: per-request splits, some empty
      {2, 40, 4, 1, 64, 8, true, true, false, 3},      // paged, 8 splits of a few tokens each
  };
  int failures = 0;
  for (const Case& c : cases) {
    for (bool late : {false, true}) {
      const Run kernel = run(c, late, seed, false);
      failures += !kernel.ok;
      // The cluster merge once per case (it changes nothing before the partials: the copies'
      // timing is the other run's to vary).
      if (!late || kernel.splits < 2 || kernel.splits > kDecodeMaxClusterSplits) continue;
      // The same plan's splits merged in a cluster: the merge kernel's bits exactly (the same
      // partials through the same SplitMerge arithmetic).
      Case same = c;
      same.splits = kernel.splits;
      const Run cluster = run(same, late, seed, true);
      failures += !cluster.ok;
      const bool out_same = cluster.out == kernel.out;
      const bool lse_same = std::memcmp(cluster.lse.data(), kernel.lse.data(), kernel.lse.size() * 4) == 0 &&
                            cluster.lse.size() == kernel.lse.size();
      if (!out_same || !lse_same) {
        std::printf("FAIL the cluster merge's %s differ from the merge kernel's\n", out_same ? "lse" : "outputs");
        ++failures;
      }
    }
  }
  std::printf("%d failures\n", failures);
  return failures != 0;
}
