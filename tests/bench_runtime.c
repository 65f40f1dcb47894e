/* bench_runtime.c - speed figures beside the machine limits they are held to
 * (meson test --benchmark; one mode per benchmark entry):
 *
 *   limits    read bandwidth (a STREAM-like read of 1 GiB, 1 and 2 threads),
 *             OpenBLAS sgemm GFLOP/s, the int8 dot-product peak (AVX-512
 *             VNNI) and the exact 4-bit decode kernels' op mix (AVX-512,
 *             AVX2) against the read bandwidth; 1 and 2 threads
 *   decode B  decode tokens/s of an E2B-shaped B-bit pack (fixture --variant e2b
 *             --full-size --layout mlx --quant B, converted), 1 and 2 threads,
 *             bytes of weights read per token, % of the bandwidth bound: five
 *             rounds of (read bandwidth, 1 untimed + 8 timed decode steps),
 *             the median ratio; then, as a control, the same rounds with a
 *             read of the step's bytes in place of each step; `decode MODEL`
 *             the same on any model (an E2B-shaped Q4_K_M GGUF, say);
 *             `decode B|MODEL T [1,2,4]` after a T-token prompt (default
 *             16), the bound's bytes the weights and the f32 KV cache a step
 *             reads, at those thread counts (default 1,2; control: each;
 *             the prompt on all the process's CPUs)
 *   attn P    the attention of an E2B-shaped decode step after a P-token
 *             prompt alone (f32 caches, evicted before each step), against the
 *             read bandwidth (thread counts as decode's)
 *   prefill [T]  prefill tokens/s at a T-token prompt (default 512; 4-bit
 *             pack), 1 and 2 threads, with the exact kernels, sgemm and the
 *             int8 kernels, and of the bf16 checkpoint (the convert
 *             benchmark's) with the exact kernels: GFLOP/s and % of the
 *             sgemm bound (the int8 kernels also of the int8 peak)
 *   big V     prefill (64 tokens) and decode of a full-size 4-bit checkpoint
 *             of variant V (26b-a4b, 31b; made once, 14-18 GB), exact and
 *             int8 kernels, against sgemm, the int8 peak and the bytes a
 *             token reads (MoE: its top-k experts) over the read bandwidth
 *   convert   convert of an E2B-shaped bf16 checkpoint to 4-bit: GB/s of input
 *             and peak RSS against the largest tensor + 256 MiB
 *   gkernel   the fused ggml kernels' matvec alone (Q4_K, Q6_K, Q5_K, IQ4_XS,
 *             Q4_1, Q5_0, IQ4_NL; exact and int8), in L2 and from RAM
 *   kernel    the fused 4-bit matvec alone (kern_matmul, one token, g64, bf16
 *             scales, 1536 columns like most E2B matrices): on a 512-row matrix
 *             that stays in L2 (1 thread), and on a 512 MiB one from RAM (1 and
 *             2 threads) against the read bandwidth — the kernel's ceiling,
 *             apart from everything else a decode step does
 *
 * Every limit is measured in the same run as the figure compared with it.
 * Fixtures are generated once into BENCH_DATA (deterministic). Targets
 * (issues "Performance" and "Prefill"): decode ≥ 90 % of bandwidth on 2
 * threads, exact prefill ≥ 70 % of sgemm, convert ≥ 1 GB/s with RSS ≤
 * largest tensor + 256 MiB. The exit status is 0 when the figures were
 * measured; PASS/MISS is printed. */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "converter/convert.h"
#include "core/fileio.h"
#include "fixtures/fixture.h"
#include "core/bytes.h"
#include "kernels/kernels.h"
#include "quant/format.h"
#include "quant/ggml.h"
#include "runner/forward.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- machine limits ---- */

struct rd_job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
};

static void *rd_main(void *arg)
{
    struct rd_job *j = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) {
        a += j->p[i];
        b += j->p[i + 1];
        c += j->p[i + 2];
        d += j->p[i + 3];
    }
    j->sum = a + b + c + d;
    return NULL;
}

/* Task k of a read of n words at p in 64 parts, each part's sum kept. */
struct read_job {
    const uint64_t *p;
    size_t n;
    uint64_t sum[64];
};

static void read_part(void *arg, int64_t k, int worker)
{
    (void)worker;
    struct read_job *j = arg;
    struct rd_job part = {j->p + (size_t)k * (j->n / 64), j->n / 64, 0};
    rd_main(&part);
    j->sum[k] = part.sum;
}

/* Seconds to read n words at m on the pool's `threads`, the threads a
 * decode step runs on (read_bandwidth). */
static double read_once(const uint64_t *m, size_t n, int threads)
{
    struct read_job rd = {m, n, {0}};
    double t0 = now();
    pool_run(threads, 64, read_part, &rd);
    return now() - t0;
}

/* An anonymous mapping advised for huge pages, as the copied weights are
 * (runner/model.c), filled; NULL on failure. */
static uint64_t *map_filled(size_t bytes)
{
    uint64_t *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    madvise(m, bytes, MADV_HUGEPAGE); /* advice only, as for the weights */
    memset(m, 1, bytes);
    return m;
}

/* Best of 5 reads of 1 GiB split over `threads`, in GB/s. The buffer is
 * memory of the kind the copied weights sit in (huge pages): on 4 KiB pages
 * the read is ~2 % slower, a looser bound. It is mapped and filled once for
 * the process and read on the pool: a fresh mapping per call, read by fresh
 * threads, slowed the decode steps after it (E, AVX2 exact after 1,024
 * tokens, 2 threads, tokens/s a round: 6.9-11.9; the buffer kept 9.2-11.1;
 * read on the pool too 10.1-13.2; no read at all 12.2-13.5). */
static double read_bandwidth(int threads)
{
    static uint64_t *m;
    const size_t bytes = 1ull << 30;
    if (!m && !(m = map_filled(bytes)))
        return 0;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double dt = read_once(m, bytes / 8, threads);
        best = dt < best ? dt : best;
    }
    return (double)bytes / best / 1e9;
}

static double sgemm_gflops(int threads)
{
    int M = 512, N = 1536, K = 1536;
    float *a = calloc((size_t)M * K, 4), *b = calloc((size_t)N * K, 4), *c = calloc((size_t)M * N, 4);
    if (!a || !b || !c)
        return 0;
    for (size_t i = 0; i < (size_t)M * K; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)N * K; i++)
        b[i] = (float)(i % 5) * 0.1f;
    openblas_set_num_threads(threads);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    openblas_set_num_threads(1);
    free(a);
    free(b);
    free(c);
    return 2.0 * M * N * K / best / 1e9;
}

