/* tools.c - the public API of the file tools (synth, quantize). */
#include "kvant_compress.h"
#include "compress/compress.h"
#include "compress/synth.h"
#include "kernels/types.h"

kvant_code kvant_synth(const kvant_synth_params *p, kvant_status *st) {
    const synth_params sp = {.shape = p->shape, .out_path = p->out_path, .ftype = (int)p->type, .pure = p->pure,
                             .seed = p->seed, .n_threads = p->n_threads, .quiet = p->quiet,
                             .n_ctx = p->n_ctx, .n_layers = p->n_layers};
    core_ok(st);
    return synth_write(&sp, st);
}

const char *kvant_synth_shape(int i, const char **what) {
    int n;
    const synth_shape *s = synth_shapes(&n);
    if (i < 0 || i >= n) return NULL;
    if (what) *what = s[i].what;
    return s[i].name;
}

kvant_code kvant_quantize(const char *in_path, const char *out_path, const kvant_quantize_params *p,
                          kvant_status *st) {
    const quant_params qp = {(int)p->type, p->pure, p->n_threads, p->quiet};
    core_ok(st);
    return quant_file(in_path, out_path, &qp, st);
}

const char *kvant_ftype_list(int i, kvant_ftype *out) {
    int n;
    const quant_ftype *f = quant_ftype_list(&n);
    /* only types whose quantizer exists */
    for (int k = 0; k < n; k++) {
        if (!kern_type_get(f[k].base_type)->from_float_ref) continue;
        if (i-- == 0) {
            if (out) *out = (kvant_ftype)f[k].ftype;
            return f[k].name;
        }
    }
    return NULL;
}

const char *kvant_ftype_name(kvant_ftype t) {
    const quant_ftype *f = quant_ftype_of((int)t);
    return f ? f->name : NULL;
}
