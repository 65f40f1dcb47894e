/* cpu.h - what the CPU this process runs on can do, asked once.
 *
 * GEMPACK_ISA=<name> in the environment limits the kernels to a subset of
 * what the CPU has, to run or measure another machine's paths on this one:
 * scalar (none), avx2, avx-vnni (AVX2 with AVX-VNNI), avx512 (AVX-512 F/BW/VL
 * without VNNI), avx512-vnni (with VNNI, without AMX), neon, dotprod (NEON
 * with the dot-product instructions). Unset: everything detected. */
#ifndef GP_CPU_H
#define GP_CPU_H

#include <stdbool.h>

/* The architecture, for the files that hold SIMD code for one of them. */
#if defined(__x86_64__) || defined(__i386__)
#define GP_X86 1
#else
#define GP_X86 0
#endif
#if defined(__aarch64__)
#define GP_ARM64 1
#else
#define GP_ARM64 0
#endif

enum cpu_feature {
    CPU_AVX2,        /* AVX2, FMA and F16C */
    CPU_AVX_VNNI,    /* AVX-VNNI (VEX vpdpbusd), with AVX2 */
    CPU_AVX512,      /* AVX-512 F, BW and VL, with AVX2 */
    CPU_AVX512_VNNI, /* and AVX-512 VNNI */
    CPU_NEON,        /* arm64 Advanced SIMD */
    CPU_DOTPROD,     /* arm64 SDOT/UDOT (FEAT_DotProd) */
    CPU_AMX_INT8,    /* AMX-TILE and AMX-INT8 with AVX-512 VNNI, the tile data granted by the OS (Linux) */
    CPU_FEATURES
};

bool cpu_has(enum cpu_feature f);

/* False when GEMPACK_ISA is set to a name not listed above. */
bool cpu_isa_valid(void);

#endif
