/* test_golden.c - golden-logit files and their comparison (golden/golden.h,
 * CLI.md (golden make|check)).
 *
 * Files: npz_write_logits -> golden_read round trip; the committed numpy-written
 * golden golden/data/e2b-bf16.npz (logits_f64 preferred, meta tolerances);
 * a table of corrupt goldens and corrupt .npy images, each rejected with a
 * message naming the problem. Metrics: synthetic logits with answers known in
 * closed form (identical, constant shift, scaling, argmax flip, two-way KL,
 * p99 by nearest rank, NaN). Verdict: pass/fail, the failures list, disabled
 * (negative) thresholds. Generation checks (golden/generation.h): loops at and
 * just past each bound of their definition, on hand-built id sequences. */
#include <criterion/criterion.h>

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/fileio.h"
#include "core/npz.h"
#include "golden/generation.h"
#include "golden/golden.h"
#include "tests/helpers.h"

/* Metrics are float64 sums over at most a few thousand terms of O(1) values:
 * exact closed forms are met to ~1e-15; 1e-12 leaves margin and is still far
 * below every difference the tests provoke (≥ 1e-3). */
#define METRIC_TOL 1e-12

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static void assert_near(double got, double want, const char *what)
{
    cr_assert(fabs(got - want) <= METRIC_TOL * fmax(1.0, fabs(want)), "%s: %.17g, expected %.17g", what, got, want);
}

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Random logits in [-8, 8), multiples of 2^-20 (exact in float and double). */
static float *rand_logits(int64_t T, int64_t V, uint64_t seed)
{
    float *z = malloc((size_t)(T * V) * sizeof *z);
    cr_assert(z);
    for (int64_t k = 0; k < T * V; k++)
        z[k] = (float)((int32_t)(rng_next(&seed) >> 40) - (1 << 23)) / (float)(1 << 20);
    return z;
}

/* An in-memory golden holding ref[T, V] (no file). */
static struct golden mem_golden(const float *ref, int64_t T, int64_t V)
{
    struct golden g = {0};
    g.T = T;
    g.V = V;
    g.logits = malloc((size_t)(T * V) * sizeof *g.logits);
    g.tokens = calloc((size_t)T, sizeof *g.tokens);
    cr_assert(g.logits && g.tokens);
    for (int64_t k = 0; k < T * V; k++)
        g.logits[k] = (double)ref[k];
    return g;
}

static struct golden_thresholds no_thresholds(void)
{
    return (struct golden_thresholds){-1, -1, -1, -1, -1, -1};
}

/* An .npy image with a hand-written header dict (version 1, padded to 64)
 * and payload_len payload bytes of 0x11. malloc'ed. */
static uint8_t *npy_image(const char *dict, size_t payload_len, size_t *len)
{
    size_t dl = strlen(dict), hlen = (dl + 1 + 10 + 63) / 64 * 64 - 10;
    *len = 10 + hlen + payload_len;
    uint8_t *b = malloc(*len);
    cr_assert(b);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)(hlen & 0xff);
    b[9] = (uint8_t)(hlen >> 8);
    memset(b + 10, ' ', hlen);
    memcpy(b + 10, dict, dl);
    b[10 + hlen - 1] = '\n';
    memset(b + 10 + hlen, 0x11, payload_len);
    return b;
}

static uint8_t *npy_of(enum dtype dt, const uint64_t *shape, int rank, const void *data, size_t *len)
{
    uint8_t *b;
    struct err e = {0};
    cr_assert_eq(npy_encode(dt, shape, rank, data, &b, len, &e), ERR_OK, "%s", e.msg);
    return b;
}

static char *golden_path(void)
{
    char *p = malloc(4096);
    cr_assert(p);
    snprintf(p, 4096, "%s/golden/data/e2b-bf16.npz", GP_SOURCE_DIR);
    return p;
}

/* ------------------------------------------------------------------ files */

