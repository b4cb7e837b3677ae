// <string.h> for NVRTC: <cstring>, whose names are declared at global scope too.
#ifndef KJIT_STD_STRING_H
#define KJIT_STD_STRING_H
#include "kjit/std/cstring"
#endif  // KJIT_STD_STRING_H
