/* cpu.h - what the CPU this process runs on can do, asked once. */
#ifndef GP_CPU_H
#define GP_CPU_H

#include <stdbool.h>

bool cpu_has_avx2(void);        /* AVX2 and FMA */
bool cpu_has_avx512(void);      /* AVX-512 F, BW and VL (and AVX2) */
bool cpu_has_avx512_vnni(void); /* and VNNI */

#endif
