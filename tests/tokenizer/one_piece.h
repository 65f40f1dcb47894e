/* one_piece.h - the long word bench_tokenizer.c times and test_tokenizer.c
 * checks against HF tokenizers' ids (tests/tokenizer/bench_hf.js builds the
 * same text): letters of several scripts cycling with a period, one piece of
 * at most n bytes (no space or newline, no added token; cut on a character
 * boundary), NUL-terminated; NULL when out of memory. */
#ifndef GP_TESTS_ONE_PIECE_H
#define GP_TESTS_ONE_PIECE_H

#include <stdlib.h>
#include <string.h>

static char *one_piece(size_t n)
{
    static const char *units[] = {"tokenization", "\xC3\xA9t\xC3\xA9", "\xD0\xB4\xD0\xB0\xD0\xBD", "\xE6\x95\xB0\xE6\x8D\xAE",
                                  "12345", "\xF0\x9F\x98\x80", "."};
    char *s = malloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; s; i++) {
        const char *u = units[i % 7];
        size_t l = strlen(u);
        if (o + l > n)
            break;
        memcpy(s + o, u, l);
        o += l;
    }
    if (s)
        s[o] = 0;
    return s;
}

#endif
