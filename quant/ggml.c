/* ggml.c - ggml's weight block types: the definitions of ggml-quants.c's
 * dequantize_row_* (ggml.h). Each expression keeps ggml's operand order and
 * types: an int code times a float scale converts the int, (a * b) * c is
 * never regrouped, and the build's -ffp-contract=off keeps every multiply
 * and add two roundings, as ggml's own build of this file. Where ggml
 * computes in int (codes, sub-block scales, TQ1_0's base-3 digits) so does
 * this file. Block layouts are in docs/INPUTS.md §6.3. */
#include "quant/ggml.h"

#include <string.h>
#include <strings.h>

#include "core/bytes.h"
#include "core/dtype.h"
#include "core/gguf.h"
#include "quant/quant.h"

static float f16_at(const uint8_t *p)
{
    return f16_to_f32(rd_u16le(p));
}

/* An f16 whose exponent is all ones: infinity or NaN. */
static bool f16_bad(const uint8_t *p)
{
    return (rd_u16le(p) & 0x7c00u) == 0x7c00u;
}

/* The first block of n whose f16 at byte `at` (and at `at2` unless
 * negative) is infinite or NaN. */
static int64_t bad_f16s(const uint8_t *b, size_t n, size_t bytes, size_t at, int at2)
{
    for (size_t i = 0; i < n; i++, b += bytes)
        if (f16_bad(b + at) || (at2 >= 0 && f16_bad(b + at2)))
            return (int64_t)i;
    return -1;
}

/* ---- 32-weight blocks ---- */

static void dq_q4_0(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++, b += 18, y += 32) {
        const float d = f16_at(b);
        for (int j = 0; j < 16; j++) {
            const int x0 = (b[2 + j] & 0x0f) - 8;
            const int x1 = (b[2 + j] >> 4) - 8;
            y[j] = x0 * d;
            y[j + 16] = x1 * d;
        }
    }
}

static void dq_q4_1(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++, b += 20, y += 32) {
        const float d = f16_at(b), m = f16_at(b + 2);
        for (int j = 0; j < 16; j++) {
            const int x0 = b[4 + j] & 0x0f;
            const int x1 = b[4 + j] >> 4;
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        }
    }
}

static void dq_q5_0(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++, b += 22, y += 32) {
        const float d = f16_at(b);
        const uint32_t qh = rd_u32le(b + 2);
        for (int j = 0; j < 16; j++) {
            const int x0 = (int)((b[6 + j] & 0x0f) | (((qh >> j) << 4) & 0x10)) - 16;
            const int x1 = (int)((b[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            y[j] = x0 * d;
            y[j + 16] = x1 * d;
        }
    }
}

static void dq_q5_1(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++, b += 24, y += 32) {
        const float d = f16_at(b), m = f16_at(b + 2);
        const uint32_t qh = rd_u32le(b + 4);
        for (int j = 0; j < 16; j++) {
            const int x0 = (int)((b[8 + j] & 0x0f) | (((qh >> j) << 4) & 0x10));
            const int x1 = (int)((b[8 + j] >> 4) | ((qh >> (j + 12)) & 0x10));
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        }
    }
}

static void dq_q8_0(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++, b += 34, y += 32) {
        const float d = f16_at(b);
        for (int j = 0; j < 32; j++)
            y[j] = (int8_t)b[2 + j] * d;
    }
}

static void dq_iq4_nl(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++, b += 18, y += 32) {
        const float d = f16_at(b);
        for (int j = 0; j < 16; j++) {
            y[j] = d * ggml_kvalues_iq4nl[b[2 + j] & 0x0f];
            y[j + 16] = d * ggml_kvalues_iq4nl[b[2 + j] >> 4];
        }
    }
}

/* ggml's e8m0 exponent as a float halved (the e2m1 table is doubled):
 * 2^(e - 128), the two smallest subnormal. */
static float e8m0_half(uint8_t e)
{
    const uint32_t u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void dq_mxfp4(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 32; i++, b += 17, y += 32) {
        const float d = e8m0_half(b[0]);
        for (int j = 0; j < 16; j++) {
            const int8_t x0 = ggml_kvalues_mxfp4[b[1 + j] & 0x0f];
            const int8_t x1 = ggml_kvalues_mxfp4[b[1 + j] >> 4];
            y[j] = x0 * d;
            y[j + 16] = x1 * d;
        }
    }
}

/* ---- 256-weight super-blocks ---- */