Test(golden, write_read_round_trip)
{
    char *dir = th_mkdtemp(), *path = fio_join(dir, "g.npz");
    const int64_t T = 5, V = 7;
    int32_t tokens[5] = {2, 0, 511, 7, 2147483647};
    float *logits = rand_logits(T, V, 1);
    logits[3] = -INFINITY; /* masked logits survive the trip */
    logits[4] = 1e-30f;
    struct json_object *meta = json_object_new_object(), *tol = json_object_new_object();
    json_object_object_add(meta, "producer", json_object_new_string("test_golden"));
    json_object_object_add(tol, "max_abs", json_object_new_double(0.25));
    json_object_object_add(meta, "tolerances", tol);
    struct err e = {0};
    cr_assert_eq(npz_write_logits(path, 1, (const int32_t *const[]){tokens}, &T, T, logits, V, meta, &e), ERR_OK, "%s", e.msg);
    json_object_put(meta);

    struct golden g;
    cr_assert_eq(golden_read(path, 0, &g, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(g.T, T);
    cr_assert_eq(g.V, V);
    cr_assert_not(g.f64, "an npz_write_logits file has float32 logits only");
    for (int64_t t = 0; t < T; t++)
        cr_assert_eq(g.tokens[t], tokens[t], "token %lld", (long long)t);
    for (int64_t k = 0; k < T * V; k++)
        cr_assert(g.logits[k] == (double)logits[k], "logit %lld: %g vs %g", (long long)k, g.logits[k],
                  (double)logits[k]);
    cr_assert_not_null(g.meta);
    struct json_object *v;
    cr_assert(json_object_object_get_ex(g.meta, "producer", &v));
    cr_assert_str_eq(json_object_get_string(v), "test_golden");
    struct golden_thresholds th = g.th;
    cr_assert_eq(th.max_abs, 0.25);
    cr_assert_eq(th.top1_min, 1.0); /* default kept */
    golden_free(&g);

    /* members as np.load expects them: tokens <i4 [T], logits <f4 [T, V] */
    struct npy a;
    cr_assert_eq(npz_read_array(path, "tokens.npy", UINT64_MAX, &a, &e), ERR_OK, "%s", e.msg);
    cr_assert(a.dtype == DT_I32 && a.rank == 1 && a.shape[0] == (uint64_t)T);
    npy_free(&a);
    cr_assert_eq(npz_read_array(path, "logits.npy", UINT64_MAX, &a, &e), ERR_OK, "%s", e.msg);
    cr_assert(a.dtype == DT_F32 && a.rank == 2 && a.shape[0] == (uint64_t)T && a.shape[1] == (uint64_t)V);
    cr_assert_eq(memcmp(a.data, logits, (size_t)(T * V) * sizeof *logits), 0);
    npy_free(&a);

    /* same content, same bytes */
    char *again = fio_join(dir, "again.npz");
    meta = json_object_new_object();
    json_object_object_add(meta, "producer", json_object_new_string("test_golden"));
    tol = json_object_new_object();
    json_object_object_add(tol, "max_abs", json_object_new_double(0.25));
    json_object_object_add(meta, "tolerances", tol);
    cr_assert_eq(npz_write_logits(again, 1, (const int32_t *const[]){tokens}, &T, T, logits, V, meta, &e), ERR_OK, "%s", e.msg);
    json_object_put(meta);
    size_t la, lb;
    uint8_t *ba = th_read(path, &la), *bb = th_read(again, &lb);
    cr_assert(ba && bb && la == lb && !memcmp(ba, bb, la), "npz_write_logits is not deterministic");
    free(ba);
    free(bb);
    free(again);
    free(logits);
    free(path);
    th_rmtree(dir);
}

Test(golden, committed_numpy_golden)
{
    char *path = golden_path();
    struct golden g;
    struct err e = {0};
    cr_assert_eq(golden_read(path, 0, &g, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(g.T, 24);
    cr_assert_eq(g.V, 512);
    cr_assert(g.f64, "logits_f64.npy must be preferred");
    /* the e2b fixture's tokens.json (gempack fixture --variant e2b) */
    static const int32_t want[24] = {2,   127, 482, 310, 202, 226, 321, 152, 132, 8,   489, 307,
                                     465, 503, 367, 507, 68,  242, 212, 370, 281, 279, 139, 336};
    for (int t = 0; t < 24; t++)
        cr_assert_eq(g.tokens[t], want[t], "token %d", t);
    /* logits.npy is logits_f64 rounded to float32 (golden/README.md) */
    struct npy f32;
    cr_assert_eq(npz_read_array(path, "logits.npy", UINT64_MAX, &f32, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(f32.count, (uint64_t)(24 * 512));
    bool some_inexact = false;
    for (uint64_t k = 0; k < f32.count; k++) {
        cr_assert_eq(((float *)f32.data)[k], (float)g.logits[k], "logit %llu", (unsigned long long)k);
        some_inexact |= (double)(float)g.logits[k] != g.logits[k];
    }
    cr_assert(some_inexact, "the float64 logits must carry more than float32 precision");
    npy_free(&f32);
    /* soft-capped at 30 */
    for (int64_t k = 0; k < g.T * g.V; k++)
        cr_assert(fabs(g.logits[k]) < 30.0);
    cr_assert_not_null(g.meta);
    struct json_object *v;
    cr_assert(json_object_object_get_ex(g.meta, "producer", &v));
    cr_assert_str_eq(json_object_get_string(v), "gempack golden/reference.py");
    struct golden_thresholds th = g.th;
    cr_assert_eq(th.max_abs, 1e-4);
    cr_assert_eq(th.top1_min, 1.0);
    cr_assert_eq(th.kld_mean, 1e-6);
    cr_assert_eq(th.nmse, -1);
    cr_assert_eq(th.kld_p99, -1);
    cr_assert_eq(th.kld_max, -1);
    /* compared with its own float32 rounding: |Δ| ≤ half an ulp at |z| < 32 */
    struct golden_metrics m;
    float *got = malloc((size_t)(g.T * g.V) * sizeof *got);
    cr_assert(got);
    for (int64_t k = 0; k < g.T * g.V; k++)
        got[k] = (float)g.logits[k];
    golden_compare(&g, got, th, &m);
    cr_assert(m.max_abs > 0 && m.max_abs <= ldexp(1.0, -20), "max_abs %g", m.max_abs);
    cr_assert_eq(m.top1, 1.0);
    cr_assert_eq(m.first_divergent, -1);
    bool pass;
    struct json_object *verdict = golden_verdict(&m, &th, &pass);
    cr_assert(pass);
    json_object_put(verdict);
    free(got);
    golden_free(&g);
    free(path);
}

Test(golden, thresholds_defaults_and_meta)
{
    struct golden g = {0};
    struct golden_thresholds th;
    struct err e = {0};
    cr_assert_eq(golden_thresholds_from_meta(&g, "g.npz", &th, &e), ERR_OK); /* no meta */
    cr_assert_eq(th.max_abs, 1e-4);
    cr_assert_eq(th.top1_min, 1.0);
    cr_assert(th.nmse < 0 && th.kld_mean < 0 && th.kld_p99 < 0 && th.kld_max < 0);
    const char *js = "{\"tolerances\": {\"max_abs\": null, \"nmse\": 0.5, \"kld_mean\": 2, \"kld_p99\": 1e-3,"
                     " \"kld_max\": 0.25, \"top1\": 0.875}}";
    g.meta = json_tokener_parse(js);
    cr_assert_not_null(g.meta);
    cr_assert_eq(golden_thresholds_from_meta(&g, "g.npz", &th, &e), ERR_OK, "%s", e.msg);
    cr_assert_eq(th.max_abs, -1, "null disables a check");
    cr_assert_eq(th.nmse, 0.5);
    cr_assert_eq(th.kld_mean, 2.0, "integers are accepted");
    cr_assert_eq(th.kld_p99, 1e-3);
    cr_assert_eq(th.kld_max, 0.25);
    cr_assert_eq(th.top1_min, 0.875);
    json_object_put(g.meta);
}

/* A tolerance of the wrong type or range is an error naming the file and the
 * key, never a silent fallback to the default. */
Test(golden, thresholds_invalid_are_errors)
{
    static const struct {
        const char *json, *key;
    } bad[] = {
        {"{\"tolerances\": {\"max_abs\": \"1e-4\"}}", "tolerances.max_abs is string"},
        {"{\"tolerances\": {\"max_abs\": true}}", "tolerances.max_abs is boolean"},
        {"{\"tolerances\": {\"nmse\": [1]}}", "tolerances.nmse is array"},
        {"{\"tolerances\": {\"kld_mean\": NaN}}", "tolerances.kld_mean is double NaN"},
        {"{\"tolerances\": {\"kld_max\": -1}}", "tolerances.kld_max is int -1"},
        {"{\"tolerances\": {\"top1\": 1.5}}", "tolerances.top1 is double 1.5"},
        {"{\"tolerances\": {\"top_1\": 1}}", "tolerances.top_1 is not a threshold"},
        {"{\"tolerances\": [1e-4]}", "\"tolerances\" is array"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct golden g = {0};
        struct golden_thresholds th;
        struct err e = {0};
        g.meta = json_tokener_parse(bad[i].json);
        cr_assert_not_null(g.meta, "%s", bad[i].json);
        cr_assert_eq(golden_thresholds_from_meta(&g, "dir/g.npz", &th, &e), ERR_FORMAT, "%s accepted", bad[i].json);
        cr_assert(strstr(e.msg, "dir/g.npz: meta.json: ") && strstr(e.msg, bad[i].key), "%s: %s", bad[i].json, e.msg);
        json_object_put(g.meta);
    }
}

/* A threshold a caller gives by name (the command line's --max-abs X ...):
 * each key sets its own field from a number in its range or "off" (not
 * checked, as meta.json's null); anything else, a negative number too, is
 * ERR_USAGE naming the key and the text. */
Test(golden, threshold_parse)
{
    struct golden_thresholds th = {0};
    struct err e = {0};
    static const char *const keys[] = {"max_abs", "nmse", "kld_mean", "kld_p99", "kld_max", "top1"};
    static const char *const texts[] = {"1e-4", "0.5", "off", "2", "0", "0.875"};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(golden_threshold_parse(&th, keys[i], texts[i], &e), ERR_OK, "%s: %s", keys[i], e.msg);
    cr_expect_eq(th.max_abs, 1e-4);
    cr_expect_eq(th.nmse, 0.5);
    cr_expect_eq(th.kld_mean, -1.0);
    cr_expect_eq(th.kld_p99, 2.0);
    cr_expect_eq(th.kld_max, 0.0);
    cr_expect_eq(th.top1_min, 0.875);
    static const struct {
        const char *key, *text, *says;
    } bad[] = {{"max_abs", "x", "'max_abs' x: expected a number"},
               {"top1", "nan", "'top1' nan: expected a number"},
               {"max_abs", "-1", "'max_abs' -1: expected a number in [0, inf), or off"},
               {"kld_max", "inf", "'kld_max' inf: expected a number"},
               {"top1", "1.5", "'top1' 1.5: expected a number in [0, 1], or off"},
               {"nmse", "", "'nmse' : expected a number"},
               {"kld_mean", "1e-3 ", "'kld_mean' 1e-3 : expected a number"},
               {"top_1", "1", "'top_1': not a threshold"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(golden_threshold_parse(&th, bad[i].key, bad[i].text, &e), ERR_USAGE, "%s accepted", bad[i].text);
        cr_expect(strstr(e.msg, bad[i].says), "%s", e.msg);
    }
    cr_expect_eq(th.max_abs, 1e-4, "a refused value leaves the threshold as it was");
}

/* ------------------------------------------------------------------ metrics */

Test(golden, identical_logits)
{
    const int64_t T = 6, V = 33;
    float *ref = rand_logits(T, V, 2);
    struct golden g = mem_golden(ref, T, V);
    struct golden_metrics m;
    struct golden_thresholds th = {.max_abs = 1e-4, .nmse = 0, .kld_mean = 0, .kld_p99 = 0, .kld_max = 0, .top1_min = 1};
    golden_compare(&g, ref, th, &m);
    cr_assert_eq(m.T, T);
    cr_assert_eq(m.V, V);
    cr_assert_eq(m.max_abs, 0.0);
    cr_assert_eq(m.nmse, 0.0);
    cr_assert_eq(m.kld_mean, 0.0);
    cr_assert_eq(m.kld_p99, 0.0);
    cr_assert_eq(m.kld_max, 0.0);
    cr_assert_eq(m.top1, 1.0);
    cr_assert_eq(m.rms_dp, 0.0);
    cr_assert_eq(m.first_divergent, -1);
    assert_near(m.cosine, 1.0, "cosine");
    bool pass = false;
    struct json_object *v = golden_verdict(&m, &th, &pass); /* zero thresholds: 0 <= 0 passes */
    cr_assert(pass);
    json_object_put(v);
    golden_free(&g);
    free(ref);
}

Test(golden, constant_shift_is_invisible_to_kld)
{
    const int64_t T = 4, V = 50;
    float *ref = rand_logits(T, V, 3), *got = malloc((size_t)(T * V) * sizeof *got);
    cr_assert(got);
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < V; k++) /* row t shifted by 0.25·(t+1): exact in float */
            got[t * V + k] = ref[t * V + k] + 0.25f * (float)(t + 1);
    struct golden g = mem_golden(ref, T, V);
    struct golden_metrics m;
    golden_compare(&g, got, no_thresholds(), &m);
    cr_assert_eq(m.max_abs, 1.0, "max_abs is the largest shift (row 3: 1.0), got %.17g", m.max_abs);
    cr_assert(m.kld_max <= METRIC_TOL, "softmax is shift invariant: kld_max %g", m.kld_max);
    cr_assert(m.kld_mean <= METRIC_TOL);
    cr_assert(m.rms_dp <= METRIC_TOL);
    cr_assert_eq(m.top1, 1.0);
    cr_assert_eq(m.first_divergent, -1, "no threshold: only an argmax change diverges");
    /* with max_abs 0.6 the first row whose shift exceeds it (0.75, row 2) diverges */
    struct golden_thresholds th = no_thresholds();
    th.max_abs = 0.6;
    golden_compare(&g, got, th, &m);
    cr_assert_eq(m.first_divergent, 2);
    bool pass;
    struct json_object *v = golden_verdict(&m, &th, &pass);
    cr_assert_not(pass);
    json_object_put(v);
    golden_free(&g);
    free(ref);
    free(got);
}

Test(golden, scaled_logits_cosine_and_nmse)
{
    const float ref[4] = {1, 2, 3, 4}; /* T 1, V 4 */
    const float got[4] = {2, 4, 6, 8};
    struct golden g = mem_golden(ref, 1, 4);
    struct golden_metrics m;
    golden_compare(&g, got, no_thresholds(), &m);
    cr_assert_eq(m.max_abs, 4.0);
    assert_near(m.nmse, 1.0, "nmse = Σ(2z - z)² / Σz²");
    assert_near(m.cosine, 1.0, "cosine of parallel vectors");
    cr_assert_eq(m.top1, 1.0);
    /* KL(softmax(z) || softmax(2z)) in closed form */
    double p[4], q[4], sp = 0, sq = 0, kl = 0;
    for (int k = 0; k < 4; k++) {
        p[k] = exp((double)ref[k]);
        q[k] = exp((double)got[k]);
        sp += p[k];
        sq += q[k];
    }
    for (int k = 0; k < 4; k++)
        kl += p[k] / sp * log((p[k] / sp) / (q[k] / sq));
    assert_near(m.kld_mean, kl, "kld");
    assert_near(m.rms_dp, fabs(p[3] / sp - q[3] / sq), "rms_dp at the reference top-1");
    const float neg[4] = {-1, -2, -3, -4};
    golden_compare(&g, neg, no_thresholds(), &m);
    assert_near(m.cosine, -1.0, "cosine of opposite vectors");
    cr_assert_eq(m.top1, 0.0);
    cr_assert_eq(m.first_divergent, 0);
    golden_free(&g);
}

Test(golden, argmax_flip_at_position_3)
{
    const int64_t T = 8, V = 16;
    float *ref = rand_logits(T, V, 4), *got = malloc((size_t)(T * V) * sizeof *got);
    cr_assert(got);
    memcpy(got, ref, (size_t)(T * V) * sizeof *got);
    /* position 3: lift the runner-up 0.5 above the maximum */
    int64_t a = 0, b = -1;
    for (int64_t k = 1; k < V; k++)
        if (ref[3 * V + k] > ref[3 * V + a])
            a = k;
    for (int64_t k = 0; k < V; k++)
        if (k != a && (b < 0 || ref[3 * V + k] > ref[3 * V + b]))
            b = k;
    got[3 * V + b] = ref[3 * V + a] + 0.5f;
    struct golden g = mem_golden(ref, T, V);
    struct golden_metrics m;
    golden_compare(&g, got, no_thresholds(), &m);
    assert_near(m.top1, (double)(T - 1) / (double)T, "top1");
    cr_assert_eq(m.first_divergent, 3);
    assert_near(m.max_abs, (double)(ref[3 * V + a] + 0.5f - ref[3 * V + b]), "max_abs");
    cr_assert_gt(m.kld_max, 1e-3);
    assert_near(m.kld_mean, m.kld_max / (double)T, "one position carries all the KL");
    struct golden_thresholds th = no_thresholds();
    th.top1_min = 1.0;
    bool pass;
    struct json_object *v = golden_verdict(&m, &th, &pass);
    cr_assert_not(pass);
    struct json_object *f = json_object_object_get(v, "failures");
    cr_assert_eq(json_object_array_length(f), 1);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(json_object_array_get_idx(f, 0), "metric")), "top1");
    json_object_put(v);
    /* a small change (no argmax change) at position 5 over max_abs 1e-4 diverges at 5 */
    memcpy(got, ref, (size_t)(T * V) * sizeof *got);
    got[5 * V + (a + 1) % V] += 1e-3f;
    th = no_thresholds();
    th.max_abs = 1e-4;
    golden_compare(&g, got, th, &m);
    cr_assert_eq(m.top1, 1.0);
    cr_assert_eq(m.first_divergent, 5);
    golden_free(&g);
    free(ref);
    free(got);
}

Test(golden, kld_two_way_closed_form)
{
    /* P = softmax(0, 0) = (½, ½), Q = softmax(0, 1) = (1, e)/(1 + e):
     * KL(P || Q) = ½ ln(½(1+e)) + ½ ln(½(1+e)/e) = ln(½(1+e)) - ½. */
    const float ref[2] = {0, 0}, got[2] = {0, 1};
    struct golden g = mem_golden(ref, 1, 2);
    struct golden_metrics m;
    golden_compare(&g, got, no_thresholds(), &m);
    double kl = log(0.5 * (1.0 + M_E)) - 0.5;
    assert_near(m.kld_mean, kl, "kld_mean");
    assert_near(m.kld_max, kl, "kld_max");
    assert_near(m.kld_p99, kl, "kld_p99");
    assert_near(m.rms_dp, 0.5 - 1.0 / (1.0 + M_E), "rms_dp"); /* reference top-1: token 0 (first of a tie) */
    cr_assert_eq(m.top1, 0.0, "ties resolve to the first index: 0 vs 1");
    cr_assert_eq(m.max_abs, 1.0);
    /* KL is not symmetric: KL(Q || P) = ln 2 - H(Q) differs */
    struct golden g2 = mem_golden(got, 1, 2);
    struct golden_metrics m2;
    golden_compare(&g2, ref, no_thresholds(), &m2);
    double q0 = 1.0 / (1.0 + M_E), q1 = M_E / (1.0 + M_E);
    assert_near(m2.kld_mean, q0 * log(2 * q0) + q1 * log(2 * q1), "reverse kld");
    cr_assert_gt(fabs(m2.kld_mean - m.kld_mean), 1e-3);
    golden_free(&g);
    golden_free(&g2);
}

Test(golden, kld_mean_max_p99)
{
    /* T = 200, V = 2: rows 197, 198, 199 differ with KL a < b < c, the rest 0.
     * p99 by nearest rank: sorted[ceil(0.99·200) - 1] = sorted[197] = a. */
    const int64_t T = 200, V = 2;
    float *ref = calloc((size_t)(T * V), sizeof *ref), *got = calloc((size_t)(T * V), sizeof *got);
    cr_assert(ref && got);
    got[197 * V + 1] = 0.5f;
    got[198 * V + 1] = 1.0f;
    got[199 * V + 1] = 2.0f;
    struct golden g = mem_golden(ref, T, V);
    struct golden_metrics m;
    golden_compare(&g, got, no_thresholds(), &m);
    double kl[3], d[3] = {0.5, 1.0, 2.0}, sum = 0;
    for (int i = 0; i < 3; i++) { /* KL((½, ½) || (1, e^d)/(1+e^d)) = ln(½(1+e^d)) - d/2 */
        kl[i] = log(0.5 * (1.0 + exp(d[i]))) - d[i] / 2;
        sum += kl[i];
    }
    assert_near(m.kld_max, kl[2], "kld_max");
    assert_near(m.kld_p99, kl[0], "kld_p99 (nearest rank)");
    assert_near(m.kld_mean, sum / (double)T, "kld_mean");
    cr_assert_eq(m.first_divergent, 197);
    /* thresholds between the values: kld_max fails, kld_p99 passes */
    struct golden_thresholds th = no_thresholds();
    th.kld_max = kl[1];
    th.kld_p99 = kl[0];
    bool pass;
    struct json_object *v = golden_verdict(&m, &th, &pass);
    cr_assert_not(pass);
    struct json_object *f = json_object_object_get(v, "failures");
    cr_assert_eq(json_object_array_length(f), 1);
    struct json_object *f0 = json_object_array_get_idx(f, 0);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(f0, "metric")), "kld_max");
    assert_near(json_object_get_double(json_object_object_get(f0, "value")), kl[2], "failure value");
    assert_near(json_object_get_double(json_object_object_get(f0, "threshold")), kl[1], "failure threshold");
    json_object_put(v);
    golden_free(&g);
    free(ref);
    free(got);
}

/* A model that returns NaN must never pass (every comparison with NaN is
 * false, so fmax-style reductions silently drop it). */
Test(golden, nan_logits_fail)
{
    const int64_t T = 3, V = 8;
    float *ref = rand_logits(T, V, 5), *got = malloc((size_t)(T * V) * sizeof *got);
    cr_assert(got);
    memcpy(got, ref, (size_t)(T * V) * sizeof *got);
    /* a NaN that is not at the argmax of its row */
    int64_t a = 0;
    for (int64_t k = 1; k < V; k++)
        if (ref[V + k] > ref[V + a])
            a = k;
    got[V + (a + 1) % V] = NAN;
    struct golden g = mem_golden(ref, T, V);
    struct golden_thresholds th = {.max_abs = 1e-4, .nmse = -1, .kld_mean = -1, .kld_p99 = -1, .kld_max = -1,
                                   .top1_min = 1.0}; /* the defaults */
    struct golden_metrics m;
    golden_compare(&g, got, th, &m);
    cr_assert(!(m.max_abs <= 1e-4), "max_abs %g hides the NaN", m.max_abs);
    cr_assert(!(m.kld_max <= 1e-6), "kld_max %g hides the NaN", m.kld_max);
    cr_assert_eq(m.first_divergent, 1);
    bool pass = true;
    struct json_object *v = golden_verdict(&m, &th, &pass);
    cr_assert_not(pass, "NaN logits passed: %s", json_object_to_json_string(v));
    json_object_put(v);
    golden_free(&g);
    free(ref);
    free(got);
}

/* A model whose logits are all NaN (or hold +inf) is the worst on every
 * metric, fails the verdict with no thresholds set, and the verdict's JSON
 * holds null where a value is not a number (JSON has no NaN or Infinity). */
Test(golden, broken_rows_are_the_worst_value)
{
    const int64_t T = 4, V = 16;
    float *ref = rand_logits(T, V, 7), *got = malloc((size_t)(T * V) * sizeof *got);
    cr_assert(got);
    memcpy(got, ref, (size_t)(T * V) * sizeof *got);
    for (int64_t k = 0; k < V; k++)
        got[V + k] = NAN; /* row 1: all NaN */
    got[3 * V + 5] = INFINITY; /* row 3: one +inf */
    struct golden g = mem_golden(ref, T, V);
    struct golden_metrics m;
    golden_compare(&g, got, no_thresholds(), &m);
    cr_assert_eq(m.nonfinite, 2);
    cr_assert(isinf(m.max_abs) && isinf(m.nmse) && isinf(m.kld_mean) && isinf(m.kld_max) && isinf(m.regret_max));
    cr_assert(isnan(m.cosine), "cosine %g", m.cosine);
    cr_assert_eq(m.top1, 0.5);
    for (int k = 0; k < GOLDEN_TOPK; k++)
        cr_assert_eq(m.topk[k], 0.5, "top-%d %g", k + 1, m.topk[k]);
    cr_assert_eq(m.first_divergent, 1);
    struct golden_thresholds none = no_thresholds();
    bool pass = true;
    struct json_object *v = golden_verdict(&m, &none, &pass);
    cr_assert_not(pass);
    const char *js = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
    cr_assert(!strstr(js, "NaN") && !strstr(js, "nan") && !strstr(js, "Infinity") && !strstr(js, "inf"), "%s", js);
    cr_assert(strstr(js, "\"cosine\":null") && strstr(js, "\"kld_mean\":null") &&
                  strstr(js, "{\"metric\":\"nonfinite_positions\",\"value\":2.0,\"threshold\":0.0}"),
              "%s", js);
    struct json_tokener *tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    struct json_object *back = json_tokener_parse_ex(tok, js, (int)strlen(js));
    cr_assert(back, "not strict JSON: %s", js);
    json_object_put(back);
    json_tokener_free(tok);
    json_object_put(v);
    /* -inf alone is a masked token, not a broken row; a row of -inf only is */
    memcpy(got, ref, (size_t)(T * V) * sizeof *got);
    got[2] = -INFINITY;
    cr_assert_not(golden_row_broken(got, V));
    for (int64_t k = 0; k < V; k++)
        got[k] = -INFINITY;
    cr_assert(golden_row_broken(got, V));
    golden_free(&g);
    free(ref);
    free(got);
}

/* Masked logits (-inf in both) are equal, and a zero-probability entry adds
 * nothing to KL (0·log 0 = 0, not NaN). */
Test(golden, masked_logits_compare_equal)
{
    const float ref[4] = {1, -INFINITY, 0.5f, 2}, got[4] = {1, -INFINITY, 0.5f, 2};
    struct golden g = mem_golden(ref, 1, 4);
    struct golden_thresholds th = {.max_abs = 1e-4, .nmse = -1, .kld_mean = 1e-9, .kld_p99 = -1, .kld_max = 1e-9,
                                   .top1_min = 1.0};
    struct golden_metrics m;
    golden_compare(&g, got, th, &m);
    cr_assert_eq(m.max_abs, 0.0);
    cr_assert_eq(m.kld_max, 0.0);
    cr_assert_eq(m.first_divergent, -1);
    bool pass;
    struct json_object *v = golden_verdict(&m, &th, &pass);
    cr_assert(pass, "%s", json_object_to_json_string(v));
    json_object_put(v);
    golden_free(&g);
}

/* ------------------------------------------------------------------ verdict */

static struct golden_metrics sample_metrics(void)
{
    return (struct golden_metrics){.max_abs = 2e-4, .nmse = 1e-9, .cosine = 0.999, .kld_mean = 1e-7,
                                   .kld_p99 = 5e-7, .kld_max = 1e-6, .top1 = 0.75, .rms_dp = 1e-5,
                                   .first_divergent = 2, .T = 4, .V = 512};
}

static bool has_failure(struct json_object *v, const char *metric)
{
    struct json_object *f = json_object_object_get(v, "failures");
    for (size_t i = 0; i < json_object_array_length(f); i++)
        if (!strcmp(json_object_get_string(json_object_object_get(json_object_array_get_idx(f, i), "metric")), metric))
            return true;
    return false;
}

Test(golden, verdict_schema_and_failures)
{
    struct golden_metrics m = sample_metrics();
    struct golden_thresholds th = {.max_abs = 1e-4, .nmse = 1e-9, .kld_mean = 1e-6, .kld_p99 = 1e-6, .kld_max = 1e-7,
                                   .top1_min = 1.0};
    bool pass = true;
    struct json_object *v = golden_verdict(&m, &th, &pass);
    cr_assert_not(pass);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(v, "schema")), "gempack.golden/1");
    cr_assert_str_eq(json_object_get_string(json_object_object_get(v, "verdict")), "fail");
    struct json_object *f = json_object_object_get(v, "failures");
    cr_assert_eq(json_object_array_length(f), 3, "%s", json_object_to_json_string(f));
    cr_assert(has_failure(v, "max_abs"));
    cr_assert(has_failure(v, "kld_max"));
    cr_assert(has_failure(v, "top1"));
    cr_assert_not(has_failure(v, "nmse"), "value == threshold passes");
    cr_assert_not(has_failure(v, "kld_mean"));
    struct json_object *f0 = json_object_array_get_idx(f, 0);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(f0, "metric")), "max_abs");
    cr_assert_eq(json_object_get_double(json_object_object_get(f0, "value")), 2e-4);
    cr_assert_eq(json_object_get_double(json_object_object_get(f0, "threshold")), 1e-4);
    struct json_object *jm = json_object_object_get(v, "metrics"), *jt = json_object_object_get(v, "thresholds");
    cr_assert_eq(json_object_get_int64(json_object_object_get(jm, "positions")), 4);
    cr_assert_eq(json_object_get_int64(json_object_object_get(jm, "vocab")), 512);
    cr_assert_eq(json_object_get_int64(json_object_object_get(jm, "first_divergent")), 2);
    cr_assert_eq(json_object_get_double(json_object_object_get(jm, "cosine")), 0.999);
    cr_assert_eq(json_object_get_double(json_object_object_get(jm, "rms_dp")), 1e-5);
    cr_assert_eq(json_object_get_double(json_object_object_get(jt, "top1")), 1.0);
    json_object_put(v);

    /* loosened: pass, empty failures */
    th = (struct golden_thresholds){.max_abs = 1e-3, .nmse = 1e-8, .kld_mean = 1e-6, .kld_p99 = 1e-6, .kld_max = 1e-6,
                                    .top1_min = 0.75};
    v = golden_verdict(&m, &th, &pass);
    cr_assert(pass);
    cr_assert_str_eq(json_object_get_string(json_object_object_get(v, "verdict")), "pass");
    cr_assert_eq(json_object_array_length(json_object_object_get(v, "failures")), 0);
    json_object_put(v);
}

