/* ptq_file.c - whole models in kvant's PTQ types (compress/ptq.h):
 * per-tensor type choice (fitting group, per-channel fallback, keep list),
 * calibration activations as clipping weights, kvant.ptq.* metadata. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/ptq.h"
#include "kernels/ptq.h"
#include "model/model.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* 2-D matrices and 3-D expert stacks (rows over ne1 x ne2), never norms or
 * the experts' router, as llama.cpp's quantizer chooses */
bool ptq_is_quantizable(const char *name, int n_dims) {
    return (n_dims == 2 || n_dims == 3) && ends_with(name, "weight") && !strstr(name, "_norm.weight") &&
           !strstr(name, "ffn_gate_inp.weight");
}

/* name contains one of the comma-separated substrings of list */
static bool in_list(const char *list, const char *name) {
    if (!list) return false;
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0 && n < 128) {
            char pat[128];
            memcpy(pat, p, n);
            pat[n] = 0;
            if (strstr(name, pat)) return true;
        }
        if (!e) break;
        p = e + 1;
    }
    return false;
}

/* bits for `name` from a "SUBSTR=B,..." list, or dflt */
static int bits_for(const char *list, const char *name, int dflt) {
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ','), *eq = strchr(p, '=');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (eq && (!e || eq < e) && eq > p && (size_t)(eq - p) < 128) {
            char pat[128];
            memcpy(pat, p, (size_t)(eq - p));
            pat[eq - p] = 0;
            const int b = atoi(eq + 1);
            if (strstr(name, pat) && b >= 2 && b <= 8) return b;
        }
        p += n + (e ? 1 : 0);
    }
    return dflt;
}

static void append(char *buf, size_t cap, const char *name, const char *type) {
    size_t len = strlen(buf);
    if (len + strlen(name) + strlen(type) + 3 >= cap) return;
    snprintf(buf + len, cap - len, "%s%s=%s", len ? "," : "", name, type);
}

static kvant_code add_tensor_(gguf_writer *w, const ptq_params *p, const char *name, int n_dims, const int64_t *ne,
                              const float *f32, const float *imp, const double *H, ptq_report *r, kvant_status *st) {
    int64_t rows = 1;
    for (int j = 1; j < n_dims; j++) rows *= ne[j];
    const int64_t cols = ne[0], n = rows * cols;
    char note[256] = "";
    int type = KT_F32;
    bool quant = false;
    if (ptq_is_quantizable(name, n_dims)) {
        if (in_list(p->keep, name)) {
            type = KT_F16;
            snprintf(note, sizeof note, "kept F16 (--keep)");
            if (r) { r->n_kept++; append(r->kept_names, sizeof r->kept_names, name, "F16"); }
        } else {
            ptq_spec used, want = p->spec;
            want.bits = bits_for(p->tensor_bits, name, want.bits);
            type = ptq_storage_type(&want, cols, &used, note, sizeof note);
            if (type < 0) return core_fail(st, KVANT_ERR_ARG, "no storage type for this scheme (group sizes: 32, 64, 128)");
            if (note[0] && used.gran == PTQ_CHANNEL && p->fallback != PTQ_FALLBACK_CHANNEL) {
                type = p->fallback == PTQ_FALLBACK_F16 ? KT_F16 : KT_F32;
                const size_t nl = strlen(note);
                snprintf(note + nl, sizeof note - nl, "; kept %s instead", kern_type_name(type));
                if (r) { r->n_kept++; append(r->kept_names, sizeof r->kept_names, name, kern_type_name(type)); }
            } else
                quant = true;
            if (note[0] && r) {
                r->n_fallback++;
                append(r->fallback_names, sizeof r->fallback_names, name, kern_type_name(type));
            }
        }
    }
    const size_t bytes = kern_row_bytes(type, cols) * (size_t)rows;
    void *buf = type == KT_F32 ? NULL : malloc(bytes ? bytes : 1);
    if (type != KT_F32 && !buf) return core_fail(st, KVANT_ERR_NOMEM, "out of memory at tensor '%s'", name);
    kvant_code rc = KVANT_OK;
    if (buf) {
        ptq_spec ps = p->spec;
        ps.bits = bits_for(p->tensor_bits, name, ps.bits);
        rc = H && quant ? ptq_gptq_tensor(&ps, type, f32, rows, cols, H, buf, st)
                        : ptq_quantize_tensor(&ps, type, f32, rows, cols, imp, buf, st);
    }
    if (!rc) rc = gguf_writer_add_tensor(w, name, type, n_dims, ne, buf ? buf : f32, st);
    free(buf);
    if (rc) return rc;
    if (r) {
        r->n_weights += n;
        r->bytes += bytes;
        if (quant) {
            r->n_quantized++;
            r->n_quant_weights += n;
            r->quant_bytes += bytes;
        }
        r->bpw = r->n_weights ? 8.0 * (double)r->bytes / (double)r->n_weights : 0;
        r->quant_bpw = r->n_quant_weights ? 8.0 * (double)r->quant_bytes / (double)r->n_quant_weights : 0;
    }
    if (!p->quiet)
        fprintf(stderr, "  %-28s %-12s %8.3f bpw%s%s%s\n", name, kern_type_name(type), 8.0 * (double)bytes / (double)n,
                H && quant ? "  (GPTQ)" : imp ? "  (calibrated)" : "", note[0] ? "  note: " : "", note);
    return KVANT_OK;
}

