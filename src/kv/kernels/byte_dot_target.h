// Adds avx512vnni to the functions that follow, on Highway's AVX3_DL target with GCC: Highway 1.0
// names only the VEX form (avxvnni) in that target's string, so the 512-bit vpdpbusd intrinsic
// would not inline (clang is handled in byte_dot-inl.h). Include right after
// HWY_BEFORE_NAMESPACE() in every file that calls DotBytes; HWY_AFTER_NAMESPACE() ends it (its
// pop_options). No include guard: once per target.
#if HWY_TARGET == HWY_AVX3_DL && !HWY_COMPILER_CLANG
#pragma GCC target("avx512vnni")
#endif
