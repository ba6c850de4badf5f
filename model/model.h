/* model/ - a llama-family model: config + weights (views into the mmap'd
 * file) + tokenizer, and its forward pass.  A model is immutable after
 * loading; everything a sequence changes lives in its kv_store and model_work.
 *
 * Dimension letters: T tokens in the batch, C = dim, F = hidden (FFN),
 * H / Hkv query / KV heads, D head dim, V vocabulary. */
#ifndef KVANT_MODEL_H
#define KVANT_MODEL_H

#include "core/core.h"
#include "format/gguf.h"
#include "kernels/w8a8.h"
#include "kv/kv.h"
#include "kv/paged.h"
#include "tok/tok.h"

/* What the families differ in (model/arch.c has one row per architecture;
 * the loader fills these from the row and the file's `{arch}.*` keys). */
typedef enum { MODEL_ACT_SILU, MODEL_ACT_GELU_TANH } model_act;   /* the GLU's gate activation */
/* embeddings' pooling ({arch}.pooling_type: 1 mean, 2 cls, 3 last; absent: mean) */
typedef enum { MODEL_POOL_MEAN = 0, MODEL_POOL_CLS, MODEL_POOL_LAST } model_pool;

typedef struct {
    int dim;          /* C */
    int hidden_dim;   /* F (dense FFN) */
    int n_layers;
    int n_heads;      /* H */
    int n_kv_heads;   /* Hkv: H for MHA, 1 for MQA, between for GQA */
    int head_dim;     /* D (H*D may differ from C: qwen3, gemma) */
    int vocab_size;   /* V */
    int n_ctx_train;
    int rope_dim;     /* dims rotated per head (<= D; phi3: partial rotary) */
    float rope_base;  /* global layers */
    float rope_base_swa;  /* sliding-window layers (gemma3's rope.freq_base_swa) */
    float rope_scale; /* linear RoPE scaling: angles x rope_scale (1 = none) */
    float rope_mscale;/* rotated dims x rope_mscale (rope.scaling.attn_factor; 1 = none) */
    bool rope_neox;
    float norm_eps;
    char arch[32];    /* general.architecture */
    model_act act;
    float embd_scale;     /* x = E[token] * embd_scale (gemma: sqrt(C)); 1 = none */
    float attn_scale;     /* scores = q.k * attn_scale (1/sqrt(D) unless the family says) */
    float attn_softcap;   /* scores = cap * tanh(scores / cap) (gemma2); 0 = none */
    float final_softcap;  /* logits likewise (gemma2); 0 = none */
    int swa_window;       /* sliding-window layers see the last swa_window positions; 0 = no SWA */
    int n_expert, n_expert_used;  /* MoE: 0 = dense */
    int expert_hidden;    /* F_e: each expert's FFN width */
    float expert_scale;   /* routed weights x expert_scale after renormalizing (1 = none) */
    model_pool pooling;   /* embeddings: how a sequence's final hidden states pool into one vector */
} model_config;

/* a weight matrix: `rows` rows of `cols` elements of `type` (ggml: ne[0] = cols) */
typedef struct {
    const void *data;
    int type;
    int64_t rows, cols;
    /* non-NULL: the same matrix repacked in groups of 8 rows (kernels/repack.h),
     * which the forward pass multiplies with; data stays valid for everything else */
    const void *packed;
    /* LLM_INT8 (kernels/w8a8.h): the outlier input columns kept in F16 (their
     * NAME.outlier_cols / NAME.outliers tensors, in the mapping); n 0 otherwise */
    kern_outliers outl;
} model_mat;

typedef struct {
    const float *attn_norm;   /* (C) */
    model_mat wq;             /* (H*D, C) */
    model_mat wk, wv;         /* (Hkv*D, C) */
    const float *bq, *bk, *bv;/* (H*D), (Hkv*D): biases (qwen2), NULL when absent */
    const float *q_norm, *k_norm; /* (D): RMSNorm of each head before RoPE (qwen3, gemma3), NULL when absent */
    model_mat wo;             /* (C, H*D) */
    const float *bo;          /* (C): output bias, or NULL */
    const float *post_attn_norm; /* (C): RMSNorm of the attention output before the residual (gemma), or NULL */
    const float *ffn_norm;    /* (C) */
    model_mat w_gate, w_up;   /* (F, C) dense FFN (phi3's fused ffn_up: two row views) */
    model_mat w_down;         /* (C, F) */
    const float *post_ffn_norm;  /* (C): likewise after the FFN (gemma), or NULL */
    /* MoE (n_expert > 0): the router and each expert's matrices, views into
     * the 3-D ffn_{gate,up,down}_exps tensors; w_gate/w_up/w_down unused */
    model_mat router;         /* (E, C) ffn_gate_inp */
    model_mat *gate_exps, *up_exps; /* [E] of (F_e, C) */
    model_mat *down_exps;     /* [E] of (C, F_e) */
    int swa_window;           /* 0: attends to every cached position; else the last swa_window */
    float rope_base;          /* this layer's RoPE base */
    float rope_scale;         /* and linear scaling */
} model_layer;

