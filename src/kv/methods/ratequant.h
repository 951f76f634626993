// Forwards to src/kv/methods/ratequant/ratequant.h, the header's home since the methods moved
// into family folders, for includes that still name this path (fuzz/fuzz_calibration.cpp).
#pragma once

#include "src/kv/methods/ratequant/ratequant.h"
