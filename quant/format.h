/* format.h - the quantization formats, one row each (INPUTS.md §2), walked
 * by every user of a module's mode (plan, convert, pack readers, model
 * binding, check, ingest, fixtures). A module MODULE [.., out, in] is stored
 * as MODULE.weight, U32 codes of `bits` LSB first [.., out, in·bits/32];
 * MODULE.scales, one per group of gs inputs [.., out, in/gs]; and, where the
 * row has them, MODULE.biases like the scales. A ggml block type's row (ggml
 * set) is MODULE.weight alone: the file's blocks as U8 [.., out, in/gs · the
 * block's bytes], gs its weights per block, bits 8 (bytes). */
#ifndef GP_FORMAT_H
#define GP_FORMAT_H

#include <json-c/json.h>

#include "core/pack.h"
#include "core/qmode.h"

enum qpart { QP_WEIGHT, QP_SCALES, QP_BIASES };
extern const char *const qpart_names[3]; /* MODULE.weight, .scales, .biases */

#define QF_FLOAT DT_COUNT /* scales of any float type (F32, F16, BF16), the module's */

/* The rows' function types (declared and defined through these, dav1d's way):
 * k values of a row from its parts (sdt: the scales' dtype); a row of k
 * values exact in `src` into its parts: -1, or the first group it cannot hold. */
#define decl_qdequant_fn(name)                                                                                         \
    void(name)(enum qmode m, const uint8_t *codes, const void *scales, const void *biases, enum dtype sdt, size_t k,   \
               int gs, int bits, float *out)
#define decl_qquant_fn(name)                                                                                           \
    int64_t(name)(enum qmode m, enum dtype src, const float *w, size_t k, int gs, int bits, enum dtype sdt,           \
                  uint32_t *words, void *scales, void *biases)
typedef decl_qdequant_fn(*qdequant_fn);
typedef decl_qquant_fn(*qquant_fn);

struct qformat {
    const char *name, *mlx, *feature; /* its name; the MLX export's (NULL: not exportable); a pack's feature */
    int default_gs, default_bits;
    unsigned bits_allowed, gs_allowed; /* bit b set: b bits allowed; the allowed group sizes or'ed */
    int parts;                         /* 3: weight, scales, biases; 2: no biases */
    enum dtype scales;                 /* the scales' (and biases') dtype, or QF_FLOAT */
    qdequant_fn dequant, dequant_fast; /* the definition; its bit-identical twin, the fastest this CPU has */
    qquant_fn quantize;                /* gempack's writer: MLX's CPU quantizer bit for bit */
    /* its variant at (lattice_bits, lattice_gs) only, or NULL (affine: the QAT lattice) */
    void (*lattice)(const float *w, size_t k, enum dtype sdt, uint32_t *words, void *scales, void *biases,
                    uint64_t *groups, uint64_t *exact);
    int lattice_bits, lattice_gs;
    /* transcoding into it, or NULL: the largest |difference| of a group's stored scale and bias on
     * every code u against a source's ss·(u − shift) (0: exact; NaN wins) */
    double (*verify)(float scale, float bias, int bits, double ss, double shift);
    uint32_t ggml;                     /* a ggml block type's id (quant/ggml.h), else 0 */
};

extern const struct qformat quant_formats[QM_COUNT];
static inline const struct qformat *qformat_of(enum qmode m) { return &quant_formats[m]; }

/* One allowed (bits, group): its name says both. */
static inline bool qformat_fixed(const struct qformat *f)
{
    return !(f->bits_allowed & (f->bits_allowed - 1)) && !(f->gs_allowed & (f->gs_allowed - 1));
}

bool qmode_from_name(const char *s, enum qmode *out); /* false for an unknown name */
const char *qmode_name(enum qmode m);
/* How a config's quantization block names it: MLX's name, else the row's (a GGUF source's config) */
const char *qmode_config_name(enum qmode m);
/* "affine 4-bit group 64", or a fixed mode's name: how reports name it */
const char *qmode_describe(enum qmode m, int bits, int group_size, char *buf, size_t len);
void qmode_defaults(enum qmode m, int *group_size, int *bits); /* mlx-lm's: affine 64/4, mxfp4 32/4, ... */
bool quant_params_valid(enum qmode m, int bits, int group_size);

/* Its scales' dtype allowed; a part's dtype (sdt: the module's float
 * scales) and last dimension; the bytes of n weights, a multiple of gs. */
static inline bool qformat_scales_ok(const struct qformat *f, enum dtype t)
{
    return f->scales == QF_FLOAT ? dtype_is_weight_float(t) : t == f->scales;
}
static inline enum dtype qformat_part_dtype(const struct qformat *f, enum qpart p, enum dtype sdt)
{
    return p == QP_WEIGHT ? (f->ggml ? DT_U8 : DT_U32) : f->scales == QF_FLOAT ? sdt : f->scales;
}
uint64_t qformat_part_cols(const struct qformat *f, enum qpart p, uint64_t in, int bits, int gs);
uint64_t qformat_bytes(const struct qformat *f, uint64_t n, int bits, int gs, enum dtype sdt);

/* A pack's "quantized" entries (INPUTS.md §3.4), which readers check after
 * pack_open: each names the pack's MODULE parts, whose dtypes and shapes
 * agree with its mode, bits and group (kept on MODULE.weight's record). */
int quant_check_pack(struct pack *p, struct err *e);

/* A module of an MLX `quantization` block: quantized (mode, bits, gs), or
 * dense (written false). The block: the most common quantization on top
 * (the first of a tie; affine 4-bit group 64 for none), every other module
 * an entry, naming its mode if not affine or `mode_always`. */
struct qmodule {
    char path[200];
    bool quantized;
    enum qmode mode;
    int bits, gs;
};
struct json_object *quant_mlx_block(const struct qmodule *m, size_t n, bool mode_always);

#endif
