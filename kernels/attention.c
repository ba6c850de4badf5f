/* attention.c - the textbook attention, kept as the spec the view-based
 * kernels (kernels/attn.h) are tested against.
 *
 * Shapes (see kernels.h): q [T][H][D], k/v [P][Hkv][D] with row stride
 * kv_stride, out [T][H][D].  Query t sits at position pos0 + t and attends
 * to positions 0 .. pos0 + t.  Scale 1/sqrt(D). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

void kern_attention_ref(const float *q, const float *k, const float *v, float *out, const kern_attn_shape *s) {
    const int T = s->T, H = s->H, D = s->D, P = s->pos0 + s->T, group = s->H / s->Hkv;
    /* expand K/V to one copy per query head: [H][P][D] */
    float *ke = malloc((size_t)H * P * D * sizeof *ke), *ve = malloc((size_t)H * P * D * sizeof *ve);
    float *S = malloc((size_t)T * P * sizeof *S);
    CORE_ASSERT(ke && ve && S);
    for (int h = 0; h < H; h++)
        for (int p = 0; p < P; p++)
            for (int d = 0; d < D; d++) {
                ke[((size_t)h * P + p) * D + d] = k[(size_t)p * s->kv_stride + (size_t)(h / group) * D + d];
                ve[((size_t)h * P + p) * D + d] = v[(size_t)p * s->kv_stride + (size_t)(h / group) * D + d];
            }
    for (int h = 0; h < H; h++) {
        /* S[t][p] = q_t . k_p / sqrt(D), masked above the diagonal */
        for (int t = 0; t < T; t++)
            for (int p = 0; p < P; p++) {
                float dot = 0.0f;
                for (int d = 0; d < D; d++) dot += q[((size_t)t * H + h) * D + d] * ke[((size_t)h * P + p) * D + d];
                S[(size_t)t * P + p] = p <= s->pos0 + t ? dot / sqrtf((float)D) : -INFINITY;
            }
        for (int t = 0; t < T; t++) {
            kern_softmax_ref(S + (size_t)t * P, P);
            for (int d = 0; d < D; d++) {
                float acc = 0.0f;
                for (int p = 0; p < P; p++) acc += S[(size_t)t * P + p] * ve[((size_t)h * P + p) * D + d];
                out[((size_t)t * H + h) * D + d] = acc;
            }
        }
    }
    free(ke);
    free(ve);
    free(S);
}