static void dq_q2_k(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 84) {
        const float d = f16_at(b + 80), min = f16_at(b + 82);
        const uint8_t *q = b + 16;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int k = 0; k < 2; k++) {
                    const uint8_t sc = b[is++];
                    const float dl = d * (sc & 0x0f), ml = min * (sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * ((int8_t)((q[16 * k + l] >> shift) & 3)) - ml;
                }
    }
}

/* Q3_K's sixteen 6-bit scales: low 4 bits in bytes 0-7 (sub-blocks 8-15 in
 * the high nibbles), high 2 bits in bytes 8-11. */
static int q3k_scale(const uint8_t *s, int k)
{
    const int lo = k < 8 ? s[k] & 0x0f : s[k - 8] >> 4;
    const int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    return lo | hi << 4;
}

static void dq_q3_k(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 110) {
        const float d_all = f16_at(b + 108);
        const uint8_t *hm = b, *q = b + 32, *sc = b + 96;
        uint8_t m = 1;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32)
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1))
                for (int k = 0; k < 2; k++) {
                    const float dl = d_all * (q3k_scale(sc, is++) - 32);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * ((int8_t)((q[16 * k + l] >> shift) & 3) - ((hm[16 * k + l] & m) ? 0 : 4));
                }
    }
}

/* Q4_K / Q5_K: scale and min of sub-block j (6 bits each) from the 12 bytes. */
static void k4_scale_min(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q4_K (144 bytes: d, dmin, scales[12], qs[128]) and Q5_K (176: qh[32]
 * before qs, each weight's 5th bit): 8 sub-blocks of 32. */
static void dq_k45(const uint8_t *b, float *y, size_t n, bool five)
{
    const size_t bytes = five ? 176 : 144;
    for (size_t i = 0; i < n / 256; i++, b += bytes) {
        const float d = f16_at(b), min = f16_at(b + 2);
        const uint8_t *qh = b + 16, *ql = b + (five ? 48 : 16);
        unsigned u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            k4_scale_min(is, b + 4, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            k4_scale_min(is + 1, b + 4, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((ql[l] & 0x0f) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
        }
    }
}

static void dq_q4_k(const uint8_t *b, float *y, size_t n)
{
    dq_k45(b, y, n, false);
}

static void dq_q5_k(const uint8_t *b, float *y, size_t n)
{
    dq_k45(b, y, n, true);
}

static void dq_q6_k(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 210) {
        const float d = f16_at(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const uint8_t *scb = b + 192;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, scb += 8)
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int8_t q1 = (int8_t)(((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32);
                const int8_t q2 = (int8_t)(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
                const int8_t q3 = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                const int8_t q4 = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
                y[l] = d * (int8_t)scb[is + 0] * q1;
                y[l + 32] = d * (int8_t)scb[is + 2] * q2;
                y[l + 64] = d * (int8_t)scb[is + 4] * q3;
                y[l + 96] = d * (int8_t)scb[is + 6] * q4;
            }
    }
}

/* TQ1_0's base-3 digit n of a byte holding 5 (qs) or 4 (qh) trits scaled by
 * 256/243: ggml's integer arithmetic. */
static float tq1_trit(uint8_t byte, int n, float d)
{
    static const uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};
    const uint8_t q = (uint8_t)(byte * pow3[n]);
    const int16_t xi = (int16_t)(((uint16_t)q * 3) >> 8);
    return (float)(xi - 1) * d;
}

static void dq_tq1_0(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 54) {
        const float d = f16_at(b + 52);
        for (int n5 = 0; n5 < 5; n5++)
            for (int m = 0; m < 32; m++)
                *y++ = tq1_trit(b[m], n5, d);
        for (int n5 = 0; n5 < 5; n5++)
            for (int m = 0; m < 16; m++)
                *y++ = tq1_trit(b[32 + m], n5, d);
        for (int n4 = 0; n4 < 4; n4++)
            for (int j = 0; j < 4; j++)
                *y++ = tq1_trit(b[48 + j], n4, d);
    }
}

static void dq_tq2_0(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 66) {
        const float d = f16_at(b + 64);
        for (int j = 0; j < 64; j += 32)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) {
                    const int8_t q = (int8_t)((b[j + m] >> (l * 2)) & 3);
                    *y++ = (float)(q - 1) * d;
                }
    }
}

/* Eight grid bytes times a scale, negated where `signs` has the bit. */
static void grid8(float *y, float db, const uint8_t *grid, uint8_t signs)
{
    for (int j = 0; j < 8; j++)
        y[j] = db * grid[j] * (signs & ggml_kmask_iq2xs[j] ? -1.f : 1.f);
}

static void dq_iq2_xxs(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 66) {
        const float d = f16_at(b);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *q = b + 2 + 8 * ib;
            const uint32_t a1 = rd_u32le(q + 4);
            const float db = d * (0.5f + (a1 >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++, y += 8)
                grid8(y, db, ggml_iq2xxs_grid[q[l]], ggml_ksigns_iq2xs[(a1 >> 7 * l) & 127]);
        }
    }
}

