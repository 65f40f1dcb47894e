/* qmode.h - the keys of the quantization format table (quant/format.h):
 * what config.json and a pack manifest can name. The rows live in quant/. */
#ifndef GP_QMODE_H
#define GP_QMODE_H

/* ggml's weight block types, read as a GGUF stores them (quant/ggml.h): the
 * type's name, its ggml id and the weights per block. */
#define QM_GGML_ROWS(X)                                                                                                \
    X(Q4_1, 3, 32) X(Q5_0, 6, 32) X(Q5_1, 7, 32) X(Q2_K, 10, 256) X(Q3_K, 11, 256) X(Q4_K, 12, 256) X(Q5_K, 13, 256)   \
    X(Q6_K, 14, 256) X(IQ2_XXS, 16, 256) X(IQ2_XS, 17, 256) X(IQ3_XXS, 18, 256) X(IQ1_S, 19, 256) X(IQ4_NL, 20, 32)   \
    X(IQ3_S, 21, 256) X(IQ2_S, 22, 256) X(IQ4_XS, 23, 256) X(IQ1_M, 29, 256) X(TQ1_0, 34, 256) X(TQ2_0, 35, 256)      \
    X(MXFP4, 39, 32)

enum qmode {
    QM_AFFINE, QM_MXFP4, QM_NVFP4, QM_MXFP8,
#define QM_GGML_ENUM(n, id, block) QM_GGML_##n,
    QM_GGML_ROWS(QM_GGML_ENUM)
#undef QM_GGML_ENUM
    QM_COUNT
};

#endif
