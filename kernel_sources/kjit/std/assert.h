// <assert.h> for NVRTC: <cassert> (no include guard either).
#include "kjit/std/cassert"