static void dq_iq2_xs(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 74) {
        const float d = f16_at(b);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t s = b[66 + ib];
            const float db[2] = {d * (0.5f + (s & 0x0f)) * 0.25f, d * (0.5f + (s >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t q = rd_u16le(b + 2 + 2 * (4 * ib + l));
                grid8(y, db[l / 2], ggml_iq2xs_grid[q & 511], ggml_ksigns_iq2xs[q >> 9]);
            }
        }
    }
}

static void dq_iq2_s(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 82) {
        const float d = f16_at(b);
        const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *sc = b + 74;
        for (int ib = 0; ib < 8; ib++, qs += 4, signs += 4) {
            const float db[2] = {d * (0.5f + (sc[ib] & 0x0f)) * 0.25f, d * (0.5f + (sc[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++, y += 8)
                grid8(y, db[l / 2], ggml_iq2s_grid[qs[l] | ((qh[ib] << (8 - 2 * l)) & 0x300)], signs[l]);
        }
    }
}

/* Two 4-byte grid rows times a scale, signs from bits 0-7 of `signs`. */
static void grid4x2(float *y, float db, const uint8_t *g1, const uint8_t *g2, uint8_t signs)
{
    for (int j = 0; j < 4; j++) {
        y[j] = db * g1[j] * (signs & ggml_kmask_iq2xs[j] ? -1.f : 1.f);
        y[j + 4] = db * g2[j] * (signs & ggml_kmask_iq2xs[j + 4] ? -1.f : 1.f);
    }
}

static void dq_iq3_xxs(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 98) {
        const float d = f16_at(b);
        const uint8_t *qs = b + 2;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            const uint32_t a = rd_u32le(b + 66 + 4 * ib);
            const float db = d * (0.5f + (a >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++, y += 8)
                grid4x2(y, db, ggml_iq3xxs_grid[qs[2 * l]], ggml_iq3xxs_grid[qs[2 * l + 1]],
                        ggml_ksigns_iq2xs[(a >> 7 * l) & 127]);
        }
    }
}

static void dq_iq3_s(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 110) {
        const float d = f16_at(b);
        const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *sc = b + 106;
        for (int ib = 0; ib < 8; ib++, qs += 8, signs += 4) {
            const uint8_t s = sc[ib / 2];
            const float db = ib % 2 ? d * (1 + 2 * (s >> 4)) : d * (1 + 2 * (s & 0x0f));
            const uint8_t h = qh[ib];
            for (int l = 0; l < 4; l++, y += 8)
                grid4x2(y, db, ggml_iq3s_grid[qs[2 * l] | ((h << (8 - 2 * l)) & 256)],
                        ggml_iq3s_grid[qs[2 * l + 1] | ((h << (7 - 2 * l)) & 256)], signs[l]);
        }
    }
}

static void iq1_grid8(float *y, float dl, const int8_t *grid, float delta)
{
    for (int j = 0; j < 8; j++)
        y[j] = dl * (grid[j] + delta);
}

static void dq_iq1_s(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 50) {
        const float d = f16_at(b);
        const uint8_t *qs = b + 2;
        for (int ib = 0; ib < 8; ib++, qs += 4) {
            const uint16_t qh = rd_u16le(b + 34 + 2 * ib);
            const float dl = d * (2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -ggml_iq1s_delta : ggml_iq1s_delta;
            for (int l = 0; l < 4; l++, y += 8)
                iq1_grid8(y, dl, ggml_iq1s_grid[qs[l] | (((qh >> 3 * l) & 7) << 8)], delta);
        }
    }
}

/* IQ1_M's f16 super-block scale: the top nibbles of its four scale words. */
static uint16_t iq1m_d(const uint8_t *b)
{
    const uint8_t *s = b + 48;
    return (uint16_t)((rd_u16le(s) >> 12) | ((rd_u16le(s + 2) >> 8) & 0x00f0) | ((rd_u16le(s + 4) >> 4) & 0x0f00) |
                      (rd_u16le(s + 6) & 0xf000));
}

