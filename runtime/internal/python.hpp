#pragma once
/// \file runtime/internal/python.hpp
/// The one internal header the Python extension (python/src) includes; everything else it uses is
/// the public API (include/kjit/). It gathers:
///   - the driver entry-point table (runtime/driver.hpp): the contexts and streams the extension
///     makes current or creates (tensors.cc, program.cc, ops.cc);
///   - the decodes' workspace sizes when the caller passes no workspace
///     (runtime/ops/attention/decode.hpp, runtime/ops/attention/paged_decode.hpp);
///   - the SWA decode's workspace size and plan (runtime/ops/mla/swa_decode.hpp:
///     `kjit.mla.swa_decode_plan`, which the public API does not expose; its Params header is why
///     the extension's include path has kernel_sources/);
///   - the attention family's constants (runtime/families/attention.hpp: the paged prefill's wide
///     tile, `kjit.attention.WIDE_TILE_ROWS`, and its rule's text).
/// A binding that needs another internal belongs here, named with what it is for;
/// tests/repo/check_boundaries.py (repo.boundaries) refuses any other internal include there.

#include "runtime/driver.hpp"
#include "runtime/families/attention.hpp"
#include "runtime/ops/attention/decode.hpp"
#include "runtime/ops/attention/paged_decode.hpp"
#include "runtime/ops/mla/swa_decode.hpp"