#define LIMIT_THREADS 4 /* limits' op mix and kernel's matvec from RAM: 1, 2, 4 threads, as many as the CPUs */

#if defined(__x86_64__)
#include <immintrin.h>
/* Best of 3 wall times of `loop` on `threads` (at most LIMIT_THREADS) threads
 * at once (each its own int32 or float result, kept so the loop is not removed). */
static double best_parallel(void *(*loop)(void *), int threads)
{
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[LIMIT_THREADS];
        union {
            int32_t i;
            float f;
        } out[LIMIT_THREADS];
        double t0 = now();
        for (int t = 0; t < threads; t++)
            pthread_create(&th[t], NULL, loop, &out[t]);
        for (int t = 0; t < threads; t++)
            pthread_join(th[t], NULL);
        best = fmin(best, now() - t0);
    }
    return best;
}

/* The int8 dot-product peak (the bound of --kernels q8's arithmetic): twelve
 * independent chains of AVX-512 VNNI vpdpbusd on every thread, 64 products
 * (128 operations) each; 0 without AVX-512 VNNI. */
#define VNNI_ITERS 20000000
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void *vnni_loop(void *arg)
{
    __m512i a[12];
    const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
    for (int i = 0; i < 12; i++)
        a[i] = _mm512_set1_epi32(i);
    for (int64_t it = 0; it < VNNI_ITERS / 12; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            a[i] = _mm512_dpbusd_epi32(a[i], u, v);
    __m512i sum = a[0];
    for (int i = 1; i < 12; i++)
        sum = _mm512_add_epi32(sum, a[i]);
    *(int32_t *)arg = _mm512_reduce_add_epi32(sum);
    return NULL;
}

static double int8_gops(int threads)
{
    if (!__builtin_cpu_supports("avx512vnni"))
        return 0.0;
    return (double)threads * (VNNI_ITERS / 12 * 12) * 128.0 / best_parallel(vnni_loop, threads) / 1e9;
}

/* The exact 4-bit one-token kernels' arithmetic at its best, the ceiling of
 * aset512 / aset256 on a core whatever the memory does: per word of 8 codes
 * one load, per code an and (the top code: a shift), a conversion to float
 * and an FMA with the broadcast input (AVX2: one broadcast for a set's two
 * halves), as code512 / acode256 and the chains have them, but 8 independent
 * chains (the definition gives a set 2; AVX2's two halves 4), all in L1.
 * Weights per ns. */
#define MIX_ITERS 2000000
#define MIX_CHAINS 8
static uint32_t mix_words[32 * MIX_CHAINS * 16] __attribute__((aligned(64)));
static float mix_x[32 * MIX_CHAINS * 8] __attribute__((aligned(64)));

__attribute__((target("avx512f"))) static void *mix512_loop(void *arg)
{
    __m512 p[MIX_CHAINS];
#pragma GCC unroll 8
    for (int j = 0; j < MIX_CHAINS; j++)
        p[j] = _mm512_setzero_ps();
    for (int64_t it = 0; it < MIX_ITERS; it++) {
        const uint32_t *w = mix_words + (it & 31) * 16 * MIX_CHAINS;
        const float *x = mix_x + (it & 31) * 8 * MIX_CHAINS;
#pragma GCC unroll 8
        for (int j = 0; j < MIX_CHAINS; j++) {
            const __m512i v = _mm512_load_si512((const void *)(w + 16 * j));
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i c = k == 7 ? _mm512_srli_epi32(v, 28) : _mm512_and_si512(v, _mm512_set1_epi32(0xF << 4 * k));
                p[j] = _mm512_fmadd_ps(_mm512_set1_ps(x[8 * j + k]), _mm512_cvtepi32_ps(c), p[j]);
            }
        }
    }
    for (int j = 1; j < MIX_CHAINS; j++)
        p[0] = _mm512_add_ps(p[0], p[j]);
    *(float *)arg = _mm512_reduce_add_ps(p[0]);
    return NULL;
}

__attribute__((target("avx2,fma"))) static void *mix256_loop(void *arg)
{
    __m256 p[MIX_CHAINS];
#pragma GCC unroll 8
    for (int j = 0; j < MIX_CHAINS; j++)
        p[j] = _mm256_setzero_ps();
    for (int64_t it = 0; it < MIX_ITERS; it++) {
        const uint32_t *w = mix_words + (it & 31) * 8 * MIX_CHAINS;
        const float *x = mix_x + (it & 31) * 8 * MIX_CHAINS;
#pragma GCC unroll 4
        for (int j = 0; j < MIX_CHAINS; j += 2) { /* two halves of 16 rows: one broadcast, two FMAs */
            const __m256i v0 = _mm256_load_si256((const __m256i *)(const void *)(w + 8 * j));
            const __m256i v1 = _mm256_load_si256((const __m256i *)(const void *)(w + 8 * j + 8));
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i mk = _mm256_set1_epi32(0xF << 4 * k);
                const __m256 xb = _mm256_broadcast_ss(x + 8 * j + k);
                const __m256i c0 = k == 7 ? _mm256_srli_epi32(v0, 28) : _mm256_and_si256(v0, mk);
                const __m256i c1 = k == 7 ? _mm256_srli_epi32(v1, 28) : _mm256_and_si256(v1, mk);
                p[j] = _mm256_fmadd_ps(xb, _mm256_cvtepi32_ps(c0), p[j]);
                p[j + 1] = _mm256_fmadd_ps(xb, _mm256_cvtepi32_ps(c1), p[j + 1]);
            }
        }
    }
    float o[8];
    for (int j = 1; j < MIX_CHAINS; j++)
        p[0] = _mm256_add_ps(p[0], p[j]);
    _mm256_storeu_ps(o, p[0]);
    *(float *)arg = o[0] + o[7];
    return NULL;
}

/* Weights per ns of the op mix on `threads` threads (AVX-512 or AVX2); 0 if
 * the CPU lacks it. */
static double op_mix(int threads, bool avx512)
{
    if (!(avx512 ? __builtin_cpu_supports("avx512f") : __builtin_cpu_supports("avx2")) || !__builtin_cpu_supports("fma"))
        return 0.0;
    for (size_t i = 0; i < sizeof mix_words / sizeof *mix_words; i++)
        mix_words[i] = (uint32_t)(i * 2654435761u) & 0x77777777u; /* codes 0-7: the chains stay finite */
    for (size_t i = 0; i < sizeof mix_x / sizeof *mix_x; i++)
        mix_x[i] = 1e-3f * (float)(i % 7);
    return (double)threads * MIX_ITERS * MIX_CHAINS * 8 * (avx512 ? 16 : 8) /
           best_parallel(avx512 ? mix512_loop : mix256_loop, threads) / 1e9;
}
#else
static double int8_gops(int threads)
{
    (void)threads;
    return 0.0;
}

