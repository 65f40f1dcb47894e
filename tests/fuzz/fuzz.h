/* fuzz.h - the libFuzzer entry point every harness defines. The same harness
 * links either with libFuzzer (-Dfuzzing=true, clang) or with replay.c, which
 * feeds it a corpus as an ordinary test. */
#ifndef GP_FUZZ_H
#define GP_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
