#pragma once
// Host emulation of kernel_sources/kjit/config.cuh for the Hopper kernel emulator
// (tests/emulation/sm90): the shared CUDA built-ins (tests/emulation/include/emu_runtime.hpp) and
// the sm_90a machinery (emu_sm90.hpp), compiled as sm_90a so the kernels' Hopper bodies build.
#include "emu_runtime.hpp"
#include "emu_sm90.hpp"

#include "kjit/types.h"

#define KJIT_DEVICE inline
#define KJIT_PARAMS const
#define KJIT_HAS_SM80 1
#define KJIT_HAS_SM90 1
#define __CUDA_ARCH_FEAT_SM90_ALL 1
/// trap: the emulated thread aborts the run.
[[noreturn]] inline void __trap() { ::emu::sm90::fail("trap"); }
// One grid at a time: programmatic dependent launch has nothing to overlap.
#define KJIT_WAIT_PREVIOUS_GRID() ((void)0)
#define KJIT_LAUNCH_DEPENDENTS() ((void)0)