static double op_mix(int threads, bool avx512)
{
    (void)threads, (void)avx512;
    return 0.0;
}
#endif

/* ---- fixtures ---- */

static const char *data_dir(void)
{
    return BENCH_DATA;
}

/* DIR/NAME fixture (made once), converted to DIR/NAME.gpk (made once). */
static int ensure(const char *name, const char *variant, int quant, bool pack, char *out, size_t len)
{
    char dir[4096];
    struct stat st;
    struct err e = {0};
    snprintf(dir, sizeof dir, "%s/%s", data_dir(), name);
    char done[4200];
    snprintf(done, sizeof done, "%s/config.json", dir); /* written last: a complete fixture */
    if (stat(done, &st) != 0) {
        fprintf(stderr, "bench: making %s (once)...\n", dir);
        struct fixture_opts o = {.variant = variant, .layout = quant ? FX_MLX : FX_HF, .quant_bits = quant,
                                 .group_size = 64, .shards = 1, .full_size = true, .out_dir = dir};
        struct fixture_summary s;
        if (fio_mkdirs(data_dir(), &e) != ERR_OK || fixture_make(&o, &s, &e) != ERR_OK) {
            fprintf(stderr, "bench: %s\n", e.msg);
            return 1;
        }
    }
    snprintf(out, len, "%s%s", dir, pack ? ".gpk" : "");
    if (pack && stat(out, &st) != 0) {
        struct convert_opts co = {.align = 4096, .plan = {.group_size = 64}, .out = out};
        struct convert_report r;
        int rc = convert_run(&r, dir, &co, &e);
        convert_free(&r);
        if (rc != ERR_OK) {
            fprintf(stderr, "bench: %s\n", e.msg);
            return 1;
        }
    }
    return 0;
}

/* ---- runs ---- */

#define DECODE_ROUNDS 5 /* (bandwidth, decode) pairs per configuration */
#define DECODE_STEPS 8   /* decode steps per round */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The decode rounds with a read in place of each step: per round the best
 * of 5 reads of 1 GiB (the bound, as for decode), then 1 untimed and
 * DECODE_STEPS timed reads of a buffer of a step's weight bytes, the mean
 * rate against the bound, and the median over DECODE_ROUNDS rounds. A read
 * does no work besides moving the bytes, so this shows how often the
 * machine's memory meets the 90 % bar under this statistic: on this VM a read
 * of the 8-bit pack's 2.42 GB per step met it in 11 of 18 runs, of the 4-bit
 * pack's 1.28 GB in 16 of 16 (commit f332e30). */
static int read_control(uint64_t step_bytes, int threads)
{
    size_t n = (size_t)(step_bytes / 8);
    uint64_t *w = map_filled(n * 8);
    if (!w)
        return 1;
    double ratio[DECODE_ROUNDS];
    for (int k = 0; k < DECODE_ROUNDS; k++) {
        double bw = read_bandwidth(threads);
        read_once(w, n, threads);
        double dt = 0;
        for (int s = 0; s < DECODE_STEPS; s++)
            dt += read_once(w, n, threads);
        ratio[k] = (double)(n * 8) * DECODE_STEPS / dt / 1e9 / bw;
    }
    munmap(w, n * 8);
    qsort(ratio, DECODE_ROUNDS, sizeof *ratio, cmp_double);
    printf("  control, %d threads: the same rounds with a read of %.0f MB in place of each decode step: per round "
           "%.1f %% of its bound (%.1f-%.1f %%) (a read alone against the 90 %% bar: %s)\n",
           threads, (double)(n * 8) / 1e6, 100.0 * ratio[DECODE_ROUNDS / 2], 100.0 * ratio[0],
           100.0 * ratio[DECODE_ROUNDS - 1], ratio[DECODE_ROUNDS / 2] >= 0.9 ? "PASS" : "MISS");
    return 0;
}

/* Bytes of f32 KV cache a decode step at position P reads: every layer reads
 * its visible keys' K and V (sliding layers the last sliding_window). */
static uint64_t kv_step_bytes(const struct gp_config *c, int64_t P)
{
    uint64_t b = 0;
    for (int64_t i = 0; i < c->n_layers; i++) {
        const struct cfg_layer *ly = &c->layers[i];
        int64_t keys = ly->type == LT_SLIDING && c->sliding_window < P + 1 ? c->sliding_window : P + 1;
        b += (uint64_t)(keys * 2 * ly->kv_heads * ly->head_dim) * sizeof(float);
    }
    return b;
}

/* bits: the E2B-shaped pack of 4 or 8 bits (made once); or any model at `path`
 * (an E2B-shaped GGUF: `gempack fixture --variant e2b --full-size --format gguf-q4_k_m`);
 * decode after a T-token prompt, its bound the weights and the KV bytes a step reads. */
