/* blas.c - prefill matmul: dequantize a tile of weight rows, then sgemm.
 * OpenBLAS runs single-threaded here; kern_matmul hands out the fixed tiles,
 * so results do not depend on the thread count.
 *
 * OpenBLAS is loaded (dlopen) on first use of --kernels blas, never linked,
 * and told to start no threads: linked, its constructor starts a thread
 * pool in every process, which under a memory limit (ulimit -v) retries a
 * failing mmap forever at exit, so that even `gempack --version` hung. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/internal.h"

/* The CBLAS interface's constants and the two entry points used. */
enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };
typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                         const float *b, int ldb, float beta, float *c, int ldc);
static sgemm_fn sgemm;
static pthread_once_t loaded = PTHREAD_ONCE_INIT;

static void load(void)
{
    /* read by OpenBLAS as it loads: no thread pool at all (a pool of one is
     * all it may use here; its threads are what hung under a memory limit) */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("VECLIB_MAXIMUM_THREADS", "1", 1); /* Accelerate's */
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so", "libopenblas.0.dylib",
                                        "libopenblas.dylib", "/opt/homebrew/opt/openblas/lib/libopenblas.dylib",
                                        "/usr/local/opt/openblas/lib/libopenblas.dylib",
                                        "/System/Library/Frameworks/Accelerate.framework/Accelerate"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h)
            continue;
        void *pt = dlsym(h, "openblas_set_num_threads"), *ps = dlsym(h, "cblas_sgemm");
        void (*threads)(int);
        sgemm_fn f;
        memcpy(&threads, &pt, sizeof pt); /* ISO C has no cast from an object to a function pointer */
        memcpy(&f, &ps, sizeof ps);
        if (!f) {
            dlclose(h);
            continue;
        }
        if (threads) /* OpenBLAS's own thread pool would compete with ours for the cores */
            threads(1);
        sgemm = f;
        return;
    }
}

bool kern_blas_init(void)
{
    pthread_once(&loaded, load);
    return sgemm != NULL;
}

/* Tokens go to sgemm in calls of a fixed width (zero-padded columns):
 * OpenBLAS picks its kernels by the problem size, so fixed widths keep each
 * token's arithmetic independent of how the prompt was chunked. Two widths: a
 * short step takes the narrow call, a long prompt the wide one (wider calls
 * also spread the packing of each weight tile over more tokens).
 *
 * Within one call, OpenBLAS may also round columns differently by position
 * (measured with its Haswell kernels, which the project VM's environment
 * selects with OPENBLAS_CORETYPE=Haswell: the first and last 8 columns of a
 * call differ from the others, whatever the other columns hold; with its
 * SkylakeX and Cooperlake kernels all columns agreed). So each call shape
 * (tile rows, columns) is probed once: the same random vector in every
 * column of a random product, at both widths. The columns bit-identical to
 * the largest class of the wide call share its code path; they are the
 * shape's slots at each width. Token i of a call always goes to column
 * slot[i], so its bits depend neither on its place in the prompt nor on the
 * width of its call; the other columns stay zero. */
#define NARROW 144 /* 128 slots with the Haswell kernels */
#define WIDE 272   /* 256 slots */
static const int widths[2] = {NARROW, WIDE};
#define SHAPES_MAX 256

struct shape {
    int64_t rows, cols;
    int n[2];                 /* slots at each width: tokens a call carries (0: that width unused) */
    int slot[2][WIDE];
};

static struct shape shapes[SHAPES_MAX];
static int n_shapes;
static pthread_mutex_t shapes_lock = PTHREAD_MUTEX_INITIALIZER;