kvant_code ptq_add_tensor(gguf_writer *w, const ptq_params *p, const char *name, int n_dims, const int64_t *ne,
                          const float *f32, const float *imp, ptq_report *r, kvant_status *st) {
    return add_tensor_(w, p, name, n_dims, ne, f32, imp, NULL, r, st);
}

void ptq_add_metadata(gguf_writer *w, const ptq_params *p, const ptq_report *r) {
    const ptq_spec *s = &p->spec;
    gguf_writer_add_str(w, "kvant.ptq.scheme", s->scheme == PTQ_ABSMAX ? "absmax" : "zeropoint");
    gguf_writer_add_u32(w, "kvant.ptq.bits", (uint32_t)s->bits);
    gguf_writer_add_str(w, "kvant.ptq.granularity",
                        s->gran == PTQ_TENSOR ? "tensor" : s->gran == PTQ_CHANNEL ? "channel" : "group");
    if (s->gran == PTQ_GROUP) gguf_writer_add_u32(w, "kvant.ptq.group_size", (uint32_t)s->group);
    gguf_writer_add_str(w, "kvant.ptq.clip", s->clip == PTQ_CLIP_MSE ? "mse" : "none");
    if (p->calib_path) gguf_writer_add_str(w, "kvant.ptq.calibration", p->calib_path);
    if (p->gptq) gguf_writer_add_bool(w, "kvant.ptq.gptq", true);
    if (p->tensor_bits) gguf_writer_add_str(w, "kvant.ptq.tensor_bits", p->tensor_bits);
    gguf_writer_add_str(w, "kvant.ptq.fallback",
                        p->fallback == PTQ_FALLBACK_CHANNEL ? "channel" : p->fallback == PTQ_FALLBACK_F16 ? "f16" : "f32");
    if (r) {
        /* tensors kept at higher precision, and those stored other than asked (name=TYPE,...) */
        gguf_writer_add_str(w, "kvant.ptq.kept", r->kept_names);
        gguf_writer_add_str(w, "kvant.ptq.fallback_tensors", r->fallback_names);
        gguf_writer_add_f32(w, "kvant.ptq.bits_per_weight", (float)r->bpw);
    }
}

