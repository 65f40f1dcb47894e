/* Fuzz harness: a --tokens-file (JSON, npy or whitespace-separated ids). */
#include "runner/tokens.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct token_seqs s = {0};
    struct err e;
    tokens_parse(data, size, "fuzz", &s, &e);
    tokens_free(&s);
    return 0;
}
