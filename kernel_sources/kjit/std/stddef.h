// <stddef.h> for NVRTC: <cstddef>, with max_align_t and nullptr_t at global scope as well.
#ifndef KJIT_STD_STDDEF_H
#define KJIT_STD_STDDEF_H
#include "kjit/std/cstddef"

using ::std::max_align_t;
using ::std::nullptr_t;
#endif  // KJIT_STD_STDDEF_H
