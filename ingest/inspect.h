/* inspect.h - what a file holds, as `gempack inspect` reports it: a
 * safetensors file or checkpoint directory (headers only), a .gpk pack
 * (header, manifest, tensors with CRCs and quantization), an .npz (members
 * with dtype and shape, each read once and CRC-checked; meta.json). */
#ifndef GP_INSPECT_H
#define GP_INSPECT_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/err.h"

/* Writes the text report to out and returns the JSON one (schema
 * gempack.inspect/1) in *jo, which the caller puts. */
int inspect_path(const char *path, FILE *out, struct json_object **jo, struct err *e);

struct gguf_file;
/* The mix of a GGUF's tensor types: per ggml type and per tensor kind (the
 * name without "blk.N."), tensors, weights, bytes and bits per weight. The
 * text goes to out (NULL: none; the kinds too when `kinds`); the JSON
 * {"types": [...], "kinds": [...]} is returned. */
struct json_object *inspect_gguf_mix(const struct gguf_file *g, FILE *out, bool kinds);

#endif
