#include "core/cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__) && !defined(GP_PORTABLE)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif

#if defined(__x86_64__) || defined(__i386__)
/* Whether this process may use the AMX tile registers: Linux grants their
 * state on request (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA),
 * for every thread of the process. */
static bool amx_granted(void)
{
#if defined(__x86_64__) && defined(__linux__)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return false;
#endif
}
#endif

static bool detected(enum cpu_feature f)
{
#if defined(__x86_64__) || defined(__i386__)
    /* F16C and AVX-VNNI from CPUID: not every compiler's __builtin_cpu_supports knows them */
    unsigned a, b, c, d;
    bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
    bool avxvnni = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1);
    bool amx = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1) && (d >> 25 & 1); /* AMX-TILE, AMX-INT8 */
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl");
    switch (f) {
    case CPU_AVX2: return avx2;
    case CPU_AVX_VNNI: return avx2 && avxvnni;
    case CPU_AVX512: return avx512;
    case CPU_AVX512_VNNI: return avx512 && __builtin_cpu_supports("avx512vnni");
    case CPU_AMX_INT8: return avx512 && __builtin_cpu_supports("avx512vnni") && amx && amx_granted();
    default: return false;
    }
#elif defined(__aarch64__)
    switch (f) {
    case CPU_NEON: return true; /* Advanced SIMD is part of every arm64 Linux and macOS target */
#if defined(__linux__) && !defined(GP_PORTABLE)
    case CPU_DOTPROD: return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__ARM_FEATURE_DOTPROD)
    case CPU_DOTPROD: return true; /* the compiler's target has it (every Apple arm64 CPU) */
#endif
    default: return false;
    }
#else
    (void)f;
    return false;
#endif
}

/* GEMPACK_ISA's names and the features each allows; NULL name: unset. */
static const struct {
    const char *name;
    unsigned allowed;
} caps[] = {
    {"scalar", 0},
    {"avx2", 1u << CPU_AVX2},
    {"avx-vnni", 1u << CPU_AVX2 | 1u << CPU_AVX_VNNI},
    {"avx512", 1u << CPU_AVX2 | 1u << CPU_AVX512},
    {"avx512-vnni", 1u << CPU_AVX2 | 1u << CPU_AVX512 | 1u << CPU_AVX512_VNNI},
    {"neon", 1u << CPU_NEON},
    {"dotprod", 1u << CPU_NEON | 1u << CPU_DOTPROD},
};

static int cap_index(void)
{
    const char *s = getenv("GEMPACK_ISA");
    if (!s || !*s)
        return -1;
    for (int i = 0; i < (int)(sizeof caps / sizeof caps[0]); i++)
        if (!strcmp(s, caps[i].name))
            return i;
    return -2;
}

static unsigned features; /* what cpu_has answers, bit f for feature f */
static bool valid;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void ask(void)
{
    int i = cap_index();
    valid = i != -2;
    for (int f = 0; f < CPU_FEATURES; f++) /* asked only when allowed: AMX's grant is a system call */
        if ((i == -1 || (i >= 0 && (caps[i].allowed >> f & 1))) && detected((enum cpu_feature)f))
            features |= 1u << f;
}

bool cpu_isa_valid(void)
{
    pthread_once(&once, ask);
    return valid;
}

bool cpu_has(enum cpu_feature f)
{
    pthread_once(&once, ask);
    return features >> f & 1;
}