/* Every weight matrix of a layer (experts included), with its hook id:
 * what packing, compression and training walk instead of a list of seven.
 * Returns the count written (at most max; model_layer_n_mats() gives the
 * total).  Absent matrices (the dense FFN of an MoE layer) are skipped. */
int model_layer_n_mats(const model_layer *L, int n_expert);
int model_layer_mats(model_layer *L, int n_expert, model_mat **out, int max);

typedef struct {              /* a tensor as stored, for `kvant info` */
    char name[64];
    int type;
    int n_dims;
    int64_t ne[4];
    size_t nbytes;
} model_tensor;

typedef struct model {
    model_config cfg;
    char name[128];
    char file_format[32];
    model_mat tok_embd;       /* (V, C) */
    model_layer *layers;      /* n_layers */
    const float *out_norm;    /* (C) */
    model_mat output;         /* (V, C); the same data as tok_embd when tied */
    const float *rope_freqs;  /* (rope_dim/2): Llama 3 frequency factors, each pair's angle / rope_freqs[i]; or NULL */
    bool tied_output;
    tok *tok;
    model_tensor *tensors;
    int n_tensors;
    /* owners of the memory the views above point into */
    gguf_ctx *gguf;
    bool builtin;             /* the GGUF is the built-in model's bytes (not a mapping: nothing to drop) */
    core_map map;             /* llama2.c checkpoints */
    float *owned;             /* norms and biases converted to F32 (freed at close) */
    model_mat *expert_mats;   /* the layers' gate/up/down_exps views (freed at close) */
    bool fused;               /* some matrices are row views of a fused tensor (attn_qkv, gate+up ffn_up) */
    void **packed;            /* model_repack's buffers (n_packed of them) */
    int n_packed;
    size_t packed_bytes;
    core_pool *pool;
} model;

/* ---- architectures (model/arch.c) -------------------------------------------- */
typedef struct {
    const char *name;        /* general.architecture */
    bool neox;
    model_act act;
    bool embd_sqrt;
    bool need_bias, need_qk_norm, need_post_norms;
    int swa_pattern;
    bool moe;
} model_arch;

/* The row of architecture `name`, or NULL when kvant does not run it. */
const model_arch *model_arch_find(const char *name);
/* "llama, mistral, qwen2, ..." into buf (for messages). */
void model_arch_names(char *buf, size_t cap);
/* True for an `{arch}.<suffix>` key that changes nothing kvant computes. */
bool model_arch_key_ignored(const char *suffix);

/* What a model has beyond the Llama-2 layout (model_features), for the
 * commands that only handle part of it: model_require refuses, naming the
 * feature and the command, when m has any of the `refused` bits. */
enum {
    MODEL_FEAT_EXPERTS = 1 << 0,   /* routed experts (MoE) */
    MODEL_FEAT_FUSED = 1 << 1,     /* fused attn_qkv / gate+up tensors (phi3) */
    MODEL_FEAT_BIAS = 1 << 2,      /* q/k/v or output biases */
    MODEL_FEAT_QK_NORM = 1 << 3,   /* per-head q/k RMSNorm */
    MODEL_FEAT_POST_NORM = 1 << 4, /* post-attention / post-FFN norms */
    MODEL_FEAT_GELU = 1 << 5,      /* GeGLU feed-forward */
    MODEL_FEAT_SCALES = 1 << 6,    /* embedding scale, attention scale other than 1/sqrt(D), soft-caps */
    MODEL_FEAT_SWA = 1 << 7,       /* sliding-window layers */
    MODEL_FEAT_ROPE = 1 << 8,      /* NeoX order, partial rotary, frequency factors, scaling, per-layer bases */
    MODEL_FEAT_WIDE_HEADS = 1 << 9,/* n_heads x head_dim != dim */
    MODEL_FEAT_ALL = (1 << 10) - 1,
};
unsigned model_features(const model *m);
kvant_code model_require(const model *m, unsigned refused, const char *command, kvant_status *st);

/* The built-in default model's GGUF bytes (stories260K, model/builtin.c). */
const uint8_t *model_builtin_gguf(size_t *size);
#define MODEL_BUILTIN_NAME "stories260K (built in)"

/* Opens a GGUF or llama2.c checkpoint (chosen by the file's magic); path
 * NULL opens the built-in default model.
 * tokenizer_path: llama2.c tokenizer.bin (required for .bin checkpoints
 * unless tokenizer.bin sits beside the model).  n_threads: 0 = all CPUs. */
