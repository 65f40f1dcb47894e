/* text.h - text that came from a file, made safe before it reaches a
 * terminal or a JSON document (docs/ARCHITECTURE.md, "Rules every reader
 * follows"). A tensor name, a metadata string or an error message quoting
 * them may hold escape sequences (set the window title, clear the screen,
 * overprint a line) or bytes that are not UTF-8 (invalid JSON). */
#ifndef GP_TEXT_H
#define GP_TEXT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* The length of the UTF-8 sequence that starts s[0 .. n): 1..4 when it is
 * valid (no overlong form, no surrogate, at most U+10FFFF), 0 when it is
 * not, -1 when s ends inside a sequence that may still become valid. */
int text_utf8_len(const unsigned char *s, size_t n);

/* Writes s[0 .. n) to out (room for 5n + 1 bytes) with every byte a terminal
 * could act on spelled out: for a terminal, C0 controls but newline and tab,
 * DEL, C1 controls (U+0080..U+009F) and each byte of an invalid sequence as
 * the four characters \xNN; for JSON text (json-c escapes C0 itself), C1
 * controls as \u00NN and each invalid byte as \\xNN. A sequence cut at the
 * end is left unread unless `last`. Returns the bytes written; *used tells
 * how many of s were read. */
size_t text_escape(const char *s, size_t n, bool json, bool last, char *out, size_t *used);

/* Appends a formatted message (at most 1023 bytes) to the list *v of *n
 * strings (warnings, problems, notes); false when out of memory (the list
 * unchanged). */
bool text_list_vadd(char ***v, size_t *n, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));

#endif
