// <stdint.h> for NVRTC: <cstdint>, whose types are declared at global scope too.
#ifndef KJIT_STD_STDINT_H
#define KJIT_STD_STDINT_H
#include "kjit/std/cstdint"
#endif  // KJIT_STD_STDINT_H