Test(golden, negative_thresholds_disable_checks)
{
    struct golden_metrics m = sample_metrics();
    m.max_abs = 1e9;
    m.top1 = 0.0;
    m.kld_max = 1e9;
    struct golden_thresholds th = no_thresholds();
    bool pass = false;
    struct json_object *v = golden_verdict(&m, &th, &pass);
    cr_assert(pass, "no threshold, no failure");
    struct json_object *jt = json_object_object_get(v, "thresholds"), *x;
    const char *keys[] = {"max_abs", "nmse", "kld_mean", "kld_p99", "kld_max", "top1"};
    for (size_t i = 0; i < LEN(keys); i++) {
        cr_assert(json_object_object_get_ex(jt, keys[i], &x), "thresholds.%s present", keys[i]);
        cr_assert_null(x, "thresholds.%s must be null when disabled", keys[i]);
    }
    json_object_put(v);
    th.top1_min = 0.5; /* one check back on */
    v = golden_verdict(&m, &th, &pass);
    cr_assert_not(pass);
    cr_assert(has_failure(v, "top1"));
    cr_assert_eq(json_object_array_length(json_object_object_get(v, "failures")), 1);
    json_object_put(v);
}

/* ------------------------------------------------------------------ corrupt goldens */

struct bad_golden {
    const char *name, *expect; /* expect: a substring of the error message */
    int members;               /* which members to write (bits below) */
    const uint64_t *tshape, *lshape;
    int trank, lrank;
    enum dtype tdt, ldt;
    const char *meta;
};