static int decode(int bits, const char *path, int T, const int *thread_list, int n_threads)
{
    char pack[4200], name[32];
    snprintf(name, sizeof name, "e2b-q%d", bits);
    if (path)
        snprintf(pack, sizeof pack, "%s", path);
    else if (ensure(name, "e2b", bits, true, pack, sizeof pack))
        return 1;
    struct model m;
    struct err e = {0};
    for (int run = 0; run < 2 * n_threads; run++) { /* each thread count, exact kernels then int8 activations */
        int threads = thread_list[run % n_threads];
        enum kern_level level = run < n_threads ? KERN_BEST : KERN_Q8;
        if (run % n_threads == 0) { /* loaded as gempack run does, unless --mmap: in blocks of rows */
            if (model_open(&m, pack, &e) != ERR_OK) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            double t_load = now();
            if (model_load_weights(&m, 2, &e) != ERR_OK) {
                fprintf(stderr, "%s\n", e.msg);
                model_close(&m);
                return 1;
            }
            t_load = now() - t_load;
            printf("decode, %s: %.0f MB of weights read per token, copied to anonymous memory (affine in "
                   "blocks of rows) in %.2f s (run's default)\n", pack, (double)m.weight_bytes / 1e6, t_load);
        }
        /* The prompt runs on every CPU the process has (its KV is the same
         * bits for any count: a 4096-token exact prompt at 1 thread took
         * minutes), the decode steps on `threads`; the runner is made for
         * the larger count, its buffers indexed by worker. */
        const int prompt_threads = pool_default_threads() > threads ? pool_default_threads() : threads;
        struct runner r;
        struct runner_opts ro = {.threads = prompt_threads, .kernels = level, .n_seq = 1,
                                 .max_step = T < 512 ? T : 512, .max_context = T + DECODE_ROUNDS * (DECODE_STEPS + 1)};
        if (runner_init(&r, &m, &ro, &e) != ERR_OK)
            return 1;
        int32_t *tok = malloc((size_t)T * sizeof *tok);
        for (int i = 0; i < T; i++)
            tok[i] = 2 + (int32_t)((i * 7919) % 262000);
        float *logits = malloc((size_t)m.cfg.vocab_size * sizeof *logits);
        double t_prompt = now();
        int rc = runner_prompt(&r, tok, T, 512, NULL, logits, &e); /* in chunks of 512 */
        t_prompt = now() - t_prompt;
        free(tok);
        if (rc != ERR_OK) {
            fprintf(stderr, "bench: %s\n", e.msg);
            return 1;
        }
        r.o.threads = threads < r.o.threads ? threads : r.o.threads; /* as runner_init clamps it */
        /* The read bandwidth of this VM moves by ±30 % within minutes, so each
         * round measures it right before its decode steps; the rounds' ratios
         * are sorted and the median is the figure. Each round's first step is
         * run untimed, like llama-bench's warm-up: the first step after any
         * pause (the read, or a sleep) took 2-16 ms longer than the steps after
         * it, with the threads pinned or not (4-bit: 24-42 ms against 22-28);
         * a decode in progress has no pauses. */
        double tps[DECODE_ROUNDS], bw[DECODE_ROUNDS], ratio[DECODE_ROUNDS], warm[DECODE_ROUNDS];
        uint64_t step_bytes = m.weight_bytes + kv_step_bytes(&m.cfg, T + DECODE_ROUNDS * (DECODE_STEPS + 1) / 2);
        for (int k = 0; k < DECODE_ROUNDS; k++) {
            bw[k] = read_bandwidth(threads);
            int32_t first = 3 + k * (DECODE_STEPS + 1);
            double t0 = now();
            runner_forward(&r, &first, 1, logits, false, NULL, &e);
            warm[k] = now() - t0;
            t0 = now();
            for (int s = 1; s <= DECODE_STEPS; s++) {
                int32_t next = first + s;
                runner_forward(&r, &next, 1, logits, false, NULL, &e);
            }
            tps[k] = DECODE_STEPS / (now() - t0);
            ratio[k] = tps[k] / (bw[k] * 1e9 / (double)step_bytes);
        }
        qsort(tps, DECODE_ROUNDS, sizeof *tps, cmp_double);
        qsort(bw, DECODE_ROUNDS, sizeof *bw, cmp_double);
        qsort(ratio, DECODE_ROUNDS, sizeof *ratio, cmp_double);
        qsort(warm, DECODE_ROUNDS, sizeof *warm, cmp_double);
        const int mid = DECODE_ROUNDS / 2;
        char kn[64];
        snprintf(kn, sizeof kn, "%s%s%s", r.kt.name, r.kt.q8dot ? "+int8 " : "", r.kt.q8dot ? r.kt.q8name : "");
        printf("  %d thread%s, %-18s kernels, after a %d-token prompt (%.1f s on %d threads; %.0f MB of KV a step): %.2f tokens/s "
               "(rounds %.2f-%.2f); read bandwidth %.2f GB/s (%.2f-%.2f) "
               "-> bound %.2f tokens/s; per round %.1f %% of its bound (%.1f-%.1f %%) (target >= 90 %% on 2 threads: "
               "%s); the untimed first step of a round %.1f ms (median; %.1f-%.1f)\n",
               threads, threads == 1 ? " " : "s", kn, T, t_prompt, prompt_threads, (double)(step_bytes - m.weight_bytes) / 1e6,
               tps[mid], tps[0], tps[DECODE_ROUNDS - 1], bw[mid], bw[0], bw[DECODE_ROUNDS - 1],
               bw[mid] * 1e9 / (double)step_bytes, 100.0 * ratio[mid], 100.0 * ratio[0], 100.0 * ratio[DECODE_ROUNDS - 1],
               threads == 2 ? (ratio[mid] >= 0.9 ? "PASS" : "MISS") : "-",
               1e3 * warm[mid], 1e3 * warm[0], 1e3 * warm[DECODE_ROUNDS - 1]);
        free(logits);
        runner_free(&r);
        if (level == KERN_Q8 && read_control(step_bytes, threads))
            return 1;
        if (run % n_threads == n_threads - 1)
            model_close(&m);
    }
    return 0;
}

/* The f32 KV planes of one cache of the attention benchmark: position p's
 * key (which 0) or value of KV head g at slot p mod slots. */
struct attn_cache {
    const float *k, *v;
    int64_t slots, G, d;
};

static const float *attn_kv(const void *ctx, int64_t row, int64_t p, int64_t g, int which, float *buf)
{
    (void)row, (void)buf;
    const struct attn_cache *c = ctx;
    return (which ? c->v : c->k) + ((p % c->slots) * c->G + g) * c->d;
}

/* The attention of a decode step of the E2B-shaped fixture's config after a
 * P-token prompt, alone: every layer's kern_attention (one query row) over
 * f32 caches of random values, the KV-shared layers reading their source's,
 * 32 MiB of other memory read on the pool before each layer (untimed) as a
 * step's weights are; against the read bandwidth, bytes as kv_step_bytes. */
