/* attention.c - causal attention for one sequence against its KV cache.
 *
 * Shapes (see kernels.h): q [T][H][D], k/v [P][Hkv][D] with row stride
 * kv_stride, out [T][H][D].  Query t sits at position pos0 + t and attends
 * to positions 0 .. pos0 + t.  Scale 1/sqrt(D). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

typedef struct {
    float *scores;
    const float *q, *k, *v;
    float *out;
    const kern_attn_shape *s;
} attn_job;

/* one (t, h) pair: scores over the causal window, softmax, weighted V sum */
static void attend_one(const attn_job *j, float *sc, int t, int h) {
    const kern_attn_shape *s = j->s;
    const int D = s->D, group = s->H / s->Hkv, hk = h / group;
    const int npos = s->pos0 + t + 1;
    const float scale = 1.0f / sqrtf((float)D);
    const float *qh = j->q + ((size_t)t * s->H + h) * D;
    for (int p = 0; p < npos; p++)
        sc[p] = kern_dot_f32(qh, j->k + (size_t)p * s->kv_stride + (size_t)hk * D, D) * scale;
    kern_softmax(sc, npos);
    float *o = j->out + ((size_t)t * s->H + h) * D;
    memset(o, 0, (size_t)D * sizeof *o);
    for (int p = 0; p < npos; p++) {
        const float *vp = j->v + (size_t)p * s->kv_stride + (size_t)hk * D;
        const float a = sc[p];
        for (int d = 0; d < D; d++) o[d] += a * vp[d];
    }
}

static void attn_task(void *ctx, int ith, int nth) {
    const attn_job *j = ctx;
    const kern_attn_shape *s = j->s;
    float *sc = j->scores + (size_t)ith * (size_t)(s->pos0 + s->T);
    int64_t lo, hi;
    core_split((int64_t)s->T * s->H, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) attend_one(j, sc, (int)(i / s->H), (int)(i % s->H));
}

void kern_attention(core_pool *pool, float *scores, const float *q, const float *k, const float *v,
                    float *out, const kern_attn_shape *s) {
    CORE_ASSERT(s->Hkv > 0 && s->H % s->Hkv == 0);
    attn_job j = {scores, q, k, v, out, s};
    const double work = (double)s->T * s->H * s->D * (s->pos0 + s->T); /* ~ multiply-adds */
    if (work < KERN_MT_MIN_WORK) attn_task(&j, 0, 1);
    else core_pool_run(pool, attn_task, &j);
}

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