/* ---- calibration: E[x_j^2] at every linear layer's input ------------------------- */
typedef struct {
    int n_layers, C, F;
    double *sum;     /* [(n_layers * 4 + 1)] slots of max(C, F) columns */
    int64_t *count;  /* tokens per slot */
    int width;
    double *xtx;     /* GPTQ: per slot, width x width sums of x x^T (NULL: off) */
} calib;

/* slot of a matmul input: wq/wk/wv share 0, wo 1, gate/up 2, down 3; output last */
static int calib_slot(const calib *c, int layer, model_mm_id mm) {
    if (mm == MODEL_MM_OUTPUT) return c->n_layers * 4;
    const int k = mm <= MODEL_MM_WV ? 0 : mm == MODEL_MM_WO ? 1 : mm <= MODEL_MM_UP ? 2 : 3;
    return layer * 4 + k;
}

static void calib_tap(void *user, int layer, model_mm_id mm, const float *x, int T, int cols) {
    calib *c = user;
    if (cols > c->width || layer >= c->n_layers) return;
    const int s = calib_slot(c, layer, mm);
    double *acc = c->sum + (size_t)s * c->width;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < cols; j++) acc[j] += (double)x[(size_t)t * cols + j] * x[(size_t)t * cols + j];
    c->count[s] += T;
    if (c->xtx) {
        double *h = c->xtx + (size_t)s * c->width * c->width;
        for (int t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * cols;
            for (int i = 0; i < cols; i++) {
                const double xi = xt[i];
                double *hi = h + (size_t)i * c->width;
                for (int j = i; j < cols; j++) hi[j] += xi * xt[j]; /* upper triangle; mirrored on use */
            }
        }
    }
}

