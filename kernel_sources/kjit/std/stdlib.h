// <stdlib.h> for NVRTC: <cstdlib>, whose names are declared at global scope too.
#ifndef KJIT_STD_STDLIB_H
#define KJIT_STD_STDLIB_H
#include "kjit/std/cstdlib"
#endif  // KJIT_STD_STDLIB_H
