/* quants_k.c - reference (de)quantization of ggml's K-quants (Q2_K..Q6_K)
 * and of their activation type Q8_K.
 *
 * The quantizers follow llama.cpp's quantize_row_q*_K_ref step for step:
 * each sub-block gets a float scale (and minimum) from a small search that
 * minimises a weighted squared (or absolute) error, the sub-block scales are
 * then themselves quantized to 4, 6 or 8 bits against one fp16 super-block
 * scale, and finally every weight is re-rounded against the scale it will
 * really be decoded with.  The float expressions below keep ggml's
 * operation order (and its rounding helper), because byte-identical output
 * is the point: a file kvant writes must be the file llama.cpp writes.
 * That requires that the compiler neither reassociates (no -ffast-math)
 * nor contracts a*b + c into one FMA (ggml's reference quantizers are built
 * without FMA): contraction is switched off for this file below, so a
 * -march=native build still writes llama.cpp's bytes (clang's explicit
 * -ffp-contract=fast overrides the pragma: do not build this file with it).
 * tests/test_kquants.c checks the bytes against llama.cpp's files.
 *
 * Layouts and element order: kernels/quants_k.h.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <string.h>

#include "kernels/quants.h"

#define H2F kern_fp16_to_fp32
#define F2H kern_fp32_to_fp16
#define GROUP_MAX_EPS 1e-15f /* below this a group counts as all zero (ggml's constant) */

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* Round to nearest, ties to even, for |v| <= 2^22 (ggml's nearest_int):
 * adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits. */
static inline int nearest_int(float v) {
    const float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* ---- scale searches (ggml's make_*_quants) ------------------------------------ */

/* Symmetric grid with a sign: L[i] = l + nmax, l in [-nmax, nmax), x ~ scale * l,
 * scale minimising sum w (x - scale*l)^2 with w = qw[i] (or x^2 when qw is NULL),
 * searched over 19 trial grid steps around amax/nmax (ggml's make_qx_quants,
 * rmse_type 1).  The scale's sign is that of -x[argmax |x|]. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            const float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* As make_qx_quants with w = x^2, but refined element by element: up to 5
 * sweeps that move one L[i] to its best value given the others, kept when
 * the weighted error drops (ggml's make_q3_quants, do_rmse).  L[i] in
 * [0, 2*nmax). */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = imax(-nmax, imin(nmax - 1, nearest_int(x[i] * sl2 / slx)));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric grid: x ~ scale * L[i] - the_min, L[i] in [0, nmax], the_min >= 0.
 * Starts from the range [min(x, 0), max x], then tries nstep+1 grid steps
 * (rmin + rdelta*is + nmax)/(max - min) and for each solves the weighted
 * least-squares scale and minimum in closed form; keeps the lowest
 * weighted error, squared or absolute (use_mad).  Laux: n bytes of scratch.
 * (ggml's make_qkx2_quants.) */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Packs 256 2-bit values: byte 32*(e/128) + e%32, bits 2*((e%128)/32). */
static void pack_2bit(const uint8_t L[QK_K], uint8_t qs[QK_K / 4]) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* ---- Q2_K ----------------------------------------------------------------------- */

/* One super-block: a (scale, min) pair per 16 weights from a mean-absolute-
 * error search, both quantized to 4 bits against d = max scale / 15 and
 * dmin = max min / 15; weights re-rounded to the decoded pairs. */
static void quant_q2_k_block(const float *x, block_q2_K *y) {
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 16; j++) {
        for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
        scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        const float iscale = q4scale / max_scale;
        for (int j = 0; j < QK_K / 16; j++) y->scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
        y->d = F2H(max_scale / q4scale);
    } else {
        memset(y->scales, 0, sizeof y->scales);
        y->d = F2H(0.f);
    }
    if (max_min > 0) {
        const float iscale = q4scale / max_min;
        for (int j = 0; j < QK_K / 16; j++)
            y->scales[j] = (uint8_t)(y->scales[j] | ((unsigned)nearest_int(iscale * mins[j]) << 4));
        y->dmin = F2H(max_min / q4scale);
    } else {
        y->dmin = F2H(0.f);
    }
    for (int j = 0; j < QK_K / 16; j++) {
        const float d = H2F(y->d) * (y->scales[j] & 0xF);
        if (!d) continue; /* keep the search's L */
        const float dm = H2F(y->dmin) * (y->scales[j] >> 4);
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (uint8_t)imax(0, imin(3, nearest_int((x[16 * j + i] + dm) / d)));
    }
    pack_2bit(L, y->qs);
}

void kern_quant_q2_k_ref(const float *x, void *vy, int64_t n) {
    block_q2_K *y = vy;
    for (int64_t b = 0; b < n / QK_K; b++) quant_q2_k_block(x + b * QK_K, &y[b]);
}

/* element e = 128h + 32j + l sits in qs[32h + l] at bits 2j (the loops
 * below walk e in that order, so they vectorize) */
void kern_unpack_q2_k(const block_q2_K *b, kern_kblock *u) {
    for (int h = 0; h < QK_K / 128; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) u->q[128 * h + 32 * j + l] = (int8_t)((b->qs[32 * h + l] >> (2 * j)) & 3);
    for (int s = 0; s < QK_K / 16; s++) {
        u->sc[s] = b->scales[s] & 0xF;
        u->mn[s] = b->scales[s] >> 4;
    }
    u->sub = 16;
    u->has_min = true;
    u->d = H2F(b->d);
    u->dmin = H2F(b->dmin);
}

/* ---- the integer view to floats (all five K types) ------------------------------ */

/* y[e] = (d * sc) * q - (dmin * mn): ggml's dequantize_row_q*_K operation
 * order, so the floats are identical to llama.cpp's. */
static void dequant_kblock(const kern_kblock *u, float *y) {
    for (int e = 0; e < QK_K; e++) {
        const int s = e / u->sub;
        const float dl = u->d * u->sc[s];
        if (u->has_min) y[e] = dl * u->q[e] - u->dmin * u->mn[s];
        else y[e] = dl * u->q[e];
    }
}

void kern_dequant_q2_k_ref(const void *vx, float *y, int64_t n) {
    const block_q2_K *x = vx;
    kern_kblock u;
    for (int64_t b = 0; b < n / QK_K; b++) {
        kern_unpack_q2_k(&x[b], &u);
        dequant_kblock(&u, y + b * QK_K);
    }
}

/* ---- Q3_K ----------------------------------------------------------------------- */

/* One super-block: a signed scale per 16 weights (make_q3_quants), the 16
 * scales quantized to 6 bits (-32..31) against d = -max/32 where max is
 * the scale of largest magnitude; weights re-rounded to -4..3. */
static void quant_q3_k_block(const float *x, block_q3_K *y) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < QK_K / 16; j++) {
        scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
        const float scale = fabsf(scales[j]);
        if (scale > amax) { amax = scale; max_scale = scales[j]; }
    }
    memset(y->scales, 0, sizeof y->scales);
    if (max_scale) {
        const float iscale = -32.f / max_scale;
        for (int j = 0; j < QK_K / 16; j++) {
            int8_t l = (int8_t)nearest_int(iscale * scales[j]);
            l = (int8_t)(imax(-32, imin(31, l)) + 32);
            if (j < 8) y->scales[j] = l & 0xF;
            else y->scales[j - 8] = (uint8_t)(y->scales[j - 8] | ((l & 0xF) << 4));
            y->scales[j % 4 + 8] = (uint8_t)(y->scales[j % 4 + 8] | ((l >> 4) << (2 * (j / 4))));
        }
        y->d = F2H(1 / iscale);
    } else {
        y->d = F2H(0.f);
    }
    for (int j = 0; j < QK_K / 16; j++) {
        const float d = H2F(y->d) * kern_q3_k_scale(y->scales, j);
        if (!d) continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(imax(-4, imin(3, nearest_int(x[16 * j + i] / d))) + 4);
    }
    /* third bit of element e: bit e/32 of hmask[e%32]; the low 2 bits stay in L */
    memset(y->hmask, 0, sizeof y->hmask);
    uint8_t L2[QK_K];
    for (int e = 0; e < QK_K; e++) {
        if (L[e] > 3) y->hmask[e % 32] = (uint8_t)(y->hmask[e % 32] | (1u << (e / 32)));
        L2[e] = (uint8_t)(L[e] > 3 ? L[e] - 4 : L[e]);
    }
    pack_2bit(L2, y->qs);
}

void kern_quant_q3_k_ref(const float *x, void *vy, int64_t n) {
    block_q3_K *y = vy;
    for (int64_t b = 0; b < n / QK_K; b++) quant_q3_k_block(x + b * QK_K, &y[b]);
}

void kern_unpack_q3_k(const block_q3_K *b, kern_kblock *u) {
    for (int h = 0; h < QK_K / 128; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) { /* as Q2_K, minus 4 where bit 4h+j of hmask[l] is clear */
                const int lo = (b->qs[32 * h + l] >> (2 * j)) & 3;
                const int hi = (b->hmask[l] >> (4 * h + j)) & 1;
                u->q[128 * h + 32 * j + l] = (int8_t)(lo - 4 + 4 * hi);
            }
    for (int s = 0; s < QK_K / 16; s++) {
        u->sc[s] = kern_q3_k_scale(b->scales, s);
        u->mn[s] = 0;
    }
    u->sub = 16;
    u->has_min = false;
    u->d = H2F(b->d);
    u->dmin = 0;
}

void kern_dequant_q3_k_ref(const void *vx, float *y, int64_t n) {
    const block_q3_K *x = vx;
    kern_kblock u;
    for (int64_t b = 0; b < n / QK_K; b++) {
        kern_unpack_q3_k(&x[b], &u);
        dequant_kblock(&u, y + b * QK_K);
    }
}

/* ---- Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scale and min ----------------- */

/* The part Q4_K and Q5_K share: per 32 weights a (scale, min) pair from a
 * squared-error search weighted by rms(x) + |x|, both quantized to 6 bits
 * against d = max scale / 63 and dmin = max min / 63 (written to d, dmin,
 * scales), then every weight re-rounded to 0..nmax into L. */
static void quant_k4_scales(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t L[QK_K],
                            kern_half *yd, kern_half *ydmin, uint8_t ysc[K_SCALE_SIZE]) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep,
                                     false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]); /* as ggml: wrap to 8 bits, then clamp */
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            ysc[j] = ls;
            ysc[j + 4] = lm;
        } else { /* low nibbles in bytes 8..11, top 2 bits over bytes 0..7 */
            ysc[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            ysc[j - 4] = (uint8_t)(ysc[j - 4] | ((ls >> 4) << 6));
            ysc[j] = (uint8_t)(ysc[j] | ((lm >> 4) << 6));
        }
    }
    *yd = F2H(max_scale / 63.f);
    *ydmin = F2H(max_min / 63.f);
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t sc, m;
        kern_k4_scale_min(j, ysc, &sc, &m);
        const float d = H2F(*yd) * sc;
        if (!d) continue;
        const float dm = H2F(*ydmin) * m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)imax(0, imin(nmax, nearest_int((x[32 * j + i] + dm) / d)));
    }
}

