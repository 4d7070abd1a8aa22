// The example's kernel (kernels.cpp): out = x + y, elementwise, BLOCK elements a program.
#pragma once

#include "tiledist.h"

const tiledist::KernelDef& add_kernel();