enum { M_TOK = 1, M_LOG = 2, M_META = 4, M_F64 = 8, M_NEG = 16 /* token 1 is -3 */ };

static void write_golden(const char *path, const struct bad_golden *b)
{
    struct npz_member mem[4];
    size_t n = 0, len;
    uint8_t *bufs[3] = {NULL, NULL, NULL};
    static const double zeros[4096];
    if (b->members & M_TOK) {
        int32_t tok[64] = {0};
        int64_t tok64[64] = {0};
        if (b->members & M_NEG)
            tok64[1] = -3;
        bufs[0] = npy_of(b->tdt, b->tshape, b->trank, b->tdt == DT_I64 ? (const void *)tok64 : (const void *)tok, &len);
        mem[n++] = (struct npz_member){"tokens.npy", bufs[0], len};
    }
    if (b->members & (M_LOG | M_F64)) {
        bufs[1] = npy_of(b->ldt, b->lshape, b->lrank, zeros, &len);
        mem[n++] = (struct npz_member){b->members & M_F64 ? "logits_f64.npy" : "logits.npy", bufs[1], len};
    }
    if (b->members & M_META)
        mem[n++] = (struct npz_member){"meta.json", b->meta, strlen(b->meta)};
    struct err e = {0};
    cr_assert_eq(npz_write(path, mem, n, &e), ERR_OK, "%s", e.msg);
    for (int i = 0; i < 3; i++)
        free(bufs[i]);
}

