/* ref_driver.c - the reference side of tests/test_ggml.c: ggml's own
 * ggml-quants.c (build-ref/ggml/, from the llama.cpp bundle of
 * node-llama-cpp@3.21.1) compiled with this file at test time.
 *
 *   ref_driver layout               one line per type: id block bytes d dmin
 *                                   (sizeof and offsetof of ggml's block structs; -1: none)
 *   ref_driver ID IN OUT            IN's blocks of type ID through ggml's
 *                                   dequantize_row_*, the floats into OUT
 *
 * ggml-quants.c refers to four functions of ggml.c that no dequantizer
 * calls (quantizers' validation and asserts): they abort here. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "ggml-quants.h"

void ggml_abort(const char *file, int line, const char *fmt, ...)
{
    fprintf(stderr, "ref_driver: ggml_abort at %s:%d (%s)\n", file, line, fmt);
    abort();
}

size_t ggml_type_size(enum ggml_type type)
{
    (void)type;
    abort();
}

size_t ggml_row_size(enum ggml_type type, int64_t ne)
{
    (void)type, (void)ne;
    abort();
}

const char *ggml_type_name(enum ggml_type type)
{
    (void)type;
    abort();
}

typedef void (*dq_fn)(const void *, float *, int64_t);

#define ROW(T, blk, qk, dfield, mfield) {GGML_TYPE_##T, (dq_fn)dequantize_row_##blk, qk, sizeof(block_##blk), dfield, mfield}
#define OFF(blk, f) (long)offsetof(block_##blk, f)
static const struct {
    int id;
    dq_fn fn;
    long qk, bytes, d, dmin;
} types[] = {
    ROW(Q4_0, q4_0, QK4_0, OFF(q4_0, d), -1),
    ROW(Q4_1, q4_1, QK4_1, OFF(q4_1, d), OFF(q4_1, m)),
    ROW(Q5_0, q5_0, QK5_0, OFF(q5_0, d), -1),
    ROW(Q5_1, q5_1, QK5_1, OFF(q5_1, d), OFF(q5_1, m)),
    ROW(Q8_0, q8_0, QK8_0, OFF(q8_0, d), -1),
    ROW(Q2_K, q2_K, QK_K, OFF(q2_K, d), OFF(q2_K, dmin)),
    ROW(Q3_K, q3_K, QK_K, OFF(q3_K, d), -1),
    ROW(Q4_K, q4_K, QK_K, OFF(q4_K, d), OFF(q4_K, dmin)),
    ROW(Q5_K, q5_K, QK_K, OFF(q5_K, d), OFF(q5_K, dmin)),
    ROW(Q6_K, q6_K, QK_K, OFF(q6_K, d), -1),
    ROW(IQ4_NL, iq4_nl, QK4_NL, OFF(iq4_nl, d), -1),
    ROW(IQ4_XS, iq4_xs, QK_K, OFF(iq4_xs, d), -1),
    ROW(IQ3_XXS, iq3_xxs, QK_K, OFF(iq3_xxs, d), -1),
    ROW(IQ3_S, iq3_s, QK_K, OFF(iq3_s, d), -1),
    ROW(IQ2_XXS, iq2_xxs, QK_K, OFF(iq2_xxs, d), -1),
    ROW(IQ2_XS, iq2_xs, QK_K, OFF(iq2_xs, d), -1),
    ROW(IQ2_S, iq2_s, QK_K, OFF(iq2_s, d), -1),
    ROW(IQ1_S, iq1_s, QK_K, OFF(iq1_s, d), -1),
    ROW(IQ1_M, iq1_m, QK_K, -1, -1),          /* its f16 scale is spread over scales[] */
    ROW(TQ1_0, tq1_0, QK_K, OFF(tq1_0, d), -1),
    ROW(TQ2_0, tq2_0, QK_K, OFF(tq2_0, d), -1),
    ROW(MXFP4, mxfp4, QK_MXFP4, OFF(mxfp4, e), -1),
};
#define N_TYPES (sizeof types / sizeof types[0])

int main(int argc, char **argv)
{
    if (argc == 2) {
        for (size_t t = 0; t < N_TYPES; t++)
            printf("%d %ld %ld %ld %ld\n", types[t].id, types[t].qk, types[t].bytes, types[t].d, types[t].dmin);
        return 0;
    }
    if (argc != 4)
        return 2;
    int id = atoi(argv[1]);
    size_t t = 0;
    while (t < N_TYPES && types[t].id != id)
        t++;
    if (t == N_TYPES)
        return 3;
    FILE *f = fopen(argv[2], "rb");
    if (!f)
        return 4;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len <= 0 || len % types[t].bytes)
        return 5;
    void *in = malloc((size_t)len);
    size_t nb = (size_t)(len / types[t].bytes), n = nb * (size_t)types[t].qk;
    float *out = malloc(n * sizeof *out);
    if (!in || !out || fread(in, 1, (size_t)len, f) != (size_t)len)
        return 6;
    fclose(f);
    types[t].fn(in, out, (int64_t)n);
    FILE *o = fopen(argv[3], "wb");
    if (!o || fwrite(out, sizeof *out, n, o) != n || fclose(o) != 0)
        return 7;
    free(in);
    free(out);
    return 0;
}
