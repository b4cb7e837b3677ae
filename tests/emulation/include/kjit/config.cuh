#pragma once
// Host emulation of kernel_sources/kjit/config.cuh for tests/emulation (see the emulator's file
// comment): the CUDA built-ins the attention kernels use, implemented with std::thread per CUDA
// thread and barriers for warp collectives, so the real kernel text compiles with g++.
#include "emu_runtime.hpp"

#include "kjit/types.h"

#define KJIT_DEVICE inline
#define KJIT_PARAMS const
#define KJIT_HAS_SM80 1
// The cluster merge runs too: kjit/cluster.cuh's emulation holds a cluster's CTAs at once.
#define KJIT_HAS_SM90 1
// Programmatic dependent launch has nothing to overlap on the host: the merge runs after the
// decode grid anyway.
#define KJIT_WAIT_PREVIOUS_GRID() ((void)0)
#define KJIT_LAUNCH_DEPENDENTS() ((void)0)
