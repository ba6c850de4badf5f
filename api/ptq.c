/* ptq.c - the public API of PTQ quantization (compress/ptq.h). */
#include <string.h>
#include <strings.h>

#include "kvant.h"
#include "compress/ptq.h"

static kvant_code to_params(const kvant_ptq_params *p, ptq_params *q, kvant_status *st) {
    memset(q, 0, sizeof *q);
    kvant_code rc = ptq_spec_parse(&q->spec, p->scheme, p->granularity, p->bits, p->clip, st);
    if (rc) return rc;
    if (q->spec.gran == PTQ_GROUP && q->spec.group != 32 && q->spec.group != 64 && q->spec.group != 128)
        return core_fail(st, KVANT_ERR_ARG, "group size %d: stored groups are 32, 64 or 128", q->spec.group);
    if (!p->fallback || !strcasecmp(p->fallback, "channel")) q->fallback = PTQ_FALLBACK_CHANNEL;
    else if (!strcasecmp(p->fallback, "f16")) q->fallback = PTQ_FALLBACK_F16;
    else if (!strcasecmp(p->fallback, "f32")) q->fallback = PTQ_FALLBACK_F32;
    else return core_fail(st, KVANT_ERR_ARG, "unknown fallback '%s' (channel, f16 or f32)", p->fallback);
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
    kvant_code rc = ptq_spec_parse(&s, p->scheme, p->granularity, p->bits, p->clip, st);
    if (rc) return rc;
    if (rows < 1 || cols < 1) return core_fail(st, KVANT_ERR_ARG, "empty matrix");
    ptq_fake_quant(&s, x, x, rows, cols, NULL, NULL);
    return KVANT_OK;
}
