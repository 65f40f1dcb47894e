/* bench_tokenizer.c - tokenizer speed (docs/PERFORMANCE.md): the vocabulary
 * load from the GGUF and from tokenizer.json, and 1 MB and 10 MB texts that
 * are one piece (no space or newline to split on, no added token), CPU time of
 * this thread. tests/tokenizer/bench_hf.js times HF tokenizers on the same
 * texts. Needs build-ref/ (setup.sh). Usage: bench_tokenizer [REF_DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gguf.h"
#include "tests/tokenizer/one_piece.h"
#include "tokenizer/tokenizer.h"

static double cpu_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

int main(int argc, char **argv)
{
    const char *ref = argc > 1 ? argv[1] : GP_SOURCE_DIR "/build-ref";
    char path[4096];
    struct err e = {0};
    struct gguf_file g = {0};
    struct tokenizer *t = NULL, *tj = NULL;
    snprintf(path, sizeof path, "%s/llama/ggml-vocab-gemma-4.gguf", ref);
    double t0 = cpu_ms();
    if (gguf_open(&g, path, &e) || tok_load_gguf(&t, &g, &e)) {
        fprintf(stderr, "bench_tokenizer: %s (run setup.sh)\n", e.msg);
        return 77;
    }
    printf("load GGUF (262,144 tokens, 514,906 merges): %.1f ms\n", cpu_ms() - t0);
    snprintf(path, sizeof path, "%s/gemma4/tokenizer.json", ref);
    t0 = cpu_ms();
    if (tok_load_json(&tj, path, &e)) {
        fprintf(stderr, "bench_tokenizer: %s\n", e.msg);
        return 1;
    }
    printf("load tokenizer.json (33 MB): %.1f ms\n", cpu_ms() - t0);
    for (size_t mb = 1; mb <= 10; mb += 9) {
        char *s = one_piece(mb << 20);
        if (!s)
            return 1;
        uint32_t *ids;
        size_t n;
        t0 = cpu_ms();
        if (tok_encode(t, s, strlen(s), true, &ids, &n, &e)) {
            fprintf(stderr, "bench_tokenizer: %s\n", e.msg);
            return 1;
        }
        printf("encode %zu MB one piece: %.1f ms, %zu ids\n", mb, cpu_ms() - t0, n);
        free(ids);
        free(s);
    }
    tok_free(t);
    tok_free(tj);
    gguf_close(&g);
    return 0;
}
