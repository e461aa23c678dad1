// Ends what exact_float_begin.h began (see there). No include guard.
#if defined(__clang__)
#pragma clang fp contract(on)
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif
