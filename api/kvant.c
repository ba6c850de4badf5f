/* kvant.c - the public API (include/kvant*.h) over the modules. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "kernels/types.h"
#include "kv/paged.h"
#include "model/model.h"
#include "sample/sample.h"

#ifndef KVANT_VERSION
#error "KVANT_VERSION comes from project(kvant VERSION ...) in CMakeLists.txt"
#endif
#define SEQ_MAX_BATCH 512 /* tokens per forward chunk; longer prompts run in chunks */


const char *kvant_version(void) { return KVANT_VERSION; }
int kvant_default_threads(void) { return core_cpu_count(); }
double kvant_time_ms(void) { return core_time_ms(); }
const char *kvant_kernel_tier(void) { return kern_tier_name(kern_active_tier()); }
const char *kvant_cpu_report(void) { return kern_cpu_report(); }

kvant_model *kvant_model_open(const char *path, const kvant_model_params *p, kvant_status *st) {
    kvant_model *km = calloc(1, sizeof *km);
    if (!km) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&km->gv_mu, NULL);
    km->m = model_open(path, p ? p->tokenizer_path : NULL, p ? p->n_threads : 0, st);
    if (!km->m) {
        pthread_mutex_destroy(&km->gv_mu);
        free(km);
        return NULL;
    }
    if (model_repack(km->m, !(p && p->no_repack), st) != KVANT_OK) {
        kvant_model_free(km);
        return NULL;
    }
    core_ok(st);
    return km;
}

void kvant_model_free(kvant_model *km) {
    if (!km) return;
    model_close(km->m);
    api_grammar_vocab_free(km);
    pthread_mutex_destroy(&km->gv_mu);
    free(km);
}

void kvant_model_rest_threads(kvant_model *km) {
    if (km) core_pool_rest(km->m->pool);
}

void kvant_model_get_info(const kvant_model *km, kvant_model_info *o) {
    const model *m = km->m;
    const model_config *c = &m->cfg;
    memset(o, 0, sizeof *o);
    o->arch = c->arch;
    o->name = m->name;
    o->file_format = m->file_format;
    o->dim = c->dim;
    o->hidden_dim = c->hidden_dim;
    o->n_layers = c->n_layers;
    o->n_heads = c->n_heads;
    o->n_kv_heads = c->n_kv_heads;
    o->head_dim = c->head_dim;
    o->vocab_size = c->vocab_size;
    o->n_ctx_train = c->n_ctx_train;
    o->norm_eps = c->norm_eps;
    o->rope_base = c->rope_base;
    o->rope_dim = c->rope_dim;
    o->rope_neox = c->rope_neox;
    o->tied_output = m->tied_output;
    for (int i = 0; i < m->n_tensors; i++) {
        const model_tensor *t = &m->tensors[i];
        o->n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        o->weight_bytes += t->nbytes;
    }
    o->bos_id = tok_bos(m->tok);
    o->eos_id = tok_eos(m->tok);
    o->tokenizer_model = tok_get_kind(m->tok) == TOK_GPT2 ? "gpt2" : "llama";
    o->n_expert = c->n_expert, o->n_expert_used = c->n_expert_used, o->expert_hidden = c->expert_hidden;
    o->swa_window = c->swa_window;
    for (int l = 0; l < c->n_layers; l++) o->n_swa_layers += m->layers[l].swa_window > 0;
    o->rope_base_swa = c->rope_base_swa;
    o->attn_softcap = c->attn_softcap, o->final_softcap = c->final_softcap;
    o->embd_scale = c->embd_scale;
    o->rope_freqs = m->rope_freqs != NULL;
    o->qkv_bias = c->n_layers > 0 && m->layers[0].bq;
    o->qk_norm = c->n_layers > 0 && m->layers[0].q_norm;
    o->post_norms = c->n_layers > 0 && m->layers[0].post_attn_norm;
    o->activation = c->act == MODEL_ACT_GELU_TANH ? "gelu_tanh" : "silu";
    o->pooling = c->pooling == MODEL_POOL_CLS ? "cls" : c->pooling == MODEL_POOL_LAST ? "last" : "mean";
}

int kvant_model_n_tensors(const kvant_model *km) { return km->m->n_tensors; }

void kvant_model_tensor(const kvant_model *km, int i, kvant_tensor_info *o) {
    const model_tensor *t = &km->m->tensors[i];
    o->name = t->name;
    o->type_name = kern_type_name(t->type);
    o->n_dims = t->n_dims;
    memcpy(o->ne, t->ne, sizeof o->ne);
    o->nbytes = t->nbytes;
}

int kvant_tokenize(const kvant_model *km, const char *text, size_t len, bool add_bos, int32_t *tokens, int max) {
    return tok_encode(km->m->tok, text, len, add_bos, false, tokens, max);
}

