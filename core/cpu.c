#include "core/cpu.h"

bool cpu_has_avx2(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

bool cpu_has_avx512(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && cpu_has_avx2();
#else
    return false;
#endif
}

bool cpu_has_avx512_vnni(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return cpu_has_avx512() && __builtin_cpu_supports("avx512vnni");
#else
    return false;
#endif
}
