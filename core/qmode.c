#include "core/qmode.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int default_gs, default_bits;
    unsigned bits_allowed;   /* bit b set: b bits allowed */
    unsigned gs_allowed;     /* bit k set: group size 16 << k allowed */
} modes[] = {
    [QM_AFFINE] = {"affine", 64, 4, 1u << 2 | 1u << 3 | 1u << 4 | 1u << 5 | 1u << 6 | 1u << 8, 2 | 4 | 8},
    [QM_MXFP4] = {"mxfp4", 32, 4, 1u << 4, 2},
    [QM_NVFP4] = {"nvfp4", 16, 4, 1u << 4, 1},
    [QM_MXFP8] = {"mxfp8", 32, 8, 1u << 8, 2},
};

#define N_MODES (sizeof modes / sizeof modes[0])

bool qmode_from_name(const char *s, enum qmode *out)
{
    for (size_t i = 0; i < N_MODES; i++)
        if (!strcmp(s, modes[i].name)) {
            *out = (enum qmode)i;
            return true;
        }
    return false;
}

const char *qmode_name(enum qmode m)
{
    return (size_t)m < N_MODES ? modes[m].name : "unknown";
}

const char *qmode_describe(enum qmode m, int bits, int group_size, char *buf, size_t len)
{
    if (m == QM_AFFINE)
        snprintf(buf, len, "affine %d-bit group %d", bits, group_size);
    else
        snprintf(buf, len, "%s", qmode_name(m));
    return buf;
}

void qmode_defaults(enum qmode m, int *group_size, int *bits)
{
    if ((size_t)m >= N_MODES)
        m = QM_AFFINE;
    *group_size = modes[m].default_gs;
    *bits = modes[m].default_bits;
}

bool quant_params_valid(enum qmode m, int bits, int group_size)
{
    if ((size_t)m >= N_MODES || bits < 1 || bits > 8 || group_size < 16 || group_size > 128 ||
        (group_size & (group_size - 1)))
        return false;
    int k = 0;
    while ((16 << k) < group_size)
        k++;
    return (modes[m].bits_allowed >> bits & 1) && (modes[m].gs_allowed >> k & 1);
}

