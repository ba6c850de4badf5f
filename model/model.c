/* model.c - open / close a model and validate its config. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/types.h"
#include "model/model.h"

model *model_open(const char *path, const char *tokenizer_path, int n_threads, kvant_status *st) {
    model *m = calloc(1, sizeof *m);
    if (!m) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (!path) { /* the built-in default model */
        size_t size;
        const uint8_t *data = model_builtin_gguf(&size);
        kvant_code rc = model_load_gguf_mem(m, data, size, MODEL_BUILTIN_NAME, st);
        if (rc == KVANT_OK && !(m->pool = core_pool_new(n_threads > 0 ? n_threads : core_cpu_count())))
            rc = core_fail(st, KVANT_ERR_NOMEM, "cannot start threads");
        if (rc != KVANT_OK) {
            model_close(m);
            return NULL;
        }
        return m;
    }
    /* choose the loader by the file's first four bytes */
    FILE *f = fopen(path, "rb");
    if (!f) {
        free(m);
        core_fail(st, KVANT_ERR_IO, "%s: cannot open", path);
        return NULL;
    }
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    kvant_code rc;
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) rc = model_load_gguf(m, path, st);
    else rc = model_load_llama2c(m, path, tokenizer_path, st);
    if (rc == KVANT_OK) {
        m->pool = core_pool_new(n_threads > 0 ? n_threads : core_cpu_count());
        if (!m->pool) rc = core_fail(st, KVANT_ERR_NOMEM, "cannot start threads");
    }
    if (rc != KVANT_OK) {
        model_close(m);
        return NULL;
    }
    return m;
}

void model_close(model *m) {
    if (!m) return;
    core_pool_free(m->pool);
    tok_free(m->tok);
    gguf_close(m->gguf);
    core_unmap(&m->map);
    free(m->owned);
    free(m->expert_mats);
    for (int i = 0; i < m->n_packed; i++) free(m->packed[i]);
    free(m->packed);
    free(m->layers);
    free(m->tensors);
    free(m);
}

void model_config_set_defaults(model_config *c) {
    if (!c->arch[0]) snprintf(c->arch, sizeof c->arch, "llama");
    c->rope_base_swa = c->rope_base;
    c->rope_scale = 1.0f;
    c->rope_mscale = 1.0f;
    c->expert_scale = 1.0f;
    c->act = MODEL_ACT_SILU;
    c->embd_scale = 1.0f;
    c->attn_scale = c->head_dim > 0 ? 1.0f / sqrtf((float)c->head_dim) : 1.0f;
}

/* Limits keep a hostile header from asking for absurd buffers: the largest
 * real llama models stay far inside them. */