Test(golden, corrupt_goldens_rejected)
{
    static const uint64_t t3[] = {3}, t1x3[] = {1, 3}, l3x4[] = {3, 4}, l4x4[] = {4, 4}, l12[] = {12},
                          l3x4x1[] = {3, 4, 1};
    const struct bad_golden table[] = {
        {"missing tokens", "tokens.npy", M_LOG, t3, l3x4, 1, 2, DT_I32, DT_F32, NULL},
        {"missing logits", "logits.npy", M_TOK, t3, l3x4, 1, 2, DT_I32, DT_F32, NULL},
        {"logits rank 1", "logits must be float [T, V]", M_TOK | M_LOG, t3, l12, 1, 1, DT_I32, DT_F32, NULL},
        {"logits rank 3", "logits must be float [T, V]", M_TOK | M_LOG, t3, l3x4x1, 1, 3, DT_I32, DT_F32, NULL},
        {"logits T mismatch", "T = 3 tokens", M_TOK | M_LOG, t3, l4x4, 1, 2, DT_I32, DT_F32, NULL},
        {"logits_f64 T mismatch", "T = 3 tokens", M_TOK | M_F64, t3, l4x4, 1, 2, DT_I32, DT_F64, NULL},
        {"logits int32", "logits must be float", M_TOK | M_LOG, t3, l3x4, 1, 2, DT_I32, DT_I32, NULL},
        {"tokens rank 2", "tokens.npy must be int32 [T]", M_TOK | M_LOG, t1x3, l3x4, 2, 2, DT_I32, DT_F32, NULL},
        {"tokens float", "tokens.npy must be int32 [T]", M_TOK | M_LOG, t3, l3x4, 1, 2, DT_F32, DT_F32, NULL},
        {"negative token", "tokens.npy[1] = -3 is not a token id", M_TOK | M_LOG | M_NEG, t3, l3x4, 1, 2, DT_I64, DT_F32, NULL},
        {"meta not JSON", "meta.json", M_TOK | M_LOG | M_META, t3, l3x4, 1, 2, DT_I32, DT_F32, "{\"tolerances\": "},
    };
    char *dir = th_mkdtemp();
    for (size_t i = 0; i < LEN(table); i++) {
        char name[64];
        snprintf(name, sizeof name, "bad%zu.npz", i);
        char *path = fio_join(dir, name);
        write_golden(path, &table[i]);
        struct golden g;
        struct err e = {0};
        int rc = golden_read(path, 0, &g, &e);
        cr_assert_neq(rc, ERR_OK, "%s: accepted", table[i].name);
        cr_assert_eq(rc, (int)e.code);
        cr_assert(strstr(e.msg, table[i].expect), "%s: message '%s' lacks '%s'", table[i].name, e.msg,
                  table[i].expect);
        cr_assert(strstr(e.msg, path), "%s: message '%s' does not name the file", table[i].name, e.msg);
        cr_assert_null(g.tokens, "%s: tokens not freed/cleared", table[i].name);
        cr_assert_null(g.logits);
        free(path);
    }
    /* int64 tokens (numpy's default integer) are accepted */
    char *path = fio_join(dir, "i64.npz");
    static const uint64_t t2[] = {2}, l2x3[] = {2, 3};
    struct bad_golden ok = {"int64 tokens", "", M_TOK | M_LOG, t2, l2x3, 1, 2, DT_I64, DT_F32, NULL};
    write_golden(path, &ok);
    struct golden g;
    struct err e = {0};
    cr_assert_eq(golden_read(path, 0, &g, &e), ERR_OK, "%s", e.msg);
    cr_assert(g.T == 2 && g.V == 3 && g.tokens[0] == 0 && !g.f64 && g.meta == NULL);
    golden_free(&g);
    free(path);
    /* a corrupt logits_f64.npy next to a valid logits.npy is an error, not a
     * silent fallback to the float32 copy */
    path = fio_join(dir, "bad_f64.npz");
    {
        int32_t tok[2] = {1, 2};
        float lg[6] = {0};
        size_t tl, ll, fl;
        uint8_t *tb = npy_of(DT_I32, t2, 1, tok, &tl), *lb = npy_of(DT_F32, l2x3, 2, lg, &ll);
        uint8_t *fb = npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 40, &fl);
        struct npz_member mem[3] = {{"tokens.npy", tb, tl}, {"logits.npy", lb, ll}, {"logits_f64.npy", fb, fl}};
        cr_assert_eq(npz_write(path, mem, 3, &e), ERR_OK, "%s", e.msg);
        free(tb);
        free(lb);
        free(fb);
    }
    cr_assert_neq(golden_read(path, 0, &g, &e), ERR_OK, "corrupt logits_f64.npy skipped");
    cr_assert(strstr(e.msg, "logits_f64.npy") && strstr(e.msg, "member of 168 bytes, but its header and shape x dtype make 176"), "%s", e.msg);
    cr_assert_null(g.logits);
    free(path);
    /* not a zip at all; a missing file */
    path = th_write(dir, "text.npz", "hello, not a zip archive\n", 25);
    int rc = golden_read(path, 0, &g, &e);
    cr_assert_eq(rc, ERR_FORMAT, "not a zip: rc %d (%s)", rc, e.msg);
    cr_assert(strstr(e.msg, "not a readable .npz") && strstr(e.msg, path), "%s", e.msg);
    free(path);
    path = fio_join(dir, "absent.npz");
    rc = golden_read(path, 0, &g, &e);
    cr_assert_eq(rc, ERR_IO, "missing file: rc %d (%s)", rc, e.msg);
    cr_assert(strstr(e.msg, path), "%s", e.msg);
    free(path);
    /* a truncated archive */
    char *src = golden_path();
    size_t len;
    uint8_t *bytes = th_read(src, &len);
    cr_assert(bytes && len > 1000);
    path = th_write(dir, "truncated.npz", bytes, len / 2);
    rc = golden_read(path, 0, &g, &e);
    cr_assert_neq(rc, ERR_OK, "truncated archive accepted");
    cr_assert(strstr(e.msg, path), "%s", e.msg);
    free(path);
    free(bytes);
    free(src);
    th_rmtree(dir);
}

