#pragma once
/// \file runtime/internal/compiler.hpp
/// What kjit's tools (tools/) need of the internals, one part of runtime/internal/
/// (docs/architecture.md): the kernel sources as shipped (runtime/kernel_sources.hpp: `kjit compile
/// --emit source`), the canonical form of a name expression (runtime/nvrtc.hpp: `kjit cache
/// explain` compares an entry's kernels with a key's) and the per-device target choice
/// (runtime/target_choice.hpp: the CLI's `--arch` default, KJIT_ARCH).

#include "runtime/kernel_sources.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/target_choice.hpp"