kvant_code model_check_config(const model_config *c, const char *path, kvant_status *st) {
#define BAD(...) return core_fail(st, KVANT_ERR_FORMAT, __VA_ARGS__)
    if (c->dim <= 0 || c->dim > (1 << 16)) BAD("%s: embedding size %d out of range (1..65536)", path, c->dim);
    if (c->hidden_dim <= 0 || c->hidden_dim > (1 << 18)) BAD("%s: FFN size %d out of range", path, c->hidden_dim);
    if (c->n_layers <= 0 || c->n_layers > 1024) BAD("%s: layer count %d out of range (1..1024)", path, c->n_layers);
    if (c->n_heads <= 0 || c->n_heads > 1024) BAD("%s: head count %d out of range", path, c->n_heads);
    if (c->n_kv_heads <= 0 || c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads)
        BAD("%s: KV head count %d must divide the head count %d", path, c->n_kv_heads, c->n_heads);
    if (c->head_dim <= 0 || c->head_dim > 1024 || c->head_dim % 2)
        BAD("%s: head dimension %d out of range (even, 2..1024)", path, c->head_dim);
    if (c->rope_dim <= 0 || c->rope_dim > c->head_dim || c->rope_dim % 2)
        BAD("%s: rope dimension %d must be even and <= head dimension %d", path, c->rope_dim, c->head_dim);
    if (c->vocab_size <= 0 || c->vocab_size > (1 << 22)) BAD("%s: vocabulary size %d out of range", path, c->vocab_size);
    if (c->n_ctx_train <= 0 || c->n_ctx_train > (1 << 22)) BAD("%s: context length %d out of range", path, c->n_ctx_train);
    if (!(c->norm_eps > 0 && c->norm_eps < 1)) BAD("%s: RMSNorm epsilon %g out of range", path, c->norm_eps);
    if (!(c->rope_base > 1 && c->rope_base < 1e12f)) BAD("%s: rope base %g out of range", path, c->rope_base);
    if (!(c->rope_base_swa > 1 && c->rope_base_swa < 1e12f))
        BAD("%s: sliding-window rope base %g out of range", path, c->rope_base_swa);
    if (!(c->rope_scale > 0 && c->rope_scale <= 1)) BAD("%s: rope scale %g out of range (0, 1]", path, c->rope_scale);
    if (!(c->rope_mscale > 0 && c->rope_mscale < 100)) BAD("%s: rope attention factor %g out of range", path, c->rope_mscale);
    if (!(c->expert_scale > 0 && c->expert_scale < 1e6f)) BAD("%s: expert weights scale %g out of range", path, c->expert_scale);
    if (c->swa_window < 0) BAD("%s: sliding window %d out of range", path, c->swa_window);
    if (!(c->attn_scale > 0 && c->attn_scale < 1e3f)) BAD("%s: attention scale %g out of range", path, c->attn_scale);
    if (!(c->attn_softcap >= 0 && c->attn_softcap < 1e6f) || !(c->final_softcap >= 0 && c->final_softcap < 1e6f))
        BAD("%s: soft-capping values out of range", path);
    if (!(c->embd_scale > 0 && c->embd_scale < 1e6f)) BAD("%s: embedding scale %g out of range", path, c->embd_scale);
    if (c->n_expert < 0 || c->n_expert > 1024 || c->n_expert_used < 0 || c->n_expert_used > c->n_expert ||
        (c->n_expert > 0 && (c->n_expert_used < 1 || c->expert_hidden <= 0 || c->expert_hidden > (1 << 18))))
        BAD("%s: expert counts out of range (%d experts, %d used, width %d)", path, c->n_expert, c->n_expert_used,
            c->expert_hidden);
#undef BAD
    return KVANT_OK;
}

int model_layer_n_mats(const model_layer *L, int n_expert) {
    return n_expert > 0 ? 5 + 3 * n_expert : 7;
}

int model_layer_mats(model_layer *L, int n_expert, model_mat **out, int max) {
    model_mat *all[4 + 3 * 1024 + 3];
    int n = 0;
    all[n++] = &L->wq, all[n++] = &L->wk, all[n++] = &L->wv, all[n++] = &L->wo;
    if (n_expert > 0) {
        all[n++] = &L->router;
        for (int e = 0; e < n_expert && e < 1024; e++)
            all[n++] = &L->gate_exps[e], all[n++] = &L->up_exps[e], all[n++] = &L->down_exps[e];
    } else {
        all[n++] = &L->w_gate, all[n++] = &L->w_up, all[n++] = &L->w_down;
    }
    int k = 0;
    for (int i = 0; i < n && k < max; i++) out[k++] = all[i];
    return k;
}

unsigned model_features(const model *m) {
    const model_config *c = &m->cfg;
    unsigned f = 0;
    if (c->n_expert > 0) f |= MODEL_FEAT_EXPERTS;
    if (m->fused) f |= MODEL_FEAT_FUSED;
    if (c->act != MODEL_ACT_SILU) f |= MODEL_FEAT_GELU;
    if (c->embd_scale != 1.0f || c->attn_softcap > 0 || c->final_softcap > 0 ||
        fabsf(c->attn_scale * sqrtf((float)c->head_dim) - 1.0f) > 1e-6f)
        f |= MODEL_FEAT_SCALES;
    if (c->rope_neox || c->rope_dim != c->head_dim || m->rope_freqs || c->rope_scale != 1.0f || c->rope_mscale != 1.0f)
        f |= MODEL_FEAT_ROPE;
    if (c->n_heads * c->head_dim != c->dim) f |= MODEL_FEAT_WIDE_HEADS;
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *L = &m->layers[l];
        if (L->bq || L->bo) f |= MODEL_FEAT_BIAS;
        if (L->q_norm) f |= MODEL_FEAT_QK_NORM;
        if (L->post_attn_norm || L->post_ffn_norm) f |= MODEL_FEAT_POST_NORM;
        if (L->swa_window) f |= MODEL_FEAT_SWA;
        if (L->rope_base != c->rope_base) f |= MODEL_FEAT_ROPE;
    }
    return f;
}

