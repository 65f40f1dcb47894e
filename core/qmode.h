/* qmode.h - the keys of the quantization format table (quant/format.h):
 * what config.json and a pack manifest can name. The rows live in quant/. */
#ifndef GP_QMODE_H
#define GP_QMODE_H

enum qmode { QM_AFFINE, QM_MXFP4, QM_NVFP4, QM_MXFP8, QM_COUNT };

#endif
