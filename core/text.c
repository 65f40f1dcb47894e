#include "core/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int text_utf8_len(const unsigned char *s, size_t n)
{
    if (n == 0)
        return -1;
    unsigned c = s[0];
    int len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    /* the second byte's range, which rules out overlong forms, surrogates and code points past U+10FFFF */
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n)
            return -1;
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF))
            return 0;
    }
    return len;
}

size_t text_escape(const char *s, size_t n, bool json, bool last, char *out, size_t *used)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        int len = text_utf8_len(u + i, n - i);
        if (len < 0 && !last)
            break;
        unsigned c = u[i];
        bool c0 = len == 1 && (c < 0x20 || c == 0x7F) && c != '\n' && c != '\t';
        bool c1 = len == 2 && c == 0xC2 && u[i + 1] < 0xA0;
        if (len <= 0 || (c0 && !json)) {
            o += (size_t)sprintf(out + o, json ? "\\\\x%02X" : "\\x%02X", c); /* one byte */
            i++;
        } else if (c1) {
            o += (size_t)sprintf(out + o, json ? "\\u%04X" : "\\x%02X\\x%02X", json ? u[i + 1] : c, u[i + 1]);
            i += 2;
        } else {
            for (int k = 0; k < len; k++)
                out[o++] = (char)u[i++];
        }
    }
    *used = i;
    return o;
}

bool text_list_vadd(char ***v, size_t *n, const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    char **nv = realloc(*v, (*n + 1) * sizeof *nv);
    if (!nv)
        return false;
    *v = nv;
    if (!(nv[*n] = strdup(buf)))
        return false;
    (*n)++;
    return true;
}