kvant_code model_require(const model *m, unsigned refused, const char *command, kvant_status *st) {
    static const char *const names[] = {"routed experts (MoE)", "fused attn_qkv / ffn_up tensors",
                                        "attention biases", "q/k norms", "post-attention / post-FFN norms",
                                        "a GeGLU feed-forward", "embedding / attention scales or soft-caps",
                                        "sliding-window attention", "a RoPE other than llama's",
                                        "heads wider than the embedding"};
    const unsigned hit = model_features(m) & refused;
    if (!hit) return KVANT_OK;
    int b = 0;
    while (!(hit >> b & 1)) b++;
    return core_fail(st, KVANT_ERR_UNSUPPORTED, "%s does not support this %s model yet: it has %s", command,
                     m->cfg.arch, names[b]);
}

/* ---- the paged KV cache of a model ----------------------------------------------- */
static int n_local_layers(const model *m) {
    int n = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) n += m->layers[l].swa_window > 0;
    const char *env = getenv("KVANT_SWA_TRIM");
    return env && !strcmp(env, "0") ? 0 : n;
}

kvant_code model_kv_pools_new(const model *m, const kv_pool_params *base, int chunk, kv_pool **global, kv_pool **local,
                              kvant_status *st) {
    const model_config *c = &m->cfg;
    const int nl = n_local_layers(m), ng = c->n_layers - nl;
    *global = *local = NULL;
    kv_pool_params gp = *base, lp = *base;
    gp.n_layers = c->n_layers;
    const int B = base->block_size > 0 ? base->block_size : KV_BLOCK_SIZE_DEFAULT;
    /* a window that is not above a block gains nothing (and the prefix chain needs it) */
    if (nl > 0 && ng > 0 && c->swa_window > B) {
        /* a sequence holds window - 1 positions before its chunk, in at most per_seq blocks beyond the
         * chunk's; the chunks of one step share `chunk` tokens.  With a byte budget the local layers get
         * at most their share of it (nl / L): fewer blocks than that only means preemption sooner */
        const int seqs = base->max_seqs > 0 ? base->max_seqs : KV_MAX_SEQS_DEFAULT;
        const int64_t per_seq = (c->swa_window - 1 + B - 1) / B + 2, chunk_blocks = (chunk + B - 1) / B;
        int64_t want = seqs * per_seq + chunk_blocks;
        if (base->n_blocks <= 0) {
            const uint64_t stride = (2ull * nl * B * kern_row_bytes(base->type, (int64_t)base->n_kv_heads * base->head_dim) + 63) / 64 * 64;
            const int64_t share = (int64_t)(base->budget_bytes / c->n_layers * nl / stride);
            if (want > share) want = share > per_seq + chunk_blocks ? share : per_seq + chunk_blocks;
        }
        lp.n_layers = nl, lp.block_size = B, lp.budget_bytes = 0, lp.n_blocks = want;
        if (!(*local = kv_pool_new(&lp, st))) return st->code;
        gp.n_layers = ng;
        if (base->n_blocks <= 0) {
            kv_pool_stats ls;
            kv_pool_stats_get(*local, &ls);
            if (base->budget_bytes <= ls.bytes_total) {
                kv_pool_free(*local), *local = NULL;
                return core_fail(st, KVANT_ERR_ARG, "KV budget of %llu bytes is below the sliding-window layers' "
                                 "%zu bytes", (unsigned long long)base->budget_bytes, ls.bytes_total);
            }
            gp.budget_bytes = base->budget_bytes - ls.bytes_total;
        }
    }
    if (!(*global = kv_pool_new(&gp, st))) {
        kv_pool_free(*local), *local = NULL;
        return st->code;
    }
    return KVANT_OK;
}

kv_store *model_kv_store_new(const model *m, kv_pool *global, kv_pool *local, int chunk, bool own_pools,
                             kvant_status *st) {
    if (!local) return kv_paged_store_new(global, own_pools, st);
    bool is_local[1024];
    for (int l = 0; l < m->cfg.n_layers; l++) is_local[l] = m->layers[l].swa_window > 0;
    return kv_paged_store_new_swa(global, local, is_local, m->cfg.n_layers, m->cfg.swa_window, chunk, own_pools, st);
}