/* Fills sh with the slots of a (rows, cols) product; false: out of memory. */
static bool probe(int64_t rows, int64_t cols, struct shape *sh)
{
    float *a = malloc((size_t)(rows * cols) * sizeof *a), *b = malloc((size_t)WIDE * (size_t)cols * sizeof *b);
    float *c[2] = {malloc((size_t)rows * (size_t)widths[0] * sizeof(float)), malloc((size_t)rows * WIDE * sizeof(float))};
    bool ok = a && b && c[0] && c[1];
    if (ok) {
        uint64_t z = 0x9E3779B97F4A7C15ull;
        for (int64_t i = 0; i < rows * cols + cols; i++) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            float v = (float)((int32_t)(z >> 40) - (1 << 23)) / 8388608.0f; /* in [-1, 1): sums that cancel */
            if (i < rows * cols)
                a[i] = v;
            else
                for (int t = 0; t < WIDE; t++)
                    b[t * cols + (i - rows * cols)] = v;
        }
        for (int k = 0; k < 2; k++)
            sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)rows, widths[k], (int)cols, 1.0f, a, (int)cols, b,
                  (int)cols, 0.0f, c[k], widths[k]);
        /* the wide call's classes: cls[p] is the first column computed as p is;
         * ref, the first column of the largest class (the first, on a tie) */
        int cls[WIDE], size[WIDE] = {0}, ref = 0;
        for (int p = 0; p < WIDE; p++) {
            cls[p] = p;
            for (int q = 0; q < p && cls[p] == p; q++) {
                bool same = cls[q] == q;
                for (int64_t r = 0; r < rows && same; r++)
                    same = !memcmp(&c[1][r * WIDE + p], &c[1][r * WIDE + q], sizeof(float));
                if (same)
                    cls[p] = q;
            }
            size[cls[p]]++;
        }
        for (int p = 1; p < WIDE; p++)
            if (size[p] > size[ref])
                ref = p;
        sh->rows = rows;
        sh->cols = cols;
        for (int k = 0; k < 2; k++) {
            sh->n[k] = 0;
            for (int q = 0; q < widths[k]; q++) {
                bool same = true;
                for (int64_t r = 0; r < rows && same; r++)
                    same = !memcmp(&c[k][r * widths[k] + q], &c[1][r * WIDE + ref], sizeof(float));
                if (same)
                    sh->slot[k][sh->n[k]++] = q;
            }
        }
    }
    free(a);
    free(b);
    free(c[0]);
    free(c[1]);
    return ok;
}

/* The slots of a (rows, cols) product, probed on first use; false: out of memory. */
static bool shape_slots(int64_t rows, int64_t cols, struct shape *out)
{
    pthread_mutex_lock(&shapes_lock);
    bool ok = true;
    int i = 0;
    while (i < n_shapes && (shapes[i].rows != rows || shapes[i].cols != cols))
        i++;
    if (i < n_shapes) {
        *out = shapes[i];
    } else {
        ok = probe(rows, cols, out);
        if (ok && n_shapes < SHAPES_MAX) /* past that, probed on every call: slower, same bits */
            shapes[n_shapes++] = *out;
    }
    pthread_mutex_unlock(&shapes_lock);
    return ok;
}

void kern_matmul_blas_ws(const struct wmat *w, const float *x, int64_t n, float *y, int64_t row0, int64_t row1,
                         struct kern_ws *ws)
{
    const int64_t tr = row1 - row0, cols = w->cols;
    struct shape sh;
    float *buf = kern_ws_reserve(ws, (size_t)(tr * cols + WIDE * cols + tr * WIDE) * sizeof(float));
    if (!buf || !shape_slots(tr, cols, &sh)) {
        kern_matmul_ref(w, x, n, y, row0, row1);
        return;
    }
    float *tile = buf;                /* [tr, cols] */
    float *xpad = tile + tr * cols;   /* [width, cols] */
    float *yt = xpad + WIDE * cols;   /* [tr, width] */
    for (int64_t r = 0; r < tr; r++)
        kern_row_f32(w, row0 + r, tile + r * cols);
    for (int64_t t0 = 0; t0 < n;) {
        const int k = n - t0 <= sh.n[0] ? 0 : 1, wd = widths[k], *slot = sh.slot[k];
        const int64_t mb = n - t0 < sh.n[k] ? n - t0 : sh.n[k];
        bool used[WIDE] = {false};
        for (int64_t i = 0; i < mb; i++) { /* token t0 + i in column slot[i]; every other column zero */
            memcpy(xpad + slot[i] * cols, x + (t0 + i) * cols, (size_t)cols * sizeof *xpad);
            used[slot[i]] = true;
        }
        for (int q = 0; q < wd; q++)
            if (!used[q])
                memset(xpad + q * cols, 0, (size_t)cols * sizeof *xpad);
        /* yt[tr, wd] = tile · xpadᵀ */
        sgemm(CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS, (int)tr, wd, (int)cols, 1.0f, tile, (int)cols, xpad,
              (int)cols, 0.0f, yt, wd);
        for (int64_t r = 0; r < tr; r += 16) /* 16 rows at a time: each token's 16 outputs fill one cache line */
            for (int64_t t = 0; t < mb; t++)
                for (int64_t i = r; i < r + 16 && i < tr; i++)
                    y[(t0 + t) * w->rows + row0 + i] = yt[i * wd + slot[t]];
        t0 += mb;
    }
}

