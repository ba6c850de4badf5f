/* ptq.c - the public API of PTQ quantization (compress/ptq.h). */
#include <string.h>

#include "kvant_compress.h"
#include "compress/ptq.h"

/* the public choices as compress/ptq.h's spec; KVANT_ERR_ARG when out of range */
static kvant_code spec_of(const kvant_ptq_params *p, ptq_spec *s, kvant_status *st) {
    memset(s, 0, sizeof *s);
    switch (p->scheme) {
    case KVANT_PTQ_ABSMAX: s->scheme = PTQ_ABSMAX; break;
    case KVANT_PTQ_ZEROPOINT: s->scheme = PTQ_ZEROPOINT; break;
    default: return core_fail(st, KVANT_ERR_ARG, "PTQ scheme %d is none of absmax, zeropoint", (int)p->scheme);
    }
    switch (p->granularity) {
    case KVANT_PTQ_CHANNEL: s->gran = PTQ_CHANNEL; break;
    case KVANT_PTQ_TENSOR: s->gran = PTQ_TENSOR; break;
    case KVANT_PTQ_GROUP:
        if (p->group < 1 || p->group > 1 << 20) return core_fail(st, KVANT_ERR_ARG, "group size %d (at least 1)", p->group);
        s->gran = PTQ_GROUP;
        s->group = p->group;
        break;
    default: return core_fail(st, KVANT_ERR_ARG, "PTQ granularity %d is none of channel, tensor, group", (int)p->granularity);
    }
    if (p->bits < 2 || p->bits > 8) return core_fail(st, KVANT_ERR_ARG, "--bits %d is not in 2..8", p->bits);
    s->bits = p->bits;
    switch (p->clip) {
    case KVANT_PTQ_CLIP_NONE: s->clip = PTQ_CLIP_NONE; break;
    case KVANT_PTQ_CLIP_MSE: s->clip = PTQ_CLIP_MSE; break;
    default: return core_fail(st, KVANT_ERR_ARG, "PTQ clip %d is none of none, mse", (int)p->clip);
    }
    return KVANT_OK;
}

static kvant_code to_params(const kvant_ptq_params *p, ptq_params *q, kvant_status *st) {
    memset(q, 0, sizeof *q);
    kvant_code rc = spec_of(p, &q->spec, st);
    if (rc) return rc;
    if (q->spec.gran == PTQ_GROUP && q->spec.group != 32 && q->spec.group != 64 && q->spec.group != 128)
        return core_fail(st, KVANT_ERR_ARG, "group size %d: stored groups are 32, 64 or 128", q->spec.group);
    switch (p->fallback) {
    case KVANT_PTQ_FALLBACK_CHANNEL: q->fallback = PTQ_FALLBACK_CHANNEL; break;
    case KVANT_PTQ_FALLBACK_F16: q->fallback = PTQ_FALLBACK_F16; break;
    case KVANT_PTQ_FALLBACK_F32: q->fallback = PTQ_FALLBACK_F32; break;
    default: return core_fail(st, KVANT_ERR_ARG, "PTQ fallback %d is none of channel, f16, f32", (int)p->fallback);
    }
    q->keep = p->keep;
    q->tensor_bits = p->tensor_bits;
    q->calib_path = p->calib_path;
    q->calib_tokens = p->calib_tokens;
    q->gptq = p->gptq;
    if (q->gptq && !q->calib_path) return core_fail(st, KVANT_ERR_ARG, "--gptq needs --calib TEXT");
    q->n_threads = p->n_threads;
    q->quiet = p->quiet;
    return KVANT_OK;
}

kvant_code kvant_ptq_quantize(const char *in_path, const char *out_path, const kvant_ptq_params *p,
                              kvant_ptq_report *r, kvant_status *st) {
    core_ok(st);
    ptq_params q;
    kvant_code rc = to_params(p, &q, st);
    if (rc) return rc;
    ptq_report rep;
    rc = ptq_quantize_file(in_path, out_path, &q, &rep, st);
    if (r) *r = (kvant_ptq_report){rep.bpw, rep.quant_bpw, rep.bytes, rep.n_quantized, rep.n_fallback, rep.n_kept, rep.seconds};
    return rc;
}

kvant_code kvant_ptq_fake_quant(const kvant_ptq_params *p, float *x, int64_t rows, int64_t cols, kvant_status *st) {
    core_ok(st);
    ptq_spec s;
    kvant_code rc = spec_of(p, &s, st);
    if (rc) return rc;
    if (rows < 1 || cols < 1) return core_fail(st, KVANT_ERR_ARG, "empty matrix");
    ptq_fake_quant(&s, x, x, rows, cols, NULL, NULL);
    return KVANT_OK;
}