model *model_open(const char *path, const char *tokenizer_path, int n_threads, kvant_status *st);
void model_close(model *m);
/* Repacks every layer matrix (and the classifier) whose type has a packed
 * layout (kernels/repack.h) for the forward pass, and lets the kernel drop
 * the mmap'd pages of the originals (they are read back from the file if
 * anything else reads them), so memory stays about the file's size.  The
 * environment variable KVANT_REPACK=0 turns it off (A/B measurements), as
 * all = false does, except for LLM_INT8 matrices with outlier columns,
 * which have only the packed path and are packed always. */
kvant_code model_repack(model *m, bool all, kvant_status *st);

/* loaders (model/load_*.c); on success they fill cfg, weights and tensors */
kvant_code model_load_gguf(model *m, const char *path, kvant_status *st);
/* the same from a GGUF in memory that outlives the model (the built-in one) */
kvant_code model_load_gguf_mem(model *m, const uint8_t *data, size_t size, const char *name, kvant_status *st);
kvant_code model_load_llama2c(model *m, const char *path, const char *tokenizer_path, kvant_status *st);
/* The neutral values of the family fields (llama: no scales, caps, window
 * or experts; attention scale 1/sqrt(head_dim)); dim..rope_base set first. */
void model_config_set_defaults(model_config *c);
/* checks a filled config for sane, bounded values */
kvant_code model_check_config(const model_config *c, const char *path, kvant_status *st);

/* ---- the paged KV cache of a model (model/model.c) ---------------------------
 * One pool for every layer; or, for a model with sliding-window layers
 * (gemma2/3), a pool for the global layers and one for the local ones,
 * whose sequences give back the blocks that leave the window (so a local
 * layer holds about window + chunk positions whatever the context).
 * base: the params for the whole model (n_layers ignored; n_blocks > 0 is
 * the position capacity in blocks, else budget_bytes for both pools).  The
 * local pool gets max_seqs x (ceil((window - 1) / B) + 2) + ceil(chunk / B)
 * blocks (chunk: the most tokens of one forward step, all sequences), with a
 * byte budget at most the local layers' share of it, taken first.  *local is NULL for models without windows, or when
 * the environment has KVANT_SWA_TRIM=0 (every position kept, to measure). */
kvant_code model_kv_pools_new(const model *m, const kv_pool_params *base, int chunk, struct kv_pool **global,
                              struct kv_pool **local, kvant_status *st);
/* A sequence of those pools as the forward pass's kv_store. */
kv_store *model_kv_store_new(const model *m, struct kv_pool *global, struct kv_pool *local, int chunk, bool own_pools,
                             kvant_status *st);

/* ---- forward ----------------------------------------------------------------
 * Work buffers for batches of up to max_T tokens attending to up to n_ctx
 * cached positions; allocated once per sequence, nothing is allocated per
 * token. */
typedef enum { MODEL_ATTN_FLASH, MODEL_ATTN_NAIVE } model_attn;

/* The linear layers of a layer (and the classifier), for hooks. */
typedef enum { MODEL_MM_WQ, MODEL_MM_WK, MODEL_MM_WV, MODEL_MM_WO, MODEL_MM_GATE, MODEL_MM_UP, MODEL_MM_DOWN,
               MODEL_MM_OUTPUT, MODEL_MM_ROUTER, MODEL_MM_EXPERT, MODEL_MM_COUNT } model_mm_id;

/* Calibration tap: called with the input x (T rows of `cols` floats) of
 * every linear layer, before the matmul (wq/wk/wv share one input and
 * gate/up another, so the tap sees MODEL_MM_WQ and MODEL_MM_GATE for them;
 * layer = -1 for MODEL_MM_OUTPUT).  Must not keep x. */
typedef void (*model_tap_fn)(void *user, int layer, model_mm_id mm, const float *x, int T, int cols);
/* Matmul override: y[T][W->rows] = x[T][W->cols] . W^T computed another way
 * (LLM.int8, SmoothQuant W8A8, ...).  Returns false to fall through to the
 * ordinary kernel. */
typedef bool (*model_mm_fn)(void *user, int layer, model_mm_id mm, const model_mat *W, const float *x, float *y,
                            int T);