/* the slot for a tensor name, or -1 */
static int calib_slot_for(const calib *c, const char *name, bool tied) {
    int l;
    char what[64];
    if (sscanf(name, "blk.%d.%63[^.]", &l, what) == 2 && l >= 0 && l < c->n_layers) {
        if (!strcmp(what, "attn_q") || !strcmp(what, "attn_k") || !strcmp(what, "attn_v")) return l * 4;
        if (!strcmp(what, "attn_output")) return l * 4 + 1;
        if (!strcmp(what, "ffn_gate") || !strcmp(what, "ffn_up")) return l * 4 + 2;
        if (!strcmp(what, "ffn_down")) return l * 4 + 3;
        return -1;
    }
    if (!strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight"))) return c->n_layers * 4;
    return -1;
}

/* Runs up to n_tokens of the text through the model in chunks and
 * accumulates the per-column mean squares. */
static kvant_code calib_run(const char *model_path, const ptq_params *p, calib *c, bool *tied, kvant_status *st) {
    model *m = model_open(model_path, NULL, p->n_threads, st);
    if (!m) return st->code;
    /* the calibration slots are the seven separate matrices of a dense layer */
    if (model_require(m, MODEL_FEAT_EXPERTS | MODEL_FEAT_FUSED, "PTQ calibration (--calib, --gptq)", st)) {
        model_close(m);
        return st->code;
    }
    const int C = m->cfg.dim, F = m->cfg.hidden_dim;
    *tied = m->tied_output;
    c->n_layers = m->cfg.n_layers;
    c->C = C;
    c->F = F;
    c->width = C > F ? C : F;
    const int n_slots = c->n_layers * 4 + 1;
    c->sum = calloc((size_t)n_slots * c->width, sizeof *c->sum);
    c->count = calloc((size_t)n_slots, sizeof *c->count);
    if (p->gptq) {
        if (c->width > 4096) {
            model_close(m);
            return core_fail(st, KVANT_ERR_UNSUPPORTED, "GPTQ: layer inputs of %d columns are too wide (4096 at most)", c->width);
        }
        c->xtx = calloc((size_t)n_slots * c->width * c->width, sizeof *c->xtx);
        if (!c->xtx) { model_close(m); return core_fail(st, KVANT_ERR_NOMEM, "GPTQ: out of memory for the Hessians"); }
    }
    size_t len = 0;
    char *text = c->sum && c->count ? core_read_file(p->calib_path, &len, st) : NULL;
    kvant_code rc = text ? KVANT_OK : (c->sum && c->count ? st->code : core_fail(st, KVANT_ERR_NOMEM, "out of memory"));
    const int want = p->calib_tokens > 0 ? p->calib_tokens : 16384;
    int32_t *tokens = NULL;
    int nt = 0;
    if (!rc) {
        /* a prefix of the text long enough for `want` tokens (4 bytes per token is ample) */
        size_t use = len < (size_t)want * 8 ? len : (size_t)want * 8;
        tokens = malloc(((size_t)use + 2) * sizeof *tokens);
        nt = tokens ? tok_encode(m->tok, text, use, true, false, tokens, (int)use + 2) : -1;
        if (nt < -1) { /* byte fallback can give more tokens than bytes: -(needed) */
            free(tokens);
            tokens = malloc((size_t)-nt * sizeof *tokens);
            nt = tokens ? tok_encode(m->tok, text, use, true, false, tokens, -nt) : -1;
        }
        if (nt < 2) rc = core_fail(st, KVANT_ERR_ARG, "calibration text %s gives no tokens", p->calib_path);
        if (nt > want) nt = want;
    }
    const int chunk = m->cfg.n_ctx_train < 512 ? m->cfg.n_ctx_train : 512;
    kv_store *kv = rc ? NULL : kv_contiguous_new(m->cfg.n_layers, chunk, m->cfg.n_kv_heads * m->cfg.head_dim, KT_F32, st);
    model_work *w = kv ? model_work_new(m, 64, chunk, MODEL_ATTN_FLASH, st) : NULL;
    if (!rc && (!kv || !w)) rc = st->code;
    /* all logits, so that the classifier (output.weight) sees every token */
    float *logits = rc ? NULL : malloc((size_t)chunk * (size_t)m->cfg.vocab_size * sizeof *logits);
    if (!rc && !logits) rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    if (!rc) {
        w->tap = calib_tap;
        w->hook_user = c;
        for (int i = 0; i < nt && !rc; i += chunk) {
            kv_clear(kv);
            const int n = nt - i < chunk ? nt - i : chunk;
            rc = model_forward(m, w, kv, tokens + i, n, logits, true, st);
        }
        if (!rc && !p->quiet) fprintf(stderr, "calibration: %d tokens of %s\n", nt, p->calib_path);
    }
    free(logits);
    model_work_free(w);
    kv_free(kv);
    free(tokens);
    free(text);
    model_close(m);
    return rc;
}

/* per-column importance for a tensor of `cols` columns from slot s: the mean
 * square plus 1% of its average, so no column is ignored entirely */
static void calib_imp(const calib *c, int s, int cols, float *imp) {
    double mean = 0.0;
    const double *acc = c->sum + (size_t)s * c->width;
    const double cnt = c->count[s] > 0 ? (double)c->count[s] : 1.0;
    for (int j = 0; j < cols; j++) mean += acc[j] / cnt;
    mean /= cols;
    for (int j = 0; j < cols; j++) imp[j] = (float)(acc[j] / cnt + 0.01 * mean + 1e-30);
}

/* ---- whole files ------------------------------------------------------------------- */
kvant_code ptq_quantize_file(const char *in_path, const char *out_path, const ptq_params *p, ptq_report *r_out,
                             kvant_status *st) {
    if (!ptq_spec_valid(&p->spec)) return core_fail(st, KVANT_ERR_ARG, "invalid PTQ scheme");
    ptq_report r;
    memset(&r, 0, sizeof r);
    const double t0 = core_time_ms();
    calib c = {0};
    bool tied = false;
    if (p->calib_path) {
        kvant_code rc = calib_run(in_path, p, &c, &tied, st);
        if (rc) { free(c.sum); free(c.count); free(c.xtx); return rc; }
    }
    gguf_ctx *g = gguf_open(in_path, st);
    if (!g) { free(c.sum); free(c.count); free(c.xtx); return st->code; }
    kvant_code rc = KVANT_OK;
    if (!gguf_find(g, "general.architecture") || gguf_n_tensors(g) == 0)
        rc = core_fail(st, KVANT_ERR_FORMAT, "%s: not a model file (no architecture or no tensors)", in_path);
    gguf_writer *w = rc ? NULL : gguf_writer_new();
    if (!rc && !w) rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        if (!strcmp(key, "general.file_type") || !strcmp(key, "general.alignment") || !strncmp(key, "kvant.ptq.", 10))
            continue;
        gguf_writer_add_value(w, key, gguf_kv_value(g, i));
    }
    char name[64];
    if (!rc && !p->quiet)
        fprintf(stderr, "quantizing %s -> %s: %s\n", in_path, out_path, ptq_spec_name(&p->spec, name, sizeof name));
    float *f32 = NULL, *imp = NULL;
    size_t cap = 0, imp_cap = 0;
    for (int64_t i = 0; !rc && i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const kern_type_traits *tt = kern_type_get(t->type);
        const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3], n = rows * t->ne[0];
        if (!tt->to_float) { rc = core_fail(st, KVANT_ERR_UNSUPPORTED, "tensor '%s' is %s, which kvant cannot convert", t->name, tt->name); break; }
        if ((size_t)n > cap) {
            free(f32);
            f32 = malloc((size_t)n * sizeof *f32);
            cap = (size_t)n;
            if (!f32) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory at tensor '%s'", t->name); break; }
        }
        kern_rows_to_float(t->type, t->data, rows, t->ne[0], f32);
        const int slot = c.sum ? calib_slot_for(&c, t->name, tied) : -1;
        const float *ip = NULL;
        if (slot >= 0 && c.count[slot] > 0 && t->n_dims == 2 && t->ne[0] <= c.width) {
            if ((size_t)t->ne[0] > imp_cap) { free(imp); imp = malloc((size_t)t->ne[0] * sizeof *imp); imp_cap = (size_t)t->ne[0]; }
            if (imp) { calib_imp(&c, slot, (int)t->ne[0], imp); ip = imp; }
        }
        double *H = NULL;
        if (ip && c.xtx) { /* the slot's x x^T for this tensor's columns, mirrored, per token */
            const int64_t K = t->ne[0];
            H = malloc((size_t)(K * K) * sizeof *H);
            if (!H) { rc = core_fail(st, KVANT_ERR_NOMEM, "out of memory"); break; }
            const double *src = c.xtx + (size_t)slot * c.width * c.width;
            const double cnt = c.count[slot] > 0 ? (double)c.count[slot] : 1.0;
            for (int64_t i2 = 0; i2 < K; i2++)
                for (int64_t j2 = i2; j2 < K; j2++)
                    H[i2 * K + j2] = H[j2 * K + i2] = src[(size_t)i2 * c.width + j2] / cnt;
        }
        rc = add_tensor_(w, p, t->name, t->n_dims, t->ne, f32, ip, H, &r, st);
        free(H);
    }
    free(f32);
    free(imp);
    if (!rc) {
        ptq_add_metadata(w, p, &r);
        rc = gguf_writer_write_file(w, out_path, st);
    }
    r.seconds = (core_time_ms() - t0) / 1e3;
    if (!rc && !p->quiet)
        fprintf(stderr, "wrote %s: %.3f bits/weight over all tensors (%.3f over the %d quantized matrices), "
                "%d fallback(s), %d kept, %.1f s\n", out_path, r.bpw, r.quant_bpw, r.n_quantized, r.n_fallback,
                r.n_kept, r.seconds);
    gguf_writer_free(w);
    gguf_close(g);
    free(c.sum);
    free(c.count);
    free(c.xtx);
    if (r_out) *r_out = r;
    return rc;
}
