/* gguf_names.h - the tensor names of llama.cpp's gemma4 architecture
 * (blk.3.attn_q.weight) and the text model's (layers.3.self_attn.q_proj.weight,
 * text-relative; HF's fused experts as layers.N.experts.gate_up_proj and
 * .down_proj). INPUTS.md §7.2 lists them. */
#ifndef GP_GGUF_NAMES_H
#define GP_GGUF_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/* A GGUF name to the text model's; false for a name not in the table
 * (rope_freqs.weight, which is not a tensor of the model, included). */
bool gguf_name_to_text(const char *gguf, char *out, size_t len);

/* The text model's name to GGUF's; false when llama.cpp has none. */
bool gguf_name_from_text(const char *text, char *out, size_t len);

#endif
