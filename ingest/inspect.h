/* inspect.h - what a file holds, as `gempack inspect` reports it: a
 * safetensors file or checkpoint directory (headers only), a .gpk pack
 * (header, manifest, tensors with CRCs and quantization), an .npz (members
 * with dtype and shape, each read once and CRC-checked; meta.json). */
#ifndef GP_INSPECT_H
#define GP_INSPECT_H

#include <json-c/json.h>
#include <stdio.h>

#include "core/err.h"

/* Writes the text report to out and returns the JSON one (schema
 * gempack.inspect/1) in *jo, which the caller puts. */
int inspect_path(const char *path, FILE *out, struct json_object **jo, struct err *e);

#endif
