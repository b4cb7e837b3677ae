#pragma once
/// \file workspace.hpp
/// Device workspace for the ops that need one (split-KV partials), cached per (device, stream):
/// calls on one stream are ordered, so they can share one buffer; calls on two streams get two.
/// A buffer only grows (to at least twice its size), and one that is outgrown is kept, not freed,
/// until clear_workspaces(): a CUDA graph captured earlier still holds its address.
///
/// Allocation: by the framework of the call's first tensor when it has the DLPack exchange API
/// (torch: its caching allocator, which also serves allocations during CUDA graph capture, from
/// the graph's pool), else a kjit::DeviceBuffer (cuMemAlloc in the device's primary context). The
/// driver refuses cuMemAlloc during capture: a CuPy or JAX caller that captures runs the op once
/// on the capturing stream first, or passes `workspace=`.

#include "tensors.hpp"

#include <cuda.h>

#include <cstddef>

namespace kjit::python {

/// A buffer of at least `bytes` for `call`'s ops on CUDA device `device` and the call's stream
/// (null when `bytes` is 0). Throws DriverError when the allocation fails.
void* workspace(OpCall& call, int device, size_t bytes);

/// Frees every cached workspace (the caller guarantees no kernel still uses one and no captured
/// graph that refers to one will be replayed). Returns the bytes freed.
size_t clear_workspaces();

/// Bytes currently held by the cache (live and outgrown buffers).
size_t workspace_bytes_held();

}  // namespace kjit::python
