/* test_sample.c - runner/sample: the sampler. Greedy sampling (temperature
 * 0) is the first index of the largest logit, NaNs never winning. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

#include "runner/sample.h"

/* Greedy sampling is the first index of the largest logit, NaNs never
 * winning (a NaN at 0 stays the answer), against the one-chain definition on
 * lengths around the eight-lane blocks, with ties, infinities and NaNs. */
Test(sample, greedy_is_first_argmax)
{
    struct sampler s;
    sampler_init(&s, 0.0f, 0, 1.0f, 0);
    uint64_t seed = 99;
    float x[203];
    for (int rep = 0; rep < 400; rep++) {
        int64_t n = 1 + rep % 203;
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            x[i] = (float)((seed >> 40) % 7) - 3.0f; /* few values: many ties */
        }
        if (rep % 5 == 1)
            x[(rep * 7) % n] = NAN;
        if (rep % 7 == 2)
            x[(rep * 3) % n] = INFINITY;
        if (rep % 11 == 3)
            x[n - 1] = 100.0f; /* the maximum in the tail past the blocks */
        if (rep % 13 == 4)
            x[0] = NAN;
        int64_t want = 0;
        for (int64_t i = 1; i < n; i++)
            if (x[i] > x[want])
                want = i;
        cr_assert_eq(sampler_next(&s, x, n), want, "n %lld, rep %d", (long long)n, rep);
    }
}
