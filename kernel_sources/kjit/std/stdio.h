// <stdio.h> for NVRTC: <cstdio>, whose names are declared at global scope too.
#ifndef KJIT_STD_STDIO_H
#define KJIT_STD_STDIO_H
#include "kjit/std/cstdio"
#endif  // KJIT_STD_STDIO_H