static int attn_bench(int64_t P, const int *thread_list, int n_threads)
{
    char dir[4200], path[4300];
    struct gp_config cfg;
    struct err e = {0};
    if (ensure("e2b-q4", "e2b", 4, false, dir, sizeof dir))
        return 1;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (cfg_load(&cfg, path, &e) != ERR_OK) {
        fprintf(stderr, "bench: %s\n", e.msg);
        return 1;
    }
    const struct gp_config *c = &cfg;
    const int64_t L = c->n_layers, Nq = c->n_heads;
    const size_t slice = 32u << 20, slices = 8; /* the reads between layers: 8 slices of 32 MiB in turn */
    struct attn_cache *kc = calloc((size_t)L, sizeof *kc);
    float **planes = calloc((size_t)L, sizeof *planes);
    uint64_t *evict = map_filled(slices * slice);
    if (!kc || !planes || !evict) {
        fprintf(stderr, "bench: out of memory\n");
        return 1;
    }
    uint32_t seed = 1;
    int64_t dmax = 0;
    for (int64_t i = 0; i < L; i++) {
        const struct cfg_layer *ly = &c->layers[i];
        dmax = ly->head_dim > dmax ? ly->head_dim : dmax;
        if (ly->shared)
            continue;
        const int64_t slots = ly->type == LT_SLIDING && c->sliding_window < P + 1 ? c->sliding_window : P + 1;
        const size_t n = (size_t)(slots * ly->kv_heads * ly->head_dim);
        if (!(planes[i] = malloc(2 * n * sizeof(float)))) {
            fprintf(stderr, "bench: out of memory\n");
            return 1;
        }
        for (size_t j = 0; j < 2 * n; j++)
            planes[i][j] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f;
        kc[i] = (struct attn_cache){planes[i], planes[i] + n, slots, ly->kv_heads, ly->head_dim};
    }
    float *q = malloc((size_t)(Nq * dmax) * sizeof *q), *out = malloc((size_t)(Nq * dmax) * sizeof *out);
    if (!q || !out) {
        fprintf(stderr, "bench: out of memory\n");
        return 1;
    }
    for (int64_t j = 0; j < Nq * dmax; j++)
        q[j] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) * 0x1p-24f - 0.5f;
    const uint64_t bytes = kv_step_bytes(c, P);
    printf("attention of an E2B-shaped decode step after a %lld-token prompt: %.1f MB of f32 KV read\n", (long long)P,
           (double)bytes / 1e6);
    for (int ti = 0; ti < n_threads; ti++) {
        const int threads = thread_list[ti];
        struct kern_table t;
        kern_init(&t, KERN_BEST);
        float *scratch = malloc(kern_attn_scratch(1, Nq, P + 1, dmax, threads) * sizeof(float));
        if (!scratch) {
            fprintf(stderr, "bench: out of memory\n");
            return 1;
        }
        double ratio[DECODE_ROUNDS], ms[DECODE_ROUNDS];
        for (int k = 0; k < DECODE_ROUNDS; k++) {
            const double bw = read_bandwidth(threads);
            double dt = 0;
            for (int s = 0; s < DECODE_STEPS; s++)
                for (int64_t i = 0; i < L; i++) {
                    struct read_job rd = {evict + (size_t)(s * L + i) % slices * (slice / 8), slice / 8, {0}};
                    pool_run(threads, 64, read_part, &rd); /* on the pool's threads, as a step's matmuls */
                    const double t0 = now();
                    const struct cfg_layer *ly = &c->layers[i];
                    const int64_t pos = P, src = ly->shared ? ly->kv_src : i;
                    const struct kern_attn a = {.q = q, .out = out, .pos = &pos, .N = 1, .Nq = Nq, .G = ly->kv_heads,
                                                .d = ly->head_dim, .window = ly->type == LT_SLIDING ? c->sliding_window : 0,
                                                .kv = attn_kv, .ctx = &kc[src], .keys = P + 1, .scratch = scratch};
                    kern_attention(&t, &a, threads);
                    dt += now() - t0;
                }
            ms[k] = 1e3 * dt / DECODE_STEPS;
            ratio[k] = (double)bytes / (bw * 1e9) / (dt / DECODE_STEPS);
        }
        qsort(ms, DECODE_ROUNDS, sizeof *ms, cmp_double);
        qsort(ratio, DECODE_ROUNDS, sizeof *ratio, cmp_double);
        printf("  %d thread%s, %s kernels: %.2f ms a step (%.2f-%.2f); %.1f %% of the same-run read bound (%.1f-%.1f %%)\n",
               threads, threads == 1 ? " " : "s", t.name, ms[DECODE_ROUNDS / 2], ms[0], ms[DECODE_ROUNDS - 1],
               100 * ratio[DECODE_ROUNDS / 2], 100 * ratio[0], 100 * ratio[DECODE_ROUNDS - 1]);
        free(scratch);
        kern_free(&t);
    }
    for (int64_t i = 0; i < L; i++)
        free(planes[i]);
    free(planes), free(kc), free(q), free(out);
    munmap(evict, slices * slice);
    cfg_free(&cfg);
    return 0;
}