/* ------------------------------------------------------------------ npy_parse */

Test(golden, npy_parse_rejects_corrupt_arrays)
{
    struct {
        const char *name, *dict;
        size_t payload;
        int code;
        const char *expect;
    } table[] = {
        {"fortran order", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, ERR_UNSUPPORTED,
         "Fortran"},
        {"big-endian", "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24, ERR_UNSUPPORTED,
         "'>f4' not supported"},
        {"float16", "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 12, ERR_UNSUPPORTED,
         "'<f2' not supported"},
        {"object", "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16, ERR_UNSUPPORTED, "not supported"},
        {"payload short", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, ERR_FORMAT,
         "payload is 20 bytes, shape x dtype needs 24"},
        {"payload long", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28, ERR_FORMAT,
         "payload is 28 bytes"},
        {"no shape", "{'descr': '<f4', 'fortran_order': False, }", 4, ERR_FORMAT, "lacks"},
        {"shape not a tuple", "{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", 8, ERR_FORMAT,
         "not a tuple"},
        {"unknown key", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1, }", 8, ERR_FORMAT,
         "unexpected key"},
        {"not a dict", "descr", 0, ERR_FORMAT, "does not start with '{'"},
        {"huge shape", "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 0, ERR_RANGE,
         "overflows"},
    };
    for (size_t i = 0; i < LEN(table); i++) {
        size_t len;
        uint8_t *img = npy_image(table[i].dict, table[i].payload, &len);
        struct npy a;
        struct err e = {0};
        int rc = npy_parse(img, len, "x.npy", &a, &e);
        cr_assert_eq(rc, table[i].code, "%s: rc %d, expected %d (%s)", table[i].name, rc, table[i].code, e.msg);
        cr_assert(strstr(e.msg, table[i].expect), "%s: message '%s' lacks '%s'", table[i].name, e.msg,
                  table[i].expect);
        cr_assert(strstr(e.msg, "x.npy"), "%s: message does not name the array", table[i].name);
        cr_assert_null(a.data);
        free(img);
    }
    /* a valid image parses, and its bytes corrupted one way at a time fail */
    size_t len;
    uint8_t *img = npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, &len);
    struct npy a;
    struct err e = {0};
    cr_assert_eq(npy_parse(img, len, "ok.npy", &a, &e), ERR_OK, "%s", e.msg);
    cr_assert(a.dtype == DT_F32 && a.rank == 2 && a.shape[0] == 2 && a.shape[1] == 3 && a.count == 6);
    npy_free(&a);
    img[1] = 'n'; /* bad magic */
    cr_assert_eq(npy_parse(img, len, "m.npy", &a, &e), ERR_FORMAT);
    cr_assert(strstr(e.msg, "bad magic"), "%s", e.msg);
    img[1] = 'N';
    img[6] = 4; /* version 4 */
    cr_assert_eq(npy_parse(img, len, "v.npy", &a, &e), ERR_UNSUPPORTED);
    cr_assert(strstr(e.msg, "version 4"), "%s", e.msg);
    img[6] = 1;
    img[8] = 0xff; /* header length beyond the image */
    img[9] = 0xff;
    cr_assert_eq(npy_parse(img, len, "h.npy", &a, &e), ERR_FORMAT);
    cr_assert(strstr(e.msg, "beyond"), "%s", e.msg);
    cr_assert_eq(npy_parse(img, 6, "short.npy", &a, &e), ERR_FORMAT, "a 6-byte image");
    free(img);
}