typedef struct {
    int max_T, n_ctx;
    model_attn attn;
    float *x;       /* (max_T, C) residual stream */
    float *xb;      /* (max_T, max(C, H*D)) */
    float *xb2;     /* (max_T, H*D) attention output */
    float *q;       /* (max_T, H*D) */
    float *k, *v;   /* (max_T, Hkv*D) */
    float *hb, *hb2;/* (max_T, F) */
    void *attn_scratch;
    void *mm;       /* matmul scratch: quantized activations */
    /* attention-sink statistics (naive attention only): when sink_n > 0,
     * sink_mass[layer] accumulates the probability mass all heads of all
     * queries put on cache indices 0 .. sink_n-1, sink_queries counts the
     * (query, head) pairs summed */
    int sink_n;
    double *sink_mass;
    int64_t sink_queries;
    float *sink_head;   /* (H) scratch */
    /* hooks (NULL: off), see model_tap_fn / model_mm_fn */
    model_tap_fn tap;
    model_mm_fn mm_hook;
    void *hook_user;
    int *pos;       /* (max_T) cache index of each row of the batch */
    int *seg_row, *seg_list; /* (max_T) per segment: first row; decode segments */
    int *row_seg;            /* (max_T) per row: its segment */
    size_t attn_bytes;       /* attention scratch per thread */
    /* MoE (n_expert > 0): router probabilities (T, E), per token the K chosen
     * experts and weights (T, K), the (token, slot) pairs sorted by expert
     * (T*K) with per-expert ends (E+1), an expert's gathered inputs (T, C),
     * its gate / up (T, F_e), and each slot's weighted output (T, K, C) */
    float *moe_logits, *moe_wt, *moe_x, *moe_g, *moe_u, *moe_acc;
    int32_t *moe_sel, *moe_rows, *moe_count;
} model_work;

model_work *model_work_new(const model *m, int max_T, int n_ctx, model_attn attn, kvant_status *st);
void model_work_free(model_work *w);

/* Runs tokens[0..n) as the next positions of the sequence whose cache is
 * kv, as one batch (in chunks of at most w->max_T and kv->max_chunk rows),
 * appending their K/V.  logits: NULL, [n][V] if all_logits, else [V] for
 * the last token.  KVANT_ERR_FULL when the cache cannot take the tokens
 * (nothing of that chunk is kept). */
kvant_code model_forward(const model *m, model_work *w, kv_store *kv, const int32_t *tokens, int n,
                         float *logits, bool all_logits, kvant_status *st);

/* The embedding of tokens[0..n), run into the empty cache kv (in chunks as
 * model_forward): their final-normed hidden states pooled as
 * model_config.pooling says, L2-normalized, into out[dim]. */
kvant_code model_embed(const model *m, model_work *w, kv_store *kv, const int32_t *tokens, int n, float *out,
                       kvant_status *st);
/* acc (a segment's embd after all n tokens) -> out[dim]: a mean divided by
 * n, then L2-normalized (a zero vector stays zero) */
void model_embd_finish(const model *m, const double *acc, int n, float *out);

/* ---- batched forward over several sequences -------------------------------
 * A segment is tokens[0..n) of one sequence, to run at its cache indices
 * kv->n_pos .. kv->n_pos+n-1.  model_forward_batch runs every segment in ONE
 * pass: the matmuls over all T = sum(n) rows together (each weight matrix is
 * read once for the whole batch), attention per segment through its own
 * cache.  Each row's result is the same as when its sequence runs alone
 * (the matmul kernels give every row the bits vec_dot gives it, and the
 * attention of a row reads only its own sequence's cache). */
typedef enum { MODEL_LOGITS_NONE, MODEL_LOGITS_LAST, MODEL_LOGITS_ALL } model_logits;
typedef struct {
    kv_store *kv;             /* the sequence's cache; each cache at most once per batch */
    const int32_t *tokens;    /* [n] */
    int n;                    /* >= 1 and <= kv->max_chunk */
    model_logits logits;      /* which rows' logits it wants */
    double *embd;             /* NULL, or [dim]: the rows' final-normed hidden states pooled in
                                 (model_config.pooling; mean: added, in position order, so the
                                 sum is the same whatever the chunks and the batch); zeroed by
                                 the caller before the sequence's first token; model_embd_finish */
} model_segment;

/* Rows of logits a batch produces: n for MODEL_LOGITS_ALL, 1 for LAST. */
int model_batch_logit_rows(const model_segment *seg, int n_seg);
/* Reserves room in every segment's cache, runs the batch, commits each
 * segment's K/V.  T = sum(n) <= w->max_T.  logits: NULL, or
 * [model_batch_logit_rows][V], rows packed in segment order.  Errors
 * (nothing is computed): KVANT_ERR_ARG (bad token, empty segment, too many
 * tokens, a cache twice), KVANT_ERR_FULL (a cache cannot take its tokens;
 * caches reserved before it keep the room, which a later reserve reuses). */
kvant_code model_forward_batch(const model *m, model_work *w, const model_segment *seg, int n_seg, float *logits,
                               kvant_status *st);

#endif
