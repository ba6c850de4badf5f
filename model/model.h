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
#include "kv/kv.h"
#include "tok/tok.h"

typedef struct {
    int dim;          /* C */
    int hidden_dim;   /* F */
    int n_layers;
    int n_heads;      /* H */
    int n_kv_heads;   /* Hkv: H for MHA, 1 for MQA, between for GQA */
    int head_dim;     /* D */
    int vocab_size;   /* V */
    int n_ctx_train;
    int rope_dim;     /* dims rotated per head (<= D) */
    float rope_base;
    bool rope_neox;
    float norm_eps;
} model_config;

/* a weight matrix: `rows` rows of `cols` elements of `type` (ggml: ne[0] = cols) */
typedef struct {
    const void *data;
    int type;
    int64_t rows, cols;
    /* non-NULL: the same matrix repacked in groups of 8 rows (kernels/repack.h),
     * which the forward pass multiplies with; data stays valid for everything else */
    const void *packed;
} model_mat;

typedef struct {
    const float *attn_norm;   /* (C) */
    model_mat wq;             /* (H*D, C) */
    model_mat wk, wv;         /* (Hkv*D, C) */
    model_mat wo;             /* (C, H*D) */
    const float *ffn_norm;    /* (C) */
    model_mat w_gate, w_up;   /* (F, C) */
    model_mat w_down;         /* (C, F) */
} model_layer;

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
    bool tied_output;
    tok *tok;
    model_tensor *tensors;
    int n_tensors;
    /* owners of the memory the views above point into */
    gguf_ctx *gguf;
    core_map map;             /* llama2.c checkpoints */
    float *owned;             /* norms converted to F32 (freed at close) */
    void **packed;            /* model_repack's buffers (n_packed of them) */
    int n_packed;
    size_t packed_bytes;
    core_pool *pool;
} model;

/* Opens a GGUF or llama2.c checkpoint (chosen by the file's magic).
 * tokenizer_path: llama2.c tokenizer.bin (required for .bin checkpoints
 * unless tokenizer.bin sits beside the model).  n_threads: 0 = all CPUs. */
model *model_open(const char *path, const char *tokenizer_path, int n_threads, kvant_status *st);
void model_close(model *m);
/* Repacks every layer matrix (and the classifier) whose type has a packed
 * layout (kernels/repack.h) for the forward pass, and lets the kernel drop
 * the mmap'd pages of the originals (they are read back from the file if
 * anything else reads them), so memory stays about the file's size.  The
 * environment variable KVANT_REPACK=0 turns it off (A/B measurements). */
kvant_code model_repack(model *m, kvant_status *st);

/* loaders (model/load_*.c); on success they fill cfg, weights and tensors */
kvant_code model_load_gguf(model *m, const char *path, kvant_status *st);
kvant_code model_load_llama2c(model *m, const char *path, const char *tokenizer_path, kvant_status *st);
/* checks a filled config for sane, bounded values */
kvant_code model_check_config(const model_config *c, const char *path, kvant_status *st);

/* ---- forward ----------------------------------------------------------------
 * Work buffers for batches of up to max_T tokens attending to up to n_ctx
 * cached positions; allocated once per sequence, nothing is allocated per
 * token. */
typedef enum { MODEL_ATTN_FLASH, MODEL_ATTN_NAIVE } model_attn;

/* The linear layers of a layer (and the classifier), for hooks. */
typedef enum { MODEL_MM_WQ, MODEL_MM_WK, MODEL_MM_WV, MODEL_MM_WO, MODEL_MM_GATE, MODEL_MM_UP, MODEL_MM_DOWN,
               MODEL_MM_OUTPUT, MODEL_MM_COUNT } model_mm_id;

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

/* ---- synthetic models (model/synth.c) ---------------------------------------- */
typedef struct {
    const char *name;
    int dim, hidden, n_layers, n_heads, n_kv_heads, vocab, n_ctx;
    const char *what;       /* the real model whose shape this is */
} model_synth_shape;

typedef struct {
    const char *shape;      /* a name from model_synth_shapes() */
    const char *out_path;
    const char *ftype;      /* quant_ftype name; NULL = F32 */
    bool pure;
    uint64_t seed;
    int n_threads;
    bool quiet;
    int n_ctx;              /* > 0: context length to declare instead of the shape's */
} model_synth_params;

const model_synth_shape *model_synth_shapes(int *n);
/* Writes a GGUF with random weights at a real model's shape; metadata
 * names it synthetic (general.description, kvant.synthetic = true). */
kvant_code model_synth(const model_synth_params *p, kvant_status *st);

#endif
