#include "runner/sample.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/kernels.h"

void sampler_init(struct sampler *s, float temperature, int top_k, float top_p, uint64_t seed)
{
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
    s->state = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    if (!s->state)
        s->state = 1;
}

static double uniform(struct sampler *s)
{
    s->state ^= s->state >> 12;
    s->state ^= s->state << 25;
    s->state ^= s->state >> 27;
    return (double)((s->state * 0x2545f4914f6cdd1dull) >> 11) * 0x1p-53;
}

struct cand {
    int32_t id;
    float p;
};

static int by_prob(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

/* The first index of the largest logit; NaNs never win (none is larger
 * than a NaN logits[0], which stays the answer). The maximum comes from eight
 * independent running maxima (a single chain of compares took ~4.5 ns per
 * logit: 1.2 ms per E2B token), then one scan finds its first index. */
static int32_t argmax(const float *logits, int64_t vocab)
{
    float lane[8], m = logits[0];
    if (isnan(m))
        return 0;
    for (int k = 0; k < 8; k++)
        lane[k] = m;
    int64_t i = 0;
    for (; i + 8 <= vocab; i += 8)
        for (int k = 0; k < 8; k++)
            lane[k] = logits[i + k] > lane[k] ? logits[i + k] : lane[k];
    for (; i < vocab; i++)
        m = logits[i] > m ? logits[i] : m;
    for (int k = 0; k < 8; k++)
        m = lane[k] > m ? lane[k] : m;
    i = 0;
    while (logits[i] != m)
        i++;
    return (int32_t)i;
}

int32_t sampler_next(struct sampler *s, const float *logits, int64_t vocab)
{
    int32_t best = argmax(logits, vocab);
    if (s->temperature <= 0.0f)
        return best;
    struct cand *c = malloc((size_t)vocab * sizeof *c);
    if (!c)
        return best;
    double sum = 0.0;
    for (int64_t i = 0; i < vocab; i++) {
        c[i].id = (int32_t)i;
        c[i].p = kern_exp((logits[i] - logits[best]) / s->temperature);
        sum += (double)c[i].p;
    }
    qsort(c, (size_t)vocab, sizeof *c, by_prob);
    int64_t keep = s->top_k > 0 && s->top_k < vocab ? s->top_k : vocab;
    double acc = 0.0, kept = 0.0;
    int64_t n = 0;
    for (; n < keep; n++) {
        kept += (double)c[n].p;
        acc += (double)c[n].p / sum;
        if (acc >= (double)s->top_p) {
            n++;
            break;
        }
    }
    double u = uniform(s) * kept, run = 0.0;
    int32_t pick = c[n - 1].id;
    for (int64_t i = 0; i < n; i++) {
        run += (double)c[i].p;
        if (u < run) {
            pick = c[i].id;
            break;
        }
    }
    free(c);
    return pick;
}