static void dq_iq1_m(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 56) {
        const float d = f16_to_f32(iq1m_d(b));
        const uint8_t *qs = b, *qh = b + 32;
        for (int ib = 0; ib < 8; ib++, qs += 4, qh += 2) {
            const uint16_t sc = rd_u16le(b + 48 + 2 * (ib / 2));
            const float dl1 = d * (2 * ((sc >> (6 * (ib % 2) + 0)) & 0x7) + 1);
            const float dl2 = d * (2 * ((sc >> (6 * (ib % 2) + 3)) & 0x7) + 1);
            const int idx[4] = {qs[0] | ((qh[0] << 8) & 0x700), qs[1] | ((qh[0] << 4) & 0x700),
                                qs[2] | ((qh[1] << 8) & 0x700), qs[3] | ((qh[1] << 4) & 0x700)};
            const float delta[4] = {qh[0] & 0x08 ? -ggml_iq1s_delta : ggml_iq1s_delta,
                                    qh[0] & 0x80 ? -ggml_iq1s_delta : ggml_iq1s_delta,
                                    qh[1] & 0x08 ? -ggml_iq1s_delta : ggml_iq1s_delta,
                                    qh[1] & 0x80 ? -ggml_iq1s_delta : ggml_iq1s_delta};
            for (int l = 0; l < 4; l++, y += 8)
                iq1_grid8(y, l < 2 ? dl1 : dl2, ggml_iq1s_grid[idx[l]], delta[l]);
        }
    }
}

