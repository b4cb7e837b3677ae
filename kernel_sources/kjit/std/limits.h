// <limits.h> for NVRTC: <climits>.
#ifndef KJIT_STD_LIMITS_H
#define KJIT_STD_LIMITS_H
#include "kjit/std/climits"
#endif  // KJIT_STD_LIMITS_H