void kern_quant_q4_k_ref(const float *x, void *vy, int64_t n) {
    block_q4_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        quant_k4_scales(x, 15, -1.f, 0.1f, 20, L, &y[b].d, &y[b].dmin, y[b].scales);
        for (int j = 0; j < QK_K; j += 64)
            for (int l = 0; l < 32; l++) y[b].qs[j / 2 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void kern_quant_q5_k_ref(const float *x, void *vy, int64_t n) {
    block_q5_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        quant_k4_scales(x, 31, -0.5f, 0.1f, 15, L, &y[b].d, &y[b].dmin, y[b].scales);
        memset(y[b].qh, 0, sizeof y[b].qh);
        for (int e = 0; e < QK_K; e++) /* fifth bit of element e: bit e/32 of qh[e%32] */
            if (L[e] > 15) y[b].qh[e % 32] = (uint8_t)(y[b].qh[e % 32] | (1u << (e / 32)));
        for (int j = 0; j < QK_K; j += 64)
            for (int l = 0; l < 32; l++)
                y[b].qs[j / 2 + l] = (uint8_t)((L[j + l] & 0xF) | ((L[j + l + 32] & 0xF) << 4));
    }
}

static void unpack_k4_scales(const uint8_t sc[K_SCALE_SIZE], kern_half d, kern_half dmin, kern_kblock *u) {
    for (int s = 0; s < QK_K / 32; s++) {
        uint8_t a, m;
        kern_k4_scale_min(s, sc, &a, &m);
        u->sc[s] = a;
        u->mn[s] = m;
    }
    u->sub = 32;
    u->has_min = true;
    u->d = H2F(d);
    u->dmin = H2F(dmin);
}

/* element e = 64g + l (l < 32) is the low nibble of qs[32g + l], 64g + 32 + l the high one */
void kern_unpack_q4_k(const block_q4_K *b, kern_kblock *u) {
    for (int g = 0; g < QK_K / 64; g++)
        for (int l = 0; l < 32; l++) {
            u->q[64 * g + l] = (int8_t)(b->qs[32 * g + l] & 0xF);
            u->q[64 * g + 32 + l] = (int8_t)(b->qs[32 * g + l] >> 4);
        }
    unpack_k4_scales(b->scales, b->d, b->dmin, u);
}

void kern_unpack_q5_k(const block_q5_K *b, kern_kblock *u) {
    for (int g = 0; g < QK_K / 64; g++)
        for (int l = 0; l < 32; l++) { /* as Q4_K, plus bit 2g (2g+1) of qh[l] as bit 4 */
            u->q[64 * g + l] = (int8_t)((b->qs[32 * g + l] & 0xF) | (((b->qh[l] >> (2 * g)) & 1) << 4));
            u->q[64 * g + 32 + l] = (int8_t)((b->qs[32 * g + l] >> 4) | (((b->qh[l] >> (2 * g + 1)) & 1) << 4));
        }
    unpack_k4_scales(b->scales, b->d, b->dmin, u);
}

void kern_dequant_q4_k_ref(const void *vx, float *y, int64_t n) {
    const block_q4_K *x = vx;
    kern_kblock u;
    for (int64_t b = 0; b < n / QK_K; b++) {
        kern_unpack_q4_k(&x[b], &u);
        dequant_kblock(&u, y + b * QK_K);
    }
}

void kern_dequant_q5_k_ref(const void *vx, float *y, int64_t n) {
    const block_q5_K *x = vx;
    kern_kblock u;
    for (int64_t b = 0; b < n / QK_K; b++) {
        kern_unpack_q5_k(&x[b], &u);
        dequant_kblock(&u, y + b * QK_K);
    }
}

/* ---- Q6_K ----------------------------------------------------------------------- */

/* One super-block: a signed scale per 16 weights (make_qx_quants, 6-bit
 * grid), quantized to 8 bits against d = -max/128 (max: the scale of
 * largest magnitude); weights re-rounded to -32..31.  An all-zero block
 * (every scale below GROUP_MAX_EPS) is all zero bytes. */
static void quant_q6_k_block(const float *x, block_q6_K *y) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ib++) {
        scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, NULL);
        const float abs_scale = fabsf(scales[ib]);
        if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scales[ib]; }
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
        memset(y, 0, sizeof *y);
        return;
    }
    const float iscale = -128.f / max_scale;
    y->d = F2H(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ib++) y->scales[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
    for (int j = 0; j < QK_K / 16; j++) {
        const float d = H2F(y->d) * y->scales[j];
        if (!d) continue;
        for (int i = 0; i < 16; i++)
            L[16 * j + i] = (int8_t)(imax(-32, imin(31, nearest_int(x[16 * j + i] / d))) + 32);
    }
    /* low nibbles: ql[64h + l] holds quarters 0 (low) and 2 (high) of 128-chunk h,
     * ql[64h + 32 + l] quarters 1 and 3; high 2 bits of all four in qh[32h + l] */
    for (int h = 0; h < QK_K / 128; h++) {
        const int8_t *Lh = L + 128 * h;
        for (int l = 0; l < 32; l++) {
            y->ql[64 * h + l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
            y->ql[64 * h + l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
            y->qh[32 * h + l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                          ((Lh[l + 96] >> 4) << 6));
        }
    }
}

void kern_quant_q6_k_ref(const float *x, void *vy, int64_t n) {
    block_q6_K *y = vy;
    for (int64_t b = 0; b < n / QK_K; b++) quant_q6_k_block(x + b * QK_K, &y[b]);
}

/* element e = 128h + 32j + l: low 4 bits in ql[64h + 32(j&1) + l] at bit
 * 4(j>>1), high 2 bits in qh[32h + l] at bit 2j */
void kern_unpack_q6_k(const block_q6_K *b, kern_kblock *u) {
    for (int h = 0; h < QK_K / 128; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                const int lo = (b->ql[64 * h + 32 * (j & 1) + l] >> (4 * (j >> 1))) & 0xF;
                const int hi = (b->qh[32 * h + l] >> (2 * j)) & 3;
                u->q[128 * h + 32 * j + l] = (int8_t)((lo | (hi << 4)) - 32);
            }
    for (int s = 0; s < QK_K / 16; s++) {
        u->sc[s] = b->scales[s];
        u->mn[s] = 0;
    }
    u->sub = 16;
    u->has_min = false;
    u->d = H2F(b->d);
    u->dmin = 0;
}

void kern_dequant_q6_k_ref(const void *vx, float *y, int64_t n) {
    const block_q6_K *x = vx;
    kern_kblock u;
    for (int64_t b = 0; b < n / QK_K; b++) {
        kern_unpack_q6_k(&x[b], &u);
        dequant_kblock(&u, y + b * QK_K);
    }
}

/* ---- Q8_K: activations ------------------------------------------------------------ */

/* Per 256: d = max / -127 where max is the element of largest magnitude
 * (with its sign), q = round(x / d) capped at 127 (so max itself maps to
 * -127 and the opposite extreme to at most 127), bsums = sums of 16.
 * An all-zero block is d = 0, q = 0, bsums = 0. (llama.cpp's
 * quantize_row_q8_K_ref; it leaves bsums unwritten for a zero block.) */
void kern_quant_q8_k_ref(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) y[b].qs[j] = (int8_t)imin(127, nearest_int(iscale * x[j]));
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y[b].qs[16 * g + i];
            y[b].bsums[g] = (int16_t)sum;
        }
        y[b].d = 1 / iscale;
    }
}

void kern_dequant_q8_k_ref(const void *vx, float *y, int64_t n) {
    const block_q8_K *x = vx;
    for (int64_t b = 0; b < n / QK_K; b++)
        for (int j = 0; j < QK_K; j++) y[b * QK_K + j] = x[b].d * x[b].qs[j];
}
