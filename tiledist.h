/// @file
/// tiledist: one header for kernel authors and their host programs.
#pragma once

#include "dsl/dist.h"
#include "dsl/kernel_def.h"
#include "dsl/profile.h"
#include "dsl/tl.h"
#include "jit/kernel.h"
#include "runtime/hip.h"
#include "runtime/world.h"
