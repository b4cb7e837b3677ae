#pragma once
/// \file runtime/internal/cache.hpp
/// What kjit's tools (tools/) need of the internals, one part of runtime/internal/
/// (docs/architecture.md): the disk cache's store (cache/store.hpp), its file primitives
/// (cache/file_util.hpp: kjit::cache::read_file, write_file_atomic, ...), the reader of files a
/// person names (cache/input_file.hpp: manifests, bundles, tune reports), deployment manifests
/// (cache/manifest.hpp), tuning tables (cache/tune_table.hpp), the fallback log
/// (cache/fallback_log.hpp: `kjit cache explain` names the fallbacks that served a key under
/// KJIT_JIT=async), kjit::warn (cache/warn.hpp, the one warning channel) and the Prometheus writer
/// (runtime/metrics.hpp: `kjit cache stats --prometheus`).

#include "cache/fallback_log.hpp"
#include "cache/file_util.hpp"
#include "cache/input_file.hpp"
#include "cache/manifest.hpp"
#include "cache/store.hpp"
#include "cache/tune_table.hpp"
#include "cache/warn.hpp"
#include "runtime/metrics.hpp"
