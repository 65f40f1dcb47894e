/* sample.h - next-token choice: greedy, or seeded temperature / top-k / top-p. */
#ifndef GP_SAMPLE_H
#define GP_SAMPLE_H

#include <stdint.h>

struct sampler {
    float temperature;   /* 0: greedy (argmax, lowest id on ties) */
    int top_k;           /* 0: all */
    float top_p;         /* 1: all */
    uint64_t state;      /* xorshift64* state, from the seed */
};

void sampler_init(struct sampler *s, float temperature, int top_k, float top_p, uint64_t seed);
int32_t sampler_next(struct sampler *s, const float *logits, int64_t vocab);

#endif
