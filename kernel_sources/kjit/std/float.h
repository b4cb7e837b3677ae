// <float.h> for NVRTC: <cfloat>.
#ifndef KJIT_STD_FLOAT_H
#define KJIT_STD_FLOAT_H
#include "kjit/std/cfloat"
#endif  // KJIT_STD_FLOAT_H
