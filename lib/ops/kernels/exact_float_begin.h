// Included (with exact_float_end.h at the end of the file) by kernels whose float
// expressions reproduce a sequence of separately rounded IEEE operations of Pillow's C code
// or of PyTorch's kernels: a fused multiply-add (which -march=haswell and later would allow
// the compiler to form) changes the rounding, and so the truncated results. No such code
// reads the floating-point exception flags, so GCC may treat float operations as
// non-trapping (Clang's default) and if-convert branch-free selects; results are unchanged.
// Pushed here and popped by exact_float_end.h: in a unity build the files after one that
// includes this are compiled in the same translation unit, and must not inherit these
// settings (GCC warned of it: a later declaration's optimize attributes did not match).
// No include guard: every such file includes it.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off", "no-trapping-math")
#endif