/* Ids 0..period-1 repeated to n ids, after `lead` distinct ids (1000 + i). */
static int64_t periodic(int32_t *ids, int64_t lead, int64_t period, int64_t n)
{
    for (int64_t i = 0; i < lead; i++)
        ids[i] = (int32_t)(1000 + i);
    for (int64_t i = 0; i < n; i++)
        ids[lead + i] = (int32_t)(i % period);
    return lead + n;
}

Test(generation, loops_at_their_bounds)
{
    /* {lead, period, periodic ids, loop expected}: a loop needs >= 16 ids and >= 4 periods, period <= 64 */
    static const struct { int64_t lead, period, n; bool loop; } cases[] = {
        {0, 1, 16, true},  {0, 1, 15, false}, {5, 1, 40, true},   {0, 3, 18, true},   {0, 3, 15, false},
        {0, 5, 20, true},  {0, 5, 19, false}, {2, 16, 64, true},  {2, 16, 63, false}, {0, 64, 256, true},
        {0, 65, 400, false}, {0, 7, 7, false},
    };
    static int32_t ids[600];
    for (size_t k = 0; k < LEN(cases); k++) {
        int64_t n = periodic(ids, cases[k].lead, cases[k].period, cases[k].n);
        struct gen_flags f;
        gen_check(ids, n, NULL, &f);
        cr_assert_eq(f.loop_length > 0, cases[k].loop, "case %zu: loop %lld", k, (long long)f.loop_length);
        cr_assert(!f.reserved_checked && f.n_reserved == 0 && gen_flagged(&f) == cases[k].loop);
        if (cases[k].loop) {
            cr_assert_eq(f.loop_start, cases[k].lead, "case %zu", k);
            cr_assert_eq(f.loop_period, cases[k].period, "case %zu", k);
            cr_assert_eq(f.loop_length, cases[k].n, "case %zu", k);
        }
    }
}