static void dq_iq4_xs(const uint8_t *b, float *y, size_t n)
{
    for (size_t i = 0; i < n / 256; i++, b += 136) {
        const float d = f16_at(b);
        const uint16_t sh = rd_u16le(b + 2);
        const uint8_t *qs = b + 8;
        for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
            const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0x0f) | (((sh >> 2 * ib) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * ggml_kvalues_iq4nl[qs[j] & 0x0f];
                y[j + 16] = dl * ggml_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* ---- scale checks ---- */

#define BAD_F16(fn, bytes, at, at2) \
    static int64_t fn(const uint8_t *b, size_t n) { return bad_f16s(b, n, bytes, at, at2); }
BAD_F16(bad_d0_18, 18, 0, -1)
BAD_F16(bad_q4_1, 20, 0, 2)
BAD_F16(bad_q5_0, 22, 0, -1)
BAD_F16(bad_q5_1, 24, 0, 2)
BAD_F16(bad_q8_0, 34, 0, -1)
BAD_F16(bad_q2_k, 84, 80, 82)
BAD_F16(bad_q3_k, 110, 108, -1)
BAD_F16(bad_q4_k, 144, 0, 2)
BAD_F16(bad_q5_k, 176, 0, 2)
BAD_F16(bad_q6_k, 210, 208, -1)
BAD_F16(bad_tq1_0, 54, 52, -1)
BAD_F16(bad_d0_66, 66, 0, -1)
BAD_F16(bad_tq2_0, 66, 64, -1)
BAD_F16(bad_iq2_xs, 74, 0, -1)
BAD_F16(bad_iq2_s, 82, 0, -1)
BAD_F16(bad_iq3_xxs, 98, 0, -1)
BAD_F16(bad_d0_110, 110, 0, -1)
BAD_F16(bad_iq1_s, 50, 0, -1)
BAD_F16(bad_iq4_xs, 136, 0, -1)

static int64_t bad_iq1_m(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++, b += 56)
        if ((iq1m_d(b) & 0x7c00u) == 0x7c00u)
            return (int64_t)i;
    return -1;
}

/* e8m0 0xFF is NaN (OCP MX); ggml's full conversion makes it infinity. */
static int64_t bad_mxfp4(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++, b += 17)
        if (b[0] == 0xff)
            return (int64_t)i;
    return -1;
}

static const struct {
    uint32_t id;
    void (*dequant)(const uint8_t *, float *, size_t);
    int64_t (*bad_scale)(const uint8_t *, size_t);
} rows[] = {
    {GGML_Q4_0, dq_q4_0, bad_d0_18},       {GGML_Q4_1, dq_q4_1, bad_q4_1},
    {GGML_Q5_0, dq_q5_0, bad_q5_0},        {GGML_Q5_1, dq_q5_1, bad_q5_1},
    {GGML_Q8_0, dq_q8_0, bad_q8_0},        {GGML_Q2_K, dq_q2_k, bad_q2_k},
    {GGML_Q3_K, dq_q3_k, bad_q3_k},        {GGML_Q4_K, dq_q4_k, bad_q4_k},
    {GGML_Q5_K, dq_q5_k, bad_q5_k},        {GGML_Q6_K, dq_q6_k, bad_q6_k},
    {GGML_IQ4_NL, dq_iq4_nl, bad_d0_18},   {GGML_IQ4_XS, dq_iq4_xs, bad_iq4_xs},
    {GGML_IQ3_XXS, dq_iq3_xxs, bad_iq3_xxs}, {GGML_IQ3_S, dq_iq3_s, bad_d0_110},
    {GGML_IQ2_XXS, dq_iq2_xxs, bad_d0_66}, {GGML_IQ2_XS, dq_iq2_xs, bad_iq2_xs},
    {GGML_IQ2_S, dq_iq2_s, bad_iq2_s},     {GGML_IQ1_S, dq_iq1_s, bad_iq1_s},
    {GGML_IQ1_M, dq_iq1_m, bad_iq1_m},     {GGML_TQ1_0, dq_tq1_0, bad_tq1_0},
    {GGML_TQ2_0, dq_tq2_0, bad_tq2_0},     {GGML_MXFP4, dq_mxfp4, bad_mxfp4},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

static bool fill(size_t r, struct ggml_qtype *out)
{
    struct ggml_qtype t = {.id = rows[r].id, .dequant = rows[r].dequant, .bad_scale = rows[r].bad_scale};
    if (!ggml_type_info(t.id, &t.name, &t.block, &t.bytes))
        return false;
    t.bpw = 8.0 * t.bytes / t.block;
    *out = t;
    return true;
}

bool ggml_qtype_find(uint32_t id, struct ggml_qtype *out)
{
    for (size_t r = 0; r < N_ROWS; r++)
        if (rows[r].id == id)
            return fill(r, out);
    return false;
}

bool ggml_qtype_find_name(const char *name, struct ggml_qtype *out)
{
    for (size_t r = 0; r < N_ROWS; r++) {
        const char *nm;
        if (ggml_type_info(rows[r].id, &nm, NULL, NULL) && strcasecmp(nm, name) == 0)
            return fill(r, out);
    }
    return false;
}

bool ggml_qtype_at(size_t i, struct ggml_qtype *out)
{
    return i < N_ROWS && fill(i, out);
}

/* ---- exact MLX affine forms ---- */

int ggml_affine_bits(uint32_t id)
{
    return id == 3 ? 4 : id == 6 || id == 7 ? 5 : 0; /* Q4_1; Q5_0, Q5_1 */
}

/* A block's codes: 16 bytes of nibbles at q (weight j low, 16 + j high), a
 * fifth bit from the u32 at qh (bit j of weight j) unless qh is NULL. */
static void nib_codes(const uint8_t *q, const uint8_t *qh, uint8_t *c)
{
    const uint32_t h = qh ? rd_u32le(qh) : 0;
    for (int j = 0; j < 16; j++) {
        c[j] = (uint8_t)((q[j] & 0x0f) | (h >> j & 1) << 4);
        c[j + 16] = (uint8_t)((q[j] >> 4) | (h >> (j + 16) & 1) << 4);
    }
}

int64_t ggml_to_affine(uint32_t id, const uint8_t *b, size_t n, uint32_t *words, uint8_t *scales, uint8_t *biases)
{
    const int bits = ggml_affine_bits(id);
    const size_t bytes = id == 3 ? 20 : id == 6 ? 22 : 24;
    for (size_t g = 0; g < n / 32; g++, b += bytes) {
        uint8_t c[32];
        nib_codes(b + (id == 3 ? 4 : id == 6 ? 6 : 8), id == 3 ? NULL : b + (id == 6 ? 2 : 4), c);
        quant_pack_codes(c, 32, bits, words + g * (size_t)bits);
        memcpy(scales + 2 * g, b, 2); /* d */
        if (id == 6) { /* −16·d: exact in f16 unless it overflows */
            const uint16_t h = f32_to_f16(-16.0f * f16_at(b));
            if ((h & 0x7c00u) == 0x7c00u)
                return (int64_t)g;
            wr_u16le(biases + 2 * g, h);
        } else {
            memcpy(biases + 2 * g, b + 2, 2); /* m */
        }
    }
    return -1;
}
