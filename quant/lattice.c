/* lattice.c - the QAT "q4_0" lattice (quant.h). */
#include <math.h>

#include "quant/quant.h"

/* QAT "q4_0" lattice (INPUTS.md §2.6): a group of 32 that sits exactly on
 * d*q, q in [-8, 7], becomes affine codes q+8 with scale d and bias -8d,
 * which dequantize to the same values. d is tried as amax/k, k = 1..8 (the
 * largest step that fits wins) and must be exact in the scales dtype. */
static bool lattice_group(const float *w, enum dtype sdt, uint8_t *codes, float *scale, float *bias)
{
    float amax = 0.0f;
    for (int i = 0; i < 32; i++)
        amax = fmaxf(amax, fabsf(w[i]));
    for (int k = 1; k <= 8; k++) {
        float d = amax > 0.0f ? amax / (float)k : 1.0f, back;
        uint8_t stored[4];
        dtype_from_f32(sdt, &d, stored, 1);
        dtype_to_f32(sdt, stored, &back, 1);
        if (back != d)
            continue;
        bool ok = true;
        for (int i = 0; i < 32 && ok; i++) {
            float q = rintf(w[i] / d);
            ok = q >= -8.0f && q <= 7.0f && q * d == w[i];
            codes[i] = (uint8_t)(q + 8.0f);
        }
        if (ok) {
            *scale = d;
            *bias = -8.0f * d;
            return true;
        }
    }
    return false;
}

void quant_lattice_row(const float *w, size_t k, enum dtype sdt, uint32_t *words, void *scales, void *biases,
                       uint64_t *groups, uint64_t *exact)
{
    uint8_t codes[32];
    size_t ssz = dtype_table[sdt].bits / 8;
    for (size_t g = 0; g < k / 32; g++) {
        float sc, bi;
        if (lattice_group(w + 32 * g, sdt, codes, &sc, &bi))
            (*exact)++;
        else
            quant_affine_group(w + 32 * g, 32, 4, codes, &sc, &bi);
        (*groups)++;
        dtype_from_f32(sdt, &sc, (uint8_t *)scales + g * ssz, 1);
        dtype_from_f32(sdt, &bi, (uint8_t *)biases + g * ssz, 1);
        quant_pack_codes(codes, 32, 4, words + 4 * g);
    }
}