Test(generation, the_longest_loop_shortest_period_first)
{
    /* 20 x id 7 (period 1, and also period 2), then 10 distinct, then "1 2" 12 times: the 24-id span wins */
    int32_t ids[54];
    for (int i = 0; i < 20; i++)
        ids[i] = 7;
    for (int i = 0; i < 10; i++)
        ids[20 + i] = 100 + i;
    for (int i = 0; i < 24; i++)
        ids[30 + i] = 1 + i % 2;
    struct gen_flags f;
    gen_check(ids, 54, NULL, &f);
    cr_assert_eq(f.loop_start, 30);
    cr_assert_eq(f.loop_period, 2);
    cr_assert_eq(f.loop_length, 24);
    ids[53] = 9; /* now 23 ids of period 2 against 20 of period 1: still period 2, one shorter */
    gen_check(ids, 54, NULL, &f);
    cr_assert_eq(f.loop_length, 23);
    cr_assert_eq(f.loop_period, 2);
    for (int i = 30; i < 54; i++) /* only the run of 7s: period 1 beats the period-2 reading of it */
        ids[i] = 200 + i;
    gen_check(ids, 54, NULL, &f);
    cr_assert_eq(f.loop_period, 1);
    cr_assert_eq(f.loop_length, 20);
    cr_assert_eq(f.loop_start, 0);
}
