#pragma once
/// \file runtime/internal.hpp
/// The one internal header kjit's own tools (the CLI, the benchmarks, the test helpers in
/// tools/testing) include besides the public API in include/kjit/. It gathers what they need
/// and an application does not:
///   - the driver entry-point table (runtime/driver.hpp): raw launches to time the op overhead
///     against, device memory and events for tests and benchmarks, the driver version;
///   - the kernel sources as shipped (runtime/kernel_sources.hpp): `kjit compile --emit source`;
///   - the op pipeline and every op's pure steps (runtime/ops/…): plan on a simulated device,
///     force a plan, or build an op's launch value and replay it;
///   - the disk cache's store, bundles and OCI images (cache/store.hpp, cache/bundle.hpp,
///     cache/oci.hpp, cache/shipping.hpp): the cache commands;
///   - the cache's file primitives (cache/file_util.hpp, kjit::cache::read_file, ...), the reader
///     of files a person names (cache/input_file.hpp: manifests, bundles, tune reports), deployment
///     manifests (cache/manifest.hpp) and tuning tables (cache/tune_table.hpp): precompile, the
///     tuner and `kjit tune`;
///   - the fleet tier (cache/remote/: tier, records, signing, shared tuning tables) and a runtime's
///     own tier (runtime/fleet.hpp): `kjit remote`, the tuner's table sharing and the remote
///     benchmark;
///   - the tuned-plan registry (runtime/ops/tuned.hpp) and the TMA map memo (runtime/ops/tma_map.hpp):
///     the tuner and the runtime benchmark;
///   - the per-device target choice (runtime/target_choice.hpp): the CLI's `--arch` default;
///   - kjit::warn (cache/warn.hpp), the one warning channel;
///   - the Prometheus writer (runtime/metrics.hpp): `kjit cache stats --prometheus`;
///   - the fallback log (cache/fallback_log.hpp): `kjit cache explain` names the fallbacks that
///     served a key under KJIT_JIT=async;
///   - the canonical form of a name expression (runtime/nvrtc.hpp): `kjit cache explain`
///     compares an entry's kernels with a key's.
/// Nothing here is a stable interface; the test suites may include any internal header directly.

#include "cache/bundle.hpp"
#include "cache/fallback_log.hpp"
#include "cache/file_util.hpp"
#include "cache/input_file.hpp"
#include "cache/manifest.hpp"
#include "cache/oci.hpp"
#include "cache/remote/record.hpp"
#include "cache/remote/signing.hpp"
#include "cache/remote/tier.hpp"
#include "cache/remote/tune_share.hpp"
#include "cache/store.hpp"
#include "cache/tune_table.hpp"
#include "cache/warn.hpp"
#include "runtime/driver.hpp"
#include "runtime/fleet.hpp"
#include "runtime/kernel_sources.hpp"
#include "runtime/metrics.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/entry.hpp"
#include "runtime/ops/attention/paged_append.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/attention/prefill.hpp"
#include "runtime/ops/fp8/gemm.hpp"
#include "runtime/ops/fp8/quantize.hpp"
#include "runtime/ops/mla/swa_decode.hpp"
#include "runtime/ops/pipeline.hpp"
#include "runtime/ops/rotary/rotary.hpp"
#include "runtime/ops/tma_map.hpp"
#include "runtime/ops/tuned.hpp"
#include "runtime/target_choice.hpp"