int kvant_tokenize_ex(const kvant_model *km, const char *text, size_t len, bool add_bos, bool parse_special,
                      int32_t *tokens, int max) {
    return tok_encode(km->m->tok, text ? text : "", text ? len : 0, add_bos, parse_special, tokens, max < 0 ? 0 : max);
}

int32_t *kvant_tokenize_all(const kvant_model *km, const char *text, size_t len, bool add_bos, int *n,
                            kvant_status *st) {
    *n = 0;
    if (len > (size_t)INT32_MAX / 4) {
        core_fail(st, KVANT_ERR_ARG, "text of %zu bytes is too long to tokenize at once", len);
        return NULL;
    }
    int cap = (int)len + 16;
    for (int tries = 0; tries < 2; tries++) {
        int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
        const int got = t ? tok_encode(km->m->tok, text, len, add_bos, false, t, cap) : INT_MIN;
        if (got >= 0) {
            *n = got;
            return t;
        }
        free(t);
        if (got == INT_MIN) break;
        cap = -got; /* the count it needs */
    }
    core_fail(st, KVANT_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
    return NULL;
}

bool kvant_token_is_eog(const kvant_model *km, int32_t token) { return tok_is_eog(km->m->tok, token); }

int kvant_token_to_piece(const kvant_model *km, int32_t prev, int32_t token, char *buf, int cap) {
    if (token < 0 || token >= tok_n_vocab(km->m->tok)) return 0;
    return tok_decode_piece(km->m->tok, prev, token, buf, cap);
}

int kvant_token_to_piece_ex(const kvant_model *km, int32_t prev, int32_t token, bool special, char *buf, int cap) {
    const tok *t = km->m->tok;
    if (token < 0 || token >= tok_n_vocab(t)) return 0;
    const int type = tok_token_type(t, token); /* GGUF types: 2 unknown, 3 control */
    if (!special || (type != 2 && type != 3) || cap <= 0) return kvant_token_to_piece(km, prev, token, buf, cap);
    const int n = tok_piece(t, token, true, buf, cap);
    if (n >= 0) return n;
    memcpy(buf, tok_text(t, token), (size_t)cap); /* longer than cap: cut, as kvant_token_to_piece does */
    return cap;
}

kvant_seq_params kvant_seq_default(void) {
    return (kvant_seq_params){.n_ctx = 0, .attn = KVANT_ATTN_FLASH, .kv = KVANT_CACHE_PAGED, .kv_type = KVANT_KV_F16};
}

/* the kern_type of a public KV type, -1 for a value out of range */
int api_kv_type(kvant_kv_type t) {
    switch (t) {
    case KVANT_KV_F16: return KT_F16;
    case KVANT_KV_F32: return KT_F32;
    case KVANT_KV_Q8_0: return KT_Q8_0;
    }
    return -1;
}

kvant_kv_pool *kvant_kv_pool_new(kvant_model *km, const kvant_kv_pool_params *p, kvant_status *st) {
    const model_config *c = &km->m->cfg;
    const int type = api_kv_type(p->kv_type);
    if (type < 0) {
        core_fail(st, KVANT_ERR_ARG, "KV cache type %d is none of kvant_kv_type", (int)p->kv_type);
        return NULL;
    }
    kvant_kv_pool *kp = calloc(1, sizeof *kp);
    if (!kp) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    kp->m = km->m;
    kp->max_ctx = p->max_ctx > 0 ? p->max_ctx : c->n_ctx_train;
    const kv_pool_params pp = {.n_layers = c->n_layers, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
                               .type = type, .block_size = p->block_size,
                               .n_blocks = p->mem_mib > 0 ? 0 : p->n_blocks,
                               .budget_bytes = (uint64_t)(p->mem_mib * 1048576.0), .max_ctx = kp->max_ctx,
                               .max_seqs = p->max_seqs, .prefix_cache = p->prefix_cache};
    if (model_kv_pools_new(km->m, &pp, SEQ_MAX_BATCH, &kp->pool, &kp->lpool, st)) {
        free(kp);
        return NULL;
    }
    return kp;
}

void kvant_kv_pool_free(kvant_kv_pool *kp) {
    if (!kp) return;
    kv_pool_free(kp->pool);
    kv_pool_free(kp->lpool);
    free(kp);
}

kvant_seq *kvant_seq_new_ex(kvant_model *km, const kvant_seq_params *p, kvant_status *st) {
    const model *m = km->m;
    const model_config *c = &m->cfg;
    const int kv_dim = c->n_kv_heads * c->head_dim;
    const int type = api_kv_type(p->kv_type);
    const bool naive = p->attn == KVANT_ATTN_NAIVE, paged = p->kv == KVANT_CACHE_PAGED;
    if (type < 0 || (p->attn != KVANT_ATTN_FLASH && !naive) || (!paged && p->kv != KVANT_CACHE_CONTIGUOUS)) {
        core_fail(st, KVANT_ERR_ARG, "KV cache settings out of range (kv_type %d, attn %d, kv %d)", (int)p->kv_type,
                  (int)p->attn, (int)p->kv);
        return NULL;
    }
    if (p->sink_stats > 0 && !naive) {
        core_fail(st, KVANT_ERR_ARG, "attention-sink statistics need the naive attention");
        return NULL;
    }
    kvant_seq *s = calloc(1, sizeof *s);
    if (!s) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->m = m;
    int n_ctx = p->n_ctx > 0 ? p->n_ctx : c->n_ctx_train;
    s->params = *p;
    if (p->pool) {
        s->kv = model_kv_store_new(m, p->pool->pool, p->pool->lpool, SEQ_MAX_BATCH, false, st);
        n_ctx = p->pool->max_ctx;
    } else if (p->window > 0) {
        s->kv = kv_streaming_new(c->n_layers, p->sink, p->window, kv_dim, type, st);
        n_ctx = p->sink + p->window;
    } else if (paged) {
        /* a private pool just large enough for n_ctx tokens */
        const int B = p->block_size > 0 ? p->block_size : KV_BLOCK_SIZE_DEFAULT;
        const kv_pool_params pp = {.n_layers = c->n_layers, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
                                   .type = type, .block_size = B,
                                   .n_blocks = p->kv_mem_mib > 0 ? 0 : (n_ctx + B - 1) / B,
                                   .budget_bytes = (uint64_t)(p->kv_mem_mib * 1048576.0),
                                   .max_ctx = n_ctx, .max_seqs = 1, .prefix_cache = false};
        kv_pool *pool, *local;
        if (!model_kv_pools_new(m, &pp, SEQ_MAX_BATCH, &pool, &local, st) &&
            !(s->kv = model_kv_store_new(m, pool, local, SEQ_MAX_BATCH, true, st)))
            kv_pool_free(pool), kv_pool_free(local);
    } else {
        s->kv = kv_contiguous_new(c->n_layers, n_ctx, kv_dim, type, st);
    }
    if (s->kv) s->work = model_work_new(m, SEQ_MAX_BATCH, n_ctx, naive ? MODEL_ATTN_NAIVE : MODEL_ATTN_FLASH, st);
    if (!s->kv || !s->work) {
        kvant_seq_free(s);
        return NULL;
    }
    s->work->sink_n = p->sink_stats;
    core_ok(st);
    return s;
}

kvant_seq *kvant_seq_new(kvant_model *km, int n_ctx, kvant_status *st) {
    kvant_seq_params p = kvant_seq_default();
    p.n_ctx = n_ctx;
    return kvant_seq_new_ex(km, &p, st);
}

void kvant_seq_free(kvant_seq *s) {
    if (!s) return;
    kv_free(s->kv);
    model_work_free(s->work);
    free(s);
}

void kvant_seq_reset(kvant_seq *s) { kv_clear(s->kv); }
int kvant_seq_pos(const kvant_seq *s) { return s->kv->n_pos; }
int kvant_seq_truncate(kvant_seq *s, int n) { return n < 0 ? -1 : kv_truncate(s->kv, n); }
size_t kvant_seq_kv_bytes(const kvant_seq *s) { return kv_bytes_used(s->kv); }
size_t kvant_seq_kv_capacity_bytes(const kvant_seq *s) { return kv_reserved_bytes(s->kv); }
int64_t kvant_seq_evicted(const kvant_seq *s) { return s->kv->evicted; }

int kvant_seq_prefill_cached(kvant_seq *s, const int32_t *tokens, int n) {
    if (s->kv->n_pos != 0) return 0;
    return kv_prefix_match_tokens(s->kv, tokens, n);
}

kvant_seq *kvant_seq_fork(kvant_seq *s, kvant_status *st) {
    if (!s->kv->ops->fork) {
        core_fail(st, KVANT_ERR_UNSUPPORTED, "this KV cache cannot fork (use a paged cache)");
        return NULL;
    }
    kvant_seq *f = calloc(1, sizeof *f);
    if (!f) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    f->m = s->m;
    f->params = s->params;
    f->kv = s->kv->ops->fork(s->kv, st);
    if (f->kv)
        f->work = model_work_new(s->m, s->work->max_T, s->work->n_ctx, s->work->attn, st);
    if (!f->kv || !f->work) {
        kvant_seq_free(f);
        return NULL;
    }
    return f;
}

void kvant_seq_kv_stats(const kvant_seq *s, kvant_kv_stats *o) {
    memset(o, 0, sizeof *o);
    o->seq_bytes = kv_bytes_used(s->kv);
    kv_pool *pool = kv_paged_store_pool(s->kv);
    if (!pool) {
        o->bytes_total = kv_reserved_bytes(s->kv);
        o->bytes_used = o->seq_bytes;
        o->frag_tokens = s->kv->capacity - s->kv->n_pos;
        return;
    }
    kv_pool_stats ps;
    kv_pool_stats_get(pool, &ps);
    kv_pool *local = kv_paged_store_local_pool(s->kv);
    if (local) { /* the sliding-window layers' pool: its blocks are other blocks (fewer layers) */
        kv_pool_stats ls;
        kv_pool_stats_get(local, &ls);
        o->swa_blocks_total = ls.blocks_total;
        o->swa_blocks_used = ls.blocks_used;
        o->swa_bytes_total = ls.bytes_total;
        o->swa_bytes_used = ls.bytes_used;
    }
    o->paged = true;
    o->block_size = ps.block_size;
    o->blocks_total = ps.blocks_total;
    o->blocks_used = ps.blocks_used;
    o->blocks_cached = ps.blocks_cached;
    o->blocks_free = ps.blocks_free;
    o->bytes_per_block = ps.bytes_per_block;
    o->bytes_total = ps.bytes_total + o->swa_bytes_total;
    o->bytes_used = ps.bytes_used + o->swa_bytes_used;
    o->frag_tokens = ps.frag_tokens;
    o->prefix_hit_tokens = ps.prefix_hit_tokens;
    o->cow_copies = ps.cow_copies;
}

int kvant_seq_sink_stats(const kvant_seq *s, double *per_layer, int max_layers) {
    const int L = s->m->cfg.n_layers < max_layers ? s->m->cfg.n_layers : max_layers;
    for (int l = 0; l < L; l++)
        per_layer[l] = s->work->sink_queries ? s->work->sink_mass[l] / (double)s->work->sink_queries : 0.0;
    return L;
}

kvant_code kvant_forward(kvant_seq *s, const int32_t *tokens, int n, float *logits, bool all_logits,
                         kvant_status *st) {
    return model_forward(s->m, s->work, s->kv, tokens, n, logits, all_logits, st);
}

kvant_code kvant_embed(kvant_seq *s, const int32_t *tokens, int n, float *out, kvant_status *st) {
    kv_clear(s->kv);
    return model_embed(s->m, s->work, s->kv, tokens, n, out, st);
}

kvant_sampling kvant_sampling_default(void) {
    return (kvant_sampling){.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                            .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = 0};
}

bool api_sample_params(const kvant_sampling *p, sample_params *out, sample_bias **bias, kvant_status *st) {
    *bias = NULL;
    *out = (sample_params){.temperature = p->temperature, .top_k = p->top_k, .top_p = p->top_p, .min_p = p->min_p,
                           .repeat_penalty = p->repeat_penalty, .repeat_last_n = p->repeat_last_n, .seed = p->seed,
                           .presence_penalty = p->presence_penalty, .frequency_penalty = p->frequency_penalty};
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return core_fail(st, KVANT_ERR_ARG, "n_logit_bias %d without a logit_bias array", p->n_logit_bias), false;
    if (p->n_logit_bias == 0) return true;
    if (!(*bias = malloc((size_t)p->n_logit_bias * sizeof **bias)))
        return core_fail(st, KVANT_ERR_NOMEM, "out of memory"), false;
    for (int i = 0; i < p->n_logit_bias; i++) (*bias)[i] = (sample_bias){p->logit_bias[i].token, p->logit_bias[i].bias};
    out->bias = *bias;
    out->n_bias = p->n_logit_bias;
    return true;
}

kvant_sampler *kvant_sampler_new(const kvant_sampling *p, int vocab_size, kvant_status *st) {
    sample_params sp;
    sample_bias *bias;
    if (!api_sample_params(p, &sp, &bias, st)) return NULL;
    kvant_sampler *ks = calloc(1, sizeof *ks);
    if (!ks) {
        free(bias);
        core_fail(st, KVANT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    ks->s = sampler_new(&sp, vocab_size, st); /* copies the bias */
    free(bias);
    if (!ks->s) {
        free(ks);
        return NULL;
    }
    return ks;
}

void kvant_sampler_free(kvant_sampler *ks) {
    if (!ks) return;
    sampler_free(ks->s);
    free(ks);
}

int32_t kvant_sampler_sample(kvant_sampler *ks, float *logits) {
    ks->sampled = true;
    return sampler_sample(ks->s, logits);
}

/* before the first sample: the prompt (see include/kvant_infer.h) */
void kvant_sampler_accept(kvant_sampler *ks, int32_t token) {
    (ks->sampled ? sampler_accept : sampler_accept_prompt)(ks->s, token);
}