static int prefill(int T)
{
    char pack[4200], bf16[4200];
    if (ensure("e2b-q4", "e2b", 4, true, pack, sizeof pack) || ensure("e2b-bf16", "e2b", 0, false, bf16, sizeof bf16))
        return 1;
    /* as gempack run loads them: in blocks of rows; the bf16 checkpoint */
    struct model m, mb;
    struct err e = {0};
    if (model_open(&m, pack, &e) != ERR_OK || model_load_weights(&m, 2, &e) != ERR_OK ||
        model_open(&mb, bf16, &e) != ERR_OK || model_load_weights(&mb, 2, &e) != ERR_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    /* FLOPs: 2 per weight of every matrix a token multiplies (4-bit g64 with
     * bf16 scales: 4.5 bits a weight); the tied head only for the last position */
    double w_head = (double)m.cfg.vocab_size * (double)m.cfg.hidden_size;
    double flop_tok = 2.0 * ((double)m.weight_bytes / 0.5625 - w_head);
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    for (int i = 0; i < T; i++)
        tok[i] = 2 + (int32_t)((i * 7919) % 262000);
    printf("prefill, E2B-shaped 4-bit pack (and bf16 checkpoint), %d-token prompt (%.2f GFLOP per token in matmuls, "
           "%.2f once for the head)\n",
           T, flop_tok / 1e9, 2.0 * w_head / 1e9);
    for (int threads = 1; threads <= 2; threads++) {
        /* this VM's speed varies from minute to minute: the peak is the best of
         * three sgemm measurements before the prefills and three after, and
         * each prefill the best of `runs` */
        static const enum kern_level levels[4] = {KERN_BEST, KERN_BLAS, KERN_Q8, KERN_BEST};
        static const char *const names[4] = {"best", "blas", "q8", "best, bf16"};
        struct model *const models[4] = {&m, &m, &m, &mb};
        double peak = 0.0, gf[4] = {0.0, 0.0, 0.0, 0.0}, tps[4] = {0.0, 0.0, 0.0, 0.0};
        for (int k = 0; k < 3; k++)
            peak = fmax(peak, sgemm_gflops(threads));
        for (int k = 0; k < 4; k++) {
            enum kern_level lv = levels[k];
            int runs = 3;
            struct runner r;
            if (runner_init(&r, models[k], &(struct runner_opts){.threads = threads, .kernels = lv, .n_seq = 1, .max_step = T,
                                                           .max_context = T}, &e) != ERR_OK)
                return 1;
            float *last = malloc((size_t)m.cfg.vocab_size * sizeof *last);
            runner_prompt(&r, tok, 1, 0, NULL, last, &e); /* every weight page read once before timing */
            int rc = ERR_OK;
            double dt = 1e30;
            for (int run = 0; run < runs && rc == ERR_OK; run++) {
                runner_reset(&r, 0);
                double t0 = now();
                rc = runner_prompt(&r, tok, T, 0, NULL, last, &e);
                dt = fmin(dt, now() - t0);
            }
            gf[k] = (flop_tok * T + 2.0 * w_head) / dt / 1e9;
            tps[k] = T / dt;
            if (rc != ERR_OK)
                fprintf(stderr, "%s\n", e.msg);
            free(last);
            runner_free(&r);
        }
        for (int k = 0; k < 3; k++)
            peak = fmax(peak, sgemm_gflops(threads));
        const double i8 = int8_gops(threads);
        for (int k = 0; k < 4; k++)
            printf("  %d thread%s, kernels %-10s: %.2f tokens/s, %.1f GFLOP/s; sgemm %.1f GFLOP/s: %.1f %%%s\n", threads,
                   threads == 1 ? " " : "s", names[k], tps[k], gf[k], peak, 100.0 * gf[k] / peak,
                   k == 0 && threads == 2 ? (gf[k] >= 0.7 * peak ? " (target >= 70 %: PASS)" : " (target >= 70 %: MISS)")
                                          : "");
        if (i8 > 0.0)
            printf("  %d thread%s, int8 dot-product peak %.1f GOP/s: kernels q8 at %.1f %% of it\n", threads,
                   threads == 1 ? " " : "s", i8, 100.0 * gf[2] / i8);
    }
    free(tok);
    model_close(&m);
    model_close(&mb);
    return 0;
}

/* Prefill of a 64-token prompt and 8 decode steps of a full-size 4-bit
 * checkpoint of a big variant (26b-a4b, 31b; made once, 14-18 GB, run as a
 * checkpoint directory), exact and int8 kernels, 1 and 2 threads: tokens/s
 * beside the bounds of the same run (prefill: sgemm, and the int8 peak;
 * decode: the bytes a token reads, MoE only its top-k experts, over the read
 * bandwidth measured right before). */
static int big(const char *variant)
{
    char name[64], dir[4200];
    snprintf(name, sizeof name, "%s-q4", variant);
    if (ensure(name, variant, 4, false, dir, sizeof dir))
        return 1;
    const int T = 64;
    int32_t tok[64];
    for (int i = 0; i < T; i++)
        tok[i] = 2 + (int32_t)((i * 7919) % 262000);
    for (int k = 0; k < 2; k++) {
        const enum kern_level level = k ? KERN_Q8 : KERN_BEST;
        struct model m;
        struct err e = {0};
        if (model_open(&m, dir, &e) != ERR_OK || model_load_weights(&m, 2, &e) != ERR_OK) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
        /* FLOPs: 2 per weight a token multiplies (4.5 bits a weight: 4-bit g64, bf16 scales and biases) */
        const double w_head = (double)m.cfg.vocab_size * (double)m.cfg.hidden_size;
        const double flop_tok = 2.0 * ((double)m.weight_bytes / 0.5625 - w_head);
        if (!k)
            printf("%s, full-size 4-bit checkpoint: %.2f GB a decode step reads, %.1f GFLOP per prompt token\n",
                   variant, (double)m.weight_bytes / 1e9, flop_tok / 1e9);
        for (int threads = 1; threads <= 2; threads++) {
            struct runner r;
            if (runner_init(&r, &m, &(struct runner_opts){.threads = threads, .kernels = level, .n_seq = 1,
                                                           .max_step = T, .max_context = T + 16},
                            &e) != ERR_OK) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            float *logits = malloc((size_t)m.cfg.vocab_size * sizeof *logits);
            const double peak = sgemm_gflops(threads), i8 = int8_gops(threads);
            double t0 = now();
            int rc = runner_prompt(&r, tok, T, 0, NULL, logits, &e);
            const double dt_prefill = now() - t0, bw = read_bandwidth(threads);
            int32_t next = 3;
            runner_forward(&r, &next, 1, logits, false, NULL, &e); /* untimed, as decode's rounds */
            t0 = now();
            for (int s = 1; s <= DECODE_STEPS && rc == ERR_OK; s++) {
                next = 3 + s;
                rc = runner_forward(&r, &next, 1, logits, false, NULL, &e);
            }
            const double tps = DECODE_STEPS / (now() - t0), bound = bw * 1e9 / (double)m.weight_bytes;
            const double gf = (flop_tok * T + 2.0 * w_head) / dt_prefill / 1e9;
            if (rc != ERR_OK)
                fprintf(stderr, "%s\n", e.msg);
            printf("  %d thread%s, %-5s: prefill %d tokens %.2f tokens/s, %.1f GFLOP/s = %.1f %% of sgemm %.1f",
                   threads, threads == 1 ? " " : "s", k ? "q8" : "best", T, T / dt_prefill, gf, 100.0 * gf / peak,
                   peak);
            if (k && i8 > 0.0)
                printf(", %.1f %% of int8 peak %.1f GOP/s", 100.0 * gf / i8, i8);
            printf("; decode %.2f tokens/s = %.1f %% of the bound %.2f (read %.2f GB/s)\n", tps, 100.0 * tps / bound,
                   bound, bw);
            free(logits);
            runner_free(&r);
        }
        model_close(&m);
    }
    return 0;
}

static int convert_bench(void)
{
    char dir[4200], out[4300];
    if (ensure("e2b-bf16", "e2b", 0, false, dir, sizeof dir))
        return 1;
    snprintf(out, sizeof out, "%s/e2b-bf16-to-q4.gpk", data_dir());
    uint64_t input = 0, largest = 0;
    struct ckpt ck;
    struct err e = {0};
    if (ckpt_open(&ck, dir, ST_HEADER_ONLY, &e) != ERR_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    for (size_t i = 0; i < ck.n_shards; i++)
        input += ck.shards[i].file_size;
    for (size_t i = 0; i < ck.n_tensors; i++) {
        uint64_t b = ck.tensors[i].t->end - ck.tensors[i].t->begin;
        largest = b > largest ? b : largest;
    }
    ckpt_close(&ck);
    int failed = 0;
    for (int threads = 1; threads <= 2; threads++) {
        double t0 = now();
        pid_t pid = fork();
        if (pid == 0) {
            struct convert_opts co = {.align = 4096, .threads = threads, .plan = {.bits = 4, .group_size = 64},
                                      .out = out};
            struct convert_report r;
            int rc = convert_run(&r, dir, &co, &e);
            if (rc != ERR_OK)
                fprintf(stderr, "%s\n", e.msg);
            _exit(rc == ERR_OK ? 0 : 1);
        }
        int status;
        struct rusage ru;
        wait4(pid, &status, 0, &ru);
        double dt = now() - t0, gbs = (double)input / dt / 1e9;
        double rss = (double)ru.ru_maxrss * 1024.0, limit = (double)largest + 256.0 * 1048576.0;
        printf("convert, E2B-shaped bf16 checkpoint (%.2f GB) to 4-bit, %d thread%s: %.1f s, %.2f GB/s of input "
               "(target >= 1: %s); peak RSS %.0f MB, largest tensor %.0f MB + 256 MiB = %.0f MB (%s)\n",
               (double)input / 1e9, threads, threads == 1 ? "" : "s", dt, gbs, gbs >= 1.0 ? "PASS" : "MISS",
               rss / 1e6, (double)largest / 1e6, limit / 1e6, rss <= limit ? "PASS" : "MISS");
        unlink(out);
        failed |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    return failed;
}

/* A synthetic [rows, 1536] 4-bit g64 matrix with bf16 scales and biases
 * (deterministic bytes; the values do not matter to the speed). */
struct synth {
    struct wmat w;
    uint8_t *mem;
};

static int synth_make(struct synth *m, int64_t rows)
{
    const int64_t cols = 1536, ng = cols / 64;
    size_t codes = (size_t)(rows * cols / 2), params = (size_t)(rows * ng * 2);
    m->mem = malloc(codes + 2 * params);
    if (!m->mem)
        return 1;
    uint64_t z = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < codes; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        m->mem[i] = (uint8_t)(z >> 56);
    }
    for (size_t i = 0; i < 2 * params; i += 2) { /* bf16 scales 2^-7, then biases -2^-5 */
        m->mem[codes + i] = 0;
        m->mem[codes + i + 1] = i / params ? 0xBD : 0x3C;
    }
    m->w = (struct wmat){.quantized = true, .dtype = DT_BF16, .w = m->mem, .s = m->mem + codes,
                         .b = m->mem + codes + params, .bits = 4, .gs = 64, .rows = rows, .cols = cols,
                         .row_bytes = (size_t)cols / 2, .srow_bytes = (size_t)ng * 2, .row_stride = (size_t)cols / 2};
    return 0;
}

/* The same matrix in blocks of rows (as model_load_weights lays it out). */
static int synth_block(struct synth *m)
{
    uint8_t *mem = malloc(kern_blocked_bytes(&m->w));
    if (!mem)
        return 1;
    kern_block_rows(&m->w, mem, 0, m->w.rows / KERN_BLOCK_ROWS);
    free(m->mem);
    m->mem = mem;
    m->w = kern_blocked_view(&m->w, mem);
    return 0;
}

/* Best seconds of `reps` kern_matmul calls. */
static double time_matvec(const struct kern_table *t, const struct wmat *w, const float *x, float *y, int threads,
                          int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        kern_matmul(t, w, x, 1, y, threads);
        double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

static int kernel_bench_level(enum kern_level level, bool blocked)
{
    struct kern_table t;
    kern_init(&t, level);
    printf("4-bit matvec (%s%s%s kernels%s), one token, 1536 columns, g64, bf16 scales; bytes = codes + scales + "
           "biases\n",
           t.name, t.q8dot ? "+int8 " : "", t.q8dot ? t.q8name : "", blocked ? ", in blocks of rows" : "");
    float x[1536];
    for (int i = 0; i < 1536; i++)
        x[i] = (float)((i * 37) % 101 - 50) / 64.0f;
    static const int64_t rows[2] = {512, 699040}; /* 393 KB of codes: in L2; 512 MiB: from RAM */
    for (int k = 0; k < 2; k++) {
        struct synth m;
        float *y = malloc((size_t)rows[k] * sizeof *y);
        if (!y || synth_make(&m, rows[k]) || (blocked && synth_block(&m))) {
            free(y);
            return 1;
        }
        double bytes = (double)rows[k] * (double)(m.w.row_bytes + 2 * m.w.srow_bytes);
        if (k == 0) {
            double dt = time_matvec(&t, &m.w, x, y, 1, 2000);
            printf("  in L2 (%d rows, %.0f KB), 1 thread: %.2f GB/s, %.1f weights/ns\n", (int)rows[k], bytes / 1e3,
                   bytes / dt / 1e9, (double)rows[k] * 1536.0 / dt / 1e9);
        } else {
            for (int threads = 1; threads <= LIMIT_THREADS && threads <= pool_default_threads(); threads *= 2) {
                double bw = read_bandwidth(threads), dt = time_matvec(&t, &m.w, x, y, threads, 5);
                printf("  from RAM (%.0f MB), %d thread%s: %.2f GB/s = %.1f %% of the read bandwidth (%.2f GB/s)\n",
                       bytes / 1e6, threads, threads == 1 ? " " : "s", bytes / dt / 1e9, 100.0 * bytes / dt / 1e9 / bw,
                       bw);
            }
        }
        free(m.mem);
        free(y);
    }
    kern_free(&t);
    return 0;
}

static int kernel_bench(void)
{
    for (int k = 0; k < (kern_has_q8() ? 4 : 2); k++) /* by rows (--mmap), then in blocks (loaded) */
        if (kernel_bench_level(k / 2 ? KERN_Q8 : KERN_BEST, k % 2))
            return 1;
    return 0;
}

/* ggml blocks of `mode` for a [rows, cols] matrix: random bytes, every
 * block's f16 scale fields at 2^-7 (d at d_at, dmin/m after it). */
static int gsynth_make(struct synth *m, enum qmode mode, int64_t rows, int64_t cols)
{
    struct ggml_qtype q;
    if (!ggml_qtype_find(qformat_of(mode)->ggml, &q))
        return 1;
    const size_t bytes = (size_t)(rows * cols) / q.block * q.bytes;
    if (!(m->mem = malloc(bytes)))
        return 1;
    uint64_t z = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < bytes; i++) {
        z = z * 6364136223846793005ull + 1442695040888963407ull;
        m->mem[i] = (uint8_t)(z >> 56);
    }
    const size_t d_at = mode == QM_GGML_Q6_K ? 208 : 0, fields = mode == QM_GGML_Q6_K ? 1 : 2;
    for (size_t b = 0; b < bytes / q.bytes; b++)
        for (size_t f = 0; f < fields; f++)
            wr_u16le(m->mem + b * q.bytes + d_at + 2 * f, 0x2000); /* f16 2^-7 */
    m->w = (struct wmat){.quantized = true, .mode = mode, .dtype = DT_U8, .w = m->mem, .bits = 8, .gs = (int)q.block,
                         .rows = rows, .cols = cols, .row_bytes = (size_t)cols / q.block * q.bytes,
                         .row_stride = (size_t)cols / q.block * q.bytes};
    return 0;
}

/* The fused ggml kernels' matvec (one token, 1536 columns) in L2 and from
 * RAM, against the read bandwidth of the same run. */
static int gkernel_bench(const char *only)
{
    static const enum qmode modes[] = {QM_GGML_Q4_K, QM_GGML_Q6_K, QM_GGML_Q5_K, QM_GGML_IQ4_XS, QM_GGML_Q4_1,
                                       QM_GGML_Q5_0, QM_GGML_IQ4_NL};
    float x[1536];
    for (int i = 0; i < 1536; i++)
        x[i] = (float)((i * 37) % 101 - 50) / 64.0f;
    for (size_t k = 0; k < 2 * sizeof modes / sizeof modes[0]; k++) {
        if (only && strcasecmp(only, qmode_name(modes[k / 2])))
            continue;
        struct kern_table t;
        kern_init(&t, k % 2 ? KERN_Q8 : KERN_BEST); /* each type exact, then on int8 activations */
        if (k % 2 && !t.q8dot) {
            kern_free(&t);
            continue;
        }
        printf("%s matvec (%s%s%s kernels), one token, 1536 columns\n", qmode_name(modes[k / 2]), t.name,
               t.q8dot ? "+int8 " : "", t.q8dot ? t.q8name : "");
        for (int ram = 0; ram < 2; ram++) {
            struct synth m;
            const int64_t rows = ram ? 1 << 19 : 512; /* from RAM: 300-450 MB */
            float *y = malloc((size_t)rows * sizeof *y);
            if (!y || gsynth_make(&m, modes[k / 2], rows, 1536)) {
                free(y);
                return 1;
            }
            const double bytes = (double)rows * (double)m.w.row_bytes;
            if (kern_reserve(&t, 1, 1536, 2) != ERR_OK)
                return 1;
            if (!ram) {
                double dt = time_matvec(&t, &m.w, x, y, 1, 2000);
                printf("  in L2 (%.0f KB), 1 thread: %.2f GB/s, %.1f weights/ns\n", bytes / 1e3, bytes / dt / 1e9,
                       (double)rows * 1536.0 / dt / 1e9);
            }
            for (int threads = 1; ram && threads <= 2; threads++) {
                double bw = read_bandwidth(threads), dt = time_matvec(&t, &m.w, x, y, threads, 5);
                printf("  from RAM (%.0f MB), %d thread%s: %.2f GB/s = %.1f %% of the read bandwidth (%.2f GB/s)\n",
                       bytes / 1e6, threads, threads == 1 ? " " : "s", bytes / dt / 1e9, 100.0 * bytes / dt / 1e9 / bw, bw);
            }
            free(m.mem);
            free(y);
        }
        kern_free(&t);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "limits";
    setvbuf(stdout, NULL, _IOLBF, 0); /* each figure as it comes: a run stopped by a time limit keeps them */
    if (!strcmp(mode, "limits")) {
        for (int t = 1; t <= 2; t++)
            printf("read bandwidth, %d thread%s: %.2f GB/s (1 GiB, best of 5)\n", t, t == 1 ? "" : "s",
                   read_bandwidth(t));
        for (int t = 1; t <= 2; t++)
            printf("OpenBLAS sgemm 512x1536x1536, %d thread%s: %.1f GFLOP/s\n", t, t == 1 ? "" : "s", sgemm_gflops(t));
        for (int t = 1; t <= 2; t++)
            printf("int8 dot products (AVX-512 VNNI), %d thread%s: %.1f GOP/s\n", t, t == 1 ? "" : "s", int8_gops(t));
        for (int t = 1; t <= LIMIT_THREADS && t <= pool_default_threads(); t *= 2) { /* g64, bf16 params: 4.5 bits */
            const double bw = read_bandwidth(t);
            for (int k = 0; k < 2; k++) {
                const double wns = op_mix(t, k == 0);
                printf("exact 4-bit decode's op mix (%s: and, convert, FMA a code; 8 chains in L1), %d thread%s: %.1f "
                       "weights/ns = %.1f GB/s of 4-bit g64 weights, %.1f %% of the read bandwidth (%.2f GB/s)\n",
                       k ? "AVX2" : "AVX-512", t, t == 1 ? "" : "s", wns, wns * 0.5625, 100.0 * wns * 0.5625 / bw, bw);
            }
        }
        return 0;
    }
    if (!strcmp(mode, "decode") || !strcmp(mode, "attn")) { /* decode B|MODEL [PROMPT [THREADS,...]]; attn PROMPT [..] */
        const int a = !strcmp(mode, "attn") ? 2 : 3; /* the prompt's argument; the thread counts' next */
        int list[8] = {1, 2}, n = 2;
        if (argc > a + 1)
            for (char *p = argv[a + 1]; n < 8 && *p; p += *p == ',') {
                if (p == argv[a + 1])
                    n = 0;
                list[n] = (int)strtol(p, &p, 10);
                if (list[n] < 1 || list[n] > POOL_MAX_THREADS || (*p && *p != ',')) {
                    fprintf(stderr, "bench: thread counts: a list like 1,2,4 (1-%d)\n", POOL_MAX_THREADS);
                    return 2;
                }
                n++;
            }
        int T = argc > a ? atoi(argv[a]) : 16;
        if (T < 1) {
            fprintf(stderr, "bench: a prompt of at least 1 token\n");
            return 2;
        }
        if (a == 2)
            return attn_bench(T, list, n);
        return argc > 2 && atoi(argv[2]) == 0 ? decode(0, argv[2], T, list, n)
                                              : decode(argc > 2 ? atoi(argv[2]) : 4, NULL, T, list, n);
    }
    if (!strcmp(mode, "prefill"))
        return prefill(argc > 2 ? atoi(argv[2]) : 512);
    if (!strcmp(mode, "big") && argc > 2)
        return big(argv[2]);
    if (!strcmp(mode, "convert"))
        return convert_bench();
    if (!strcmp(mode, "kernel"))
        return kernel_bench();
    if (!strcmp(mode, "gkernel"))
        return gkernel_bench(argc > 2 ? argv[2] : NULL);
    fprintf(stderr, "usage: bench_runtime limits|decode BITS|MODEL [PROMPT [THREADS,...]]|attn PROMPT [THREADS,...]|"
                    "prefill [TOKENS]|"
                    "big 26b-a4b|31b|convert|kernel|gkernel [TYPE]\n");
    return 2;
}
