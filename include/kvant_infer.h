/* kvant_infer.h - inference: models, tokenizers, sequences (KV cache +
 * position), sampling, the serving engine, perplexity, chat templates.
 *
 * A model (weights, tokenizer, config) is immutable after kvant_model_open
 * and may be shared between threads; a sequence (kvant_seq) owns one KV
 * cache and a position. */
#ifndef KVANT_PUBLIC_INFER_H
#define KVANT_PUBLIC_INFER_H

#include "kvant_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- model ------------------------------------------------------------ */
typedef struct kvant_model kvant_model;

typedef struct {
    const char *tokenizer_path; /* llama2.c tokenizer.bin; NULL: from GGUF / next to a .bin */
    int n_threads;              /* 0: number of online CPUs */
    int no_repack;              /* 1: keep matrices as stored (no faster packed copy; also KVANT_REPACK=0) */
} kvant_model_params;

/* Opens a GGUF (v2/v3) or llama2.c checkpoint; weights stay mmap'd.  Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, K-quant, F16, BF16, kvant's PTQ (rows of a multiple of 32
 * for the per-row ones) and W8A8 matrices are repacked for the matmul into groups of 8 rows
 * (memory stays about the file's size: the mapped originals are dropped)
 * unless p->no_repack or the environment has KVANT_REPACK=0. */
kvant_model *kvant_model_open(const char *path, const kvant_model_params *p, kvant_status *st);
/* path NULL: the built-in default model, stories260K (260K parameters,
 * TinyStories; MIT licence, models/LICENSE.stories260K), part of the binary. */
void kvant_model_free(kvant_model *m);
/* The model's idle worker threads sleep now rather than spin a few hundred
 * microseconds for more work: call it when another model's work comes
 * next in this process (kvant bench --vs steps two models in turn), so
 * its threads keep the CPUs.  Its next forward wakes them as usual. */
void kvant_model_rest_threads(kvant_model *m);

typedef struct {
    const char *arch;       /* general.architecture: "llama", "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3" */
    const char *name;       /* general.name or file name */
    const char *file_format;/* "GGUF v3", "llama2.c v0" */
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim;
    int vocab_size, n_ctx_train;
    float norm_eps, rope_base;
    int rope_dim;           /* dimensions rotated per head */
    bool rope_neox;         /* NeoX (half-split) ordering instead of adjacent pairs */
    bool tied_output;       /* output matrix shared with the token embedding */
    int64_t n_params;
    size_t weight_bytes;    /* bytes of all tensors as stored */
    int bos_id, eos_id;
    const char *tokenizer_model; /* "llama" (SentencePiece BPE) or "gpt2" */
    /* what the families add (0 / false: absent) */
    int n_expert, n_expert_used, expert_hidden;  /* MoE: experts, used per token, width */
    int swa_window, n_swa_layers;                /* sliding-window attention: span and layer count */
    float rope_base_swa;                         /* RoPE base of the sliding-window layers */
    float attn_softcap, final_softcap;           /* gemma2's soft-capping */
    float embd_scale;                            /* embeddings x this (gemma: sqrt(dim)); 1 = none */
    bool rope_freqs;                             /* RoPE frequency factors (Llama 3.1+, phi3 long/short) */
    bool qkv_bias, qk_norm, post_norms;          /* q/k/v biases, per-head q/k norms, post-attention/FFN norms */
    const char *activation;                      /* "silu" or "gelu_tanh" (the GLU's gate) */
    const char *pooling;                         /* embeddings: "mean", "cls" or "last" */
} kvant_model_info;

void kvant_model_get_info(const kvant_model *m, kvant_model_info *out);

/* Tensors as stored, for `kvant info`. */
int kvant_model_n_tensors(const kvant_model *m);
typedef struct {
    const char *name;
    const char *type_name;
    int n_dims;
    int64_t ne[4];          /* ne[0] is the contiguous (row) dimension */
    size_t nbytes;
} kvant_tensor_info;
void kvant_model_tensor(const kvant_model *m, int i, kvant_tensor_info *out);

/* ---- model metadata -------------------------------------------------------------- */
/* The string value of a GGUF metadata key (e.g. "tokenizer.chat_template").
 * Copies at most cap-1 bytes + NUL into buf (buf may be NULL) and returns the
 * full length, or -1 if the key is absent, not a string, or the model is
 * not a GGUF file. */
int kvant_model_meta_str(const kvant_model *m, const char *key, char *buf, size_t cap);

/* ---- tokenizer ------------------------------------------------------- */
/* Encodes UTF-8 text.  add_bos prepends BOS.  Returns the number of tokens,
 * or -(needed) if max_tokens is too small. */
int kvant_tokenize(const kvant_model *m, const char *text, size_t len, bool add_bos,
                   int32_t *tokens, int max_tokens);
/* As kvant_tokenize, and with parse_special the text of a control token
 * (e.g. "<|im_end|>", "<s>") becomes that token instead of being split
 * into ordinary pieces (kvant_tokenize: false; kvant_chat_tokenize: true).
 * Returns the count, -(needed) when max_tokens is too small, INT_MIN when
 * out of memory. */
int kvant_tokenize_ex(const kvant_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                      int32_t *tokens, int max_tokens);
/* The whole text's tokens in a malloc'd array of *n (the caller frees it):
 * no guess at the count (byte fallback can give 3 tokens for one byte).
 * NULL + st when out of memory. */
int32_t *kvant_tokenize_all(const kvant_model *m, const char *text, size_t len, bool add_bos, int *n,
                            kvant_status *st);
/* Bytes that `token` adds to the text when it follows `prev` (-1 at start).
 * Writes at most cap bytes, returns the byte count. */
int kvant_token_to_piece(const kvant_model *m, int32_t prev, int32_t token, char *buf, int cap);
/* As kvant_token_to_piece; with special, a control or unknown token gives
 * its vocabulary text ("[TOOL_CALLS]", "<|python_tag|>", "<s>") instead of
 * nothing, as llama.cpp's llama_token_to_piece(special=true) does (the
 * server keeps the tool-call markers a reply's parser reads).  special =
 * false is kvant_token_to_piece. */
int kvant_token_to_piece_ex(const kvant_model *m, int32_t prev, int32_t token, bool special, char *buf, int cap);
/* True when `token` ends a generation: EOS or the family's end-of-turn
 * token (<|eot_id|>, <|im_end|>, <end_of_turn>, <|end|>, ...). */
bool kvant_token_is_eog(const kvant_model *m, int32_t token);

/* ---- sequence: a KV cache and a position ------------------------------ */
typedef struct kvant_seq kvant_seq;

/* The choices of a KV cache.  Zero is the default everywhere (library,
 * kvant run / serve / ppl / bench): F16 elements as llama.cpp, flash
 * attention, the paged cache.  The others are the references tests hold
 * the defaults to (F32 elements, naive attention, the contiguous cache) and
 * Q8_0, a quarter of F32's bytes. */
typedef enum { KVANT_KV_F16 = 0, KVANT_KV_F32, KVANT_KV_Q8_0 } kvant_kv_type;
typedef enum { KVANT_ATTN_FLASH = 0, KVANT_ATTN_NAIVE } kvant_attn;
typedef enum { KVANT_CACHE_PAGED = 0, KVANT_CACHE_CONTIGUOUS } kvant_cache;

/* A paged KV pool shared by several sequences (prefix caching, forks). */
typedef struct kvant_kv_pool kvant_kv_pool;
typedef struct {
    kvant_kv_type kv_type;
    int block_size;         /* tokens per block (0: 16) */
    double mem_mib;         /* pool size in MiB ... */
    int n_blocks;           /* ... or in blocks (used when mem_mib is 0) */
    int max_ctx;            /* most tokens one sequence may hold (0: training context) */
    int max_seqs;           /* live sequences at once (0: 64) */
    bool prefix_cache;      /* reuse full blocks of identical prompt prefixes */
} kvant_kv_pool_params;
kvant_kv_pool *kvant_kv_pool_new(kvant_model *m, const kvant_kv_pool_params *p, kvant_status *st);
/* frees the pool; every sequence made in it must be freed first */
void kvant_kv_pool_free(kvant_kv_pool *pool);

typedef struct {
    int n_ctx;              /* positions the sequence may hold (0: training context) */
    kvant_attn attn;
    kvant_cache kv;
    kvant_kv_type kv_type;
    int block_size;         /* paged: tokens per block (0: 16) */
    double kv_mem_mib;      /* paged: size the private pool from this budget
                               instead of n_ctx (the sequence may then run out
                               of blocks: KVANT_ERR_FULL) */
    int window;             /* > 0: StreamingLLM cache of `sink` + `window` tokens */
    int sink;
    int sink_stats;         /* > 0 (naive attention): measure the attention mass on
                               the first sink_stats cache positions, per layer */
    kvant_kv_pool *pool;    /* non-NULL: the sequence lives in this shared pool
                               (kv, kv_type, block_size and n_ctx come from it) */
} kvant_seq_params;
kvant_seq_params kvant_seq_default(void);
kvant_seq *kvant_seq_new_ex(kvant_model *m, const kvant_seq_params *p, kvant_status *st);
/* the defaults with n_ctx (0: the model's training context) */
kvant_seq *kvant_seq_new(kvant_model *m, int n_ctx, kvant_status *st);
/* attention-sink statistics so far: for each layer, the average share of
 * attention probability that a (query, head) pair puts on the first
 * sink_stats cache positions.  Returns the layer count written. */
int kvant_seq_sink_stats(const kvant_seq *s, double *per_layer, int max_layers);
/* tokens dropped by a streaming cache so far */
int64_t kvant_seq_evicted(const kvant_seq *s);
/* Empty paged sequence with a prefix cache: takes the cached K/V of the
 * prompt's leading full blocks and returns how many tokens they cover (the
 * caller forwards only tokens[returned..n)).  0 for other caches. */
int kvant_seq_prefill_cached(kvant_seq *s, const int32_t *tokens, int n);
/* A new sequence sharing s's cached tokens (paged: blocks are shared and
 * copied only when written).  NULL + status for caches that cannot fork. */
kvant_seq *kvant_seq_fork(kvant_seq *s, kvant_status *st);

/* KV memory accounting (paged: the whole pool the sequence lives in) */
typedef struct {
    bool paged;
    int block_size;
    int64_t blocks_total, blocks_used, blocks_cached, blocks_free;
    size_t bytes_per_block, bytes_total, bytes_used;
    int64_t frag_tokens;        /* reserved but unused token slots */
    int64_t prefix_hit_tokens;  /* tokens served from the prefix cache so far */
    int64_t cow_copies;
    size_t seq_bytes;           /* bytes of this sequence's cached tokens */
    /* sliding-window models: the local layers' own pool, whose blocks leave a
     * sequence with the window (included in bytes_total / bytes_used; the
     * blocks_* above are the global layers' pool) */
    int64_t swa_blocks_total, swa_blocks_used;
    size_t swa_bytes_total, swa_bytes_used;
} kvant_kv_stats;
void kvant_seq_kv_stats(const kvant_seq *s, kvant_kv_stats *out);
void kvant_seq_free(kvant_seq *s);
void kvant_seq_reset(kvant_seq *s);      /* forget all cached positions */
int  kvant_seq_pos(const kvant_seq *s);  /* tokens already in the cache */
/* Keeps the first n cached positions and forgets the rest.  Returns the
 * positions kept: n (or kvant_seq_pos if smaller), less for a paged cache,
 * which keeps whole blocks (n rounded down to the block size), or -1 when
 * the cache cannot (a streaming cache; a sliding-window pool that has
 * already given back blocks before n); then nothing changes. */
int  kvant_seq_truncate(kvant_seq *s, int n);
size_t kvant_seq_kv_bytes(const kvant_seq *s); /* bytes of KV in use */
size_t kvant_seq_kv_capacity_bytes(const kvant_seq *s);

/* Runs tokens[0..n) at positions pos..pos+n as one batch, appends their
 * K/V to the cache.  logits: NULL, or [n][vocab] when all_logits, else
 * [vocab] for the last token only. */
kvant_code kvant_forward(kvant_seq *s, const int32_t *tokens, int n, float *logits,
                         bool all_logits, kvant_status *st);
/* The embedding of tokens[0..n): s is reset, the tokens run into it, and
 * their final-normed hidden states pool into out[kvant_model_info.dim] (the
 * mean, or the GGUF's {arch}.pooling_type: first / last token),
 * L2-normalized.  The same tokens give the same bits alone, in chunks, or
 * batched with other work in the engine (kvant_request.embed). */
kvant_code kvant_embed(kvant_seq *s, const int32_t *tokens, int n, float *out, kvant_status *st);

/* ---- sampling ---------------------------------------------------------
 * The chain: logit bias -> repetition penalty -> presence / frequency
 * penalties -> top-k -> top-p -> min-p -> temperature -> a seeded draw
 * (temperature 0: the argmax after the bias and penalties).  Zero is "off"
 * for every field added after seed, so a struct from an older caller that
 * zero-fills them samples as before. */
typedef struct {
    int32_t token;          /* a vocabulary id */
    float bias;             /* added to its logit (finite; OpenAI's range is [-100, 100]) */
} kvant_logit_bias;

typedef struct {
    float temperature;     /* 0: greedy */
    int top_k;             /* 0: off */
    float top_p;           /* 1: off */
    float min_p;           /* 0: off */
    float repeat_penalty;  /* 1: off.  llama.cpp's rule over the last repeat_last_n tokens,
                              prompt included: a positive logit divided by it, a negative one
                              multiplied, once per distinct token */
    int repeat_last_n;     /* window for the penalty */
    uint64_t seed;
    float presence_penalty;  /* 0: off.  OpenAI's: subtracted from the logit of every token
                                generated before in this sample (the prompt does not count;
                                no window) */
    float frequency_penalty; /* 0: off.  OpenAI's: subtracted once per time the token was
                                generated before in this sample; together
                                logit -= frequency * count + presence * (count > 0) */
    const kvant_logit_bias *logit_bias; /* NULL: none; n_logit_bias entries, each added to its
                                token's logit before everything else (entries for one token add
                                up; -100 all but bans it, +100 all but forces it).  Copied by
                                kvant_sampler_new and kvant_engine_submit: the caller's array
                                need not outlive the call */
    int n_logit_bias;
} kvant_sampling;

kvant_sampling kvant_sampling_default(void);

typedef struct kvant_sampler kvant_sampler;
kvant_sampler *kvant_sampler_new(const kvant_sampling *p, int vocab_size, kvant_status *st);
void kvant_sampler_free(kvant_sampler *s);
/* Picks the next token from logits (modified in place); `accept` records
 * a token in the penalty history.  Tokens accepted before the first
 * kvant_sampler_sample are the prompt (the repetition penalty sees them,
 * presence / frequency do not); tokens accepted after it are generated
 * (both see them).  The engine counts the same way. */
int32_t kvant_sampler_sample(kvant_sampler *s, float *logits);
void kvant_sampler_accept(kvant_sampler *s, int32_t token);

/* ---- engine: many requests, one batched forward pass per step ------------------
 * The serving engine (sched/).  Requests are submitted with a prompt and
 * sampling settings; each kvant_engine_step builds ONE batch of tokens from
 * every running sequence (decode tokens first, then prompt chunks up to the
 * token budget: chunked prefill with decode piggybacking), runs one forward
 * pass over it, samples, and reports the new tokens as events.  KV memory is
 * one paged pool; admission is by free blocks and max_seqs; when blocks run
 * out the newest running sequence is preempted (its blocks freed) and later
 * recomputed from its prompt + the tokens it already generated, so its output
 * is what it would have been without pressure.
 *
 * Threads: kvant_engine_step is called by one thread (the engine loop);
 * kvant_engine_submit, _cancel and _stats may be called from any thread at
 * any time (the engine locks internally). */
typedef struct kvant_engine kvant_engine;

typedef struct {
    int max_seqs;           /* running sequences at once (0: 64) */
    int max_batch_tokens;   /* token budget per step (0: 512) */
    int max_waiting;        /* queued requests before submit refuses with KVANT_ERR_FULL (0: 1024) */
    double kv_mem_mib;      /* KV pool size (0: enough for max_seqs x max_ctx, capped at 1 GiB) */
    int block_size;         /* tokens per KV block (0: 16) */
    kvant_kv_type kv_type;
    int max_ctx;            /* most tokens one sequence may hold (0: training context) */
    bool prefix_cache;      /* reuse cached blocks of identical prompt prefixes (default on) */
    double target_step_ms;  /* > 0: size prompt chunks so a step takes about this long
                               (the budget adapts to the measured step time) */
} kvant_engine_params;
kvant_engine_params kvant_engine_default(void);

kvant_engine *kvant_engine_new(kvant_model *m, const kvant_engine_params *p, kvant_status *st);
/* every request is cancelled; no step may be running */
void kvant_engine_free(kvant_engine *e);

/* ---- structured outputs: grammars that constrain the tokens (grammar/) -------
 * A kvant_grammar is compiled once and may serve many requests at once
 * (kvant_request.grammar): at every step the engine masks the logits of
 * every token whose bytes the grammar cannot accept there (before
 * temperature, top-k and top-p), and allows the end-of-generation token only
 * where the grammar can end; a reply ends ("stop") when the grammar admits
 * nothing more.  Kinds:
 *   KVANT_GRAMMAR_GBNF         llama.cpp's GBNF text (rule "root");
 *   KVANT_GRAMMAR_JSON_SCHEMA  a JSON Schema (objects, arrays, enum, const,
 *                              the scalar types, anyOf/oneOf, $ref to $defs,
 *                              min/maxItems, min/maxLength, simple patterns,
 *                              integer bounds; see README "Structured
 *                              outputs"); NULL or "{}": any JSON value;
 *   KVANT_GRAMMAR_JSON_OBJECT  any JSON object (response_format json_object).
 * NULL + st on failure: KVANT_ERR_ARG for malformed text, KVANT_ERR_UNSUPPORTED
 * naming the keyword or construct kvant cannot compile. */
typedef struct kvant_grammar kvant_grammar;
typedef enum { KVANT_GRAMMAR_GBNF = 0, KVANT_GRAMMAR_JSON_SCHEMA, KVANT_GRAMMAR_JSON_OBJECT } kvant_grammar_kind;
kvant_grammar *kvant_grammar_new(kvant_model *m, kvant_grammar_kind kind, const char *text, size_t len,
                                 kvant_status *st);
/* drops the caller's handle; requests submitted with it keep theirs */
void kvant_grammar_free(kvant_grammar *g);
/* The GBNF a JSON Schema compiles to (malloc'd; the caller frees it), for logs. */
char *kvant_grammar_schema_gbnf(const char *schema_json, size_t len, kvant_status *st);

typedef struct {
    kvant_sampling sampling;
    int max_tokens;         /* generated tokens at most (> 0) */
    int n;                  /* independent samples of the same prompt (forked; 0: 1) */
    bool ignore_eos;        /* do not stop at the end-of-sequence token */
    int logprobs;           /* > 0: report the log-probability of each token and of the
                               top `logprobs` alternatives (at most KVANT_MAX_LOGPROBS) */
    bool embed;             /* the prompt's embedding instead of tokens (as kvant_embed: pooled,
                               L2-normalized; n 1, max_tokens 0): one KVANT_FINISH_EMBEDDING event */
    kvant_grammar *grammar; /* NULL, or every sample's tokens follow it (the engine keeps a
                               reference until the request ends; ignore_eos does not apply) */
} kvant_request;
#define KVANT_MAX_LOGPROBS 8

/* Queues a request; returns its id (> 0), or -1 with st set: KVANT_ERR_ARG
 * (empty prompt, prompt + max_tokens beyond max_ctx, bad token),
 * KVANT_ERR_FULL (queue full: try again later).  The prompt is copied. */
int64_t kvant_engine_submit(kvant_engine *e, const int32_t *prompt, int n_prompt, const kvant_request *r,
                            kvant_status *st);
/* Cancels a request: its sequences' blocks are freed at once (before the
 * next step); a KVANT_FINISH_CANCELLED event is reported for each.  No-op
 * for unknown or finished ids. */
void kvant_engine_cancel(kvant_engine *e, int64_t id);

typedef enum {
    KVANT_FINISH_NONE = 0,  /* more tokens follow */
    KVANT_FINISH_LENGTH,    /* max_tokens reached (or the sequence's context) */
    KVANT_FINISH_EOS,       /* end-of-sequence token (the token is not reported) */
    KVANT_FINISH_CANCELLED,
    KVANT_FINISH_ERROR,
    KVANT_FINISH_EMBEDDING, /* an embed request's result: kvant_event.embedding */
} kvant_finish;

typedef struct {
    int64_t id;             /* request */
    int index;              /* which of its n samples */
    int32_t token;          /* -1 when the event only finishes the sample */
    float logprob;          /* log p(token) when logprobs was asked */
    int n_top;
    int32_t top_tokens[KVANT_MAX_LOGPROBS];
    float top_logprobs[KVANT_MAX_LOGPROBS];
    kvant_finish finish;
    int n_prompt, n_generated;      /* so far */
    int n_cached;           /* prompt tokens served from the prefix cache */
    const float *embedding; /* KVANT_FINISH_EMBEDDING: [kvant_model_info.dim], owned by the engine,
                               valid until the next kvant_engine_step */
} kvant_event;

/* One engine step.  Writes up to max_out events (a step yields at most one
 * per running sample, plus finish events; max_out >= max_seqs + queued
 * cancellations is always enough, fewer are kept for the next call) and
 * returns how many, 0 when idle, or -1 with st set on an internal error. */
int kvant_engine_step(kvant_engine *e, kvant_event *out, int max_out, kvant_status *st);
/* Blocks until there is work (a request queued or running) or timeout_ms
 * passes; for the engine loop.  Returns true if there is work. */
bool kvant_engine_wait(kvant_engine *e, int timeout_ms);

typedef struct {
    int running, waiting, preempted_total;
    int64_t steps, tokens_prefill, tokens_decode;   /* totals */
    int64_t prefix_hit_tokens;
    int64_t blocks_total, blocks_used, blocks_free, blocks_cached;
    /* sliding-window models: the local layers' own pool (0 otherwise) */
    int64_t swa_blocks_total, swa_blocks_used, swa_blocks_free, swa_blocks_cached;
    int last_batch_tokens;  /* tokens in the last step */
    double last_step_ms;
    int chunk_budget;       /* current prompt-chunk budget (adaptive) */
} kvant_engine_stats;
void kvant_engine_get_stats(kvant_engine *e, kvant_engine_stats *out);

/* ---- evaluation: perplexity and KL divergence -------------------------------- */
typedef struct {
    int n_ctx;              /* tokens per chunk / window (c) */
    int n_chunks;           /* 0: as many as the text holds */
    int stride;             /* 0: llama.cpp's method (non-overlapping chunks, BOS
                               first, second half scored); 0 < S < n_ctx: sliding
                               windows of n_ctx advancing by S, every token after
                               the first scored once */
    kvant_model *kl_base;   /* NULL, or the base model for KL divergence */
    kvant_attn attn;
    kvant_kv_type kv_type;  /* the KV cache of the model and of kl_base (the same, so KL
                               measures what differs in the weights) */
    void (*progress)(void *user, int done, int total, double ppl_so_far);
    void *user;
    struct kvant_int8 *int8; /* NULL, or run the evaluated model through this INT8
                                setup (LLM.int8, SmoothQuant W8A8; see kvant_int8_new) */
} kvant_ppl_params;

typedef struct {
    double ppl, ppl_err;    /* exp(mean NLL), and llama.cpp's +/- */
    int64_t n_scored;       /* tokens scored */
    int n_chunks;           /* chunks or windows evaluated */
    int64_t n_text_tokens;
    bool has_kl;
    double base_ppl, ppl_ratio;     /* ppl / base_ppl */
    double kl_mean, kl_p99, kl_max; /* KL(base || model), nats per token */
    double same_top;        /* share of scored tokens with the same argmax */
    double seconds;
} kvant_ppl_result;

/* Tokenizes text (BOS first) and measures perplexity as described above. */
kvant_code kvant_perplexity(kvant_model *m, const char *text, size_t len, const kvant_ppl_params *p,
                            kvant_ppl_result *r, kvant_status *st);

/* Streaming evaluation: the text's tokens are fed one at a time (decode)
 * and every next token is scored, under a cache policy:
 *   KVANT_STREAM_FULL       contiguous cache of every token (positions grow
 *                           past the training context);
 *   KVANT_STREAM_SINKS      sink + window cache (StreamingLLM; sink 0 =
 *                           window only);
 *   KVANT_STREAM_RECOMPUTE  for every token, recompute the last `window` tokens from
 *                scratch (the sliding window with re-computation baseline). */
typedef enum { KVANT_STREAM_FULL = 0, KVANT_STREAM_SINKS, KVANT_STREAM_RECOMPUTE } kvant_stream_policy;
typedef struct {
    kvant_stream_policy policy;
    int sink, window;
    int max_tokens;         /* score at most this many tokens (0: all) */
    float *nll_out;         /* NULL, or [max_tokens] per-token NLL (nats) */
    void (*progress)(void *user, int done, int total, double ppl_so_far);
    void *user;
} kvant_stream_params;

typedef struct {
    double ppl;
    int64_t n_scored;
    double seconds, tokens_per_s;
    size_t kv_bytes;        /* cache bytes in use at the end */
} kvant_stream_result;

kvant_code kvant_stream_ppl(kvant_model *m, const char *text, size_t len, const kvant_stream_params *p,
                            kvant_stream_result *r, kvant_status *st);

/* ---- chat templates --------------------------------------------------------------
 * The chat formats of the model families kvant runs, written out in C (no
 * Jinja engine): each renders a conversation exactly as the family's own
 * Jinja chat template does with add_generation_prompt=true, special tokens
 * as their text.  kvant_chat_detect picks one from the GGUF's
 * tokenizer.chat_template by markers, as llama.cpp's llm_chat_detect_template
 * does (no template or an unknown one: KVANT_CHAT_PLAIN).  The rendered text
 * holds BOS where the family's template writes it ("<|begin_of_text|>",
 * "<bos>", "<s>"); kvant_chat_tokenize turns it into tokens without doubling
 * it.  See README "Chat templates" for each one's rendering. */
typedef enum {
    KVANT_CHAT_PLAIN = 0,       /* "plain": "User: text\nAssistant:" (models without a template) */
    KVANT_CHAT_CHATML,          /* "chatml": <|im_start|>role\n...<|im_end|>\n */
    KVANT_CHAT_QWEN2_5,         /* "qwen2.5": ChatML + Qwen's default system message when none is given */
    KVANT_CHAT_QWEN3,           /* "qwen3": ChatML; <think> reasoning dropped from earlier turns */
    KVANT_CHAT_QWEN3_NO_THINK,  /* "qwen3-no-think": qwen3 + an empty <think></think> (enable_thinking=false) */
    KVANT_CHAT_LLAMA2,          /* "llama-2": <s>[INST] <<SYS>>...<</SYS>> ... [/INST] */
    KVANT_CHAT_LLAMA3,          /* "llama-3": <|start_header_id|>role<|end_header_id|> (Llama 3.0) */
    KVANT_CHAT_LLAMA3_1,        /* "llama-3.1": + "Cutting Knowledge Date" system header, 26 Jul 2024 */
    KVANT_CHAT_LLAMA3_2,        /* "llama-3.2": the same with today's date (strftime_now) */
    KVANT_CHAT_GEMMA,           /* "gemma": Gemma 2/3, <start_of_turn>user / model */
    KVANT_CHAT_PHI3,            /* "phi-3": <|user|>\n...<|end|>\n (Phi-3, Phi-3.5) */
    KVANT_CHAT_PHI4_MINI,       /* "phi-4-mini": <|user|>...<|end|> */
    KVANT_CHAT_PHI4,            /* "phi-4": <|im_start|>role<|im_sep|>...<|im_end|> */
    KVANT_CHAT_MISTRAL_V1,      /* "mistral-v1": <s> [INST] ... [/INST] */
    KVANT_CHAT_MISTRAL_V3,      /* "mistral-v3": <s>[INST] ...[/INST] */
    KVANT_CHAT_MISTRAL_V3_TEKKEN, /* "mistral-v3-tekken": <s>[INST]...[/INST] (Nemo) */
    KVANT_CHAT_MISTRAL_V7,      /* "mistral-v7": [SYSTEM_PROMPT] ...[/SYSTEM_PROMPT][INST] ...[/INST] */
    KVANT_CHAT_MISTRAL_V7_TEKKEN, /* "mistral-v7-tekken": the same without spaces (Mistral Small 3) */
    KVANT_CHAT_ZEPHYR,          /* "zephyr": <|user|>\n...</s>\n */
    KVANT_CHAT_N_TEMPLATES
} kvant_chat_template;

/* One message.  The tool fields are NULL when absent, so {role, content}
 * initializers keep working.  Tool calls and results are rendered in each
 * family's own format (README "Tool calls"). */
typedef struct {
    const char *role;            /* "system", "user", "assistant" or "tool" ("ipython" is "tool") */
    const char *content;         /* UTF-8, NUL-terminated; may be NULL beside tool_calls_json */
    const char *tool_calls_json; /* assistant: the JSON text of OpenAI's tool_calls array,
                                    [{"id", "type": "function", "function": {"name", "arguments"}}]
                                    ("arguments" a JSON text, as OpenAI sends it, or an object);
                                    "[]" is the same as none */
    const char *tool_call_id;    /* tool: the id of the call this is the result of */
    const char *name;            /* tool: the function's name (kept; no template kvant renders uses it) */
} kvant_chat_msg;

/* The template of m's GGUF tokenizer.chat_template (KVANT_CHAT_PLAIN when
 * it has none or one kvant does not recognise). */
kvant_chat_template kvant_chat_detect(const kvant_model *m);
/* The same for a template text (NULL: KVANT_CHAT_PLAIN). */
kvant_chat_template kvant_chat_detect_text(const char *jinja);
/* By name: the names above, or llama.cpp's for them ("llama3", "phi3",
 * "gemma2"...).  Unknown: KVANT_ERR_ARG, st->msg lists the known names. */
kvant_code kvant_chat_template_by_name(const char *name, kvant_chat_template *out, kvant_status *st);
/* The canonical name of t ("?" when out of range). */
const char *kvant_chat_template_name(kvant_chat_template t);
/* Every canonical name, ", "-separated (static). */
const char *kvant_chat_template_list(void);
/* The prompt for msgs[0..n): malloc'd text (the caller frees it), ending
 * where the assistant's reply begins when add_assistant.  NULL + st:
 * KVANT_ERR_ARG for an unknown role or template, KVANT_ERR_NOMEM. */
char *kvant_chat_render(kvant_chat_template t, const kvant_chat_msg *msgs, int n, bool add_assistant,
                        kvant_status *st);
/* The same with the tools the model may call: tools_json is the JSON text
 * of OpenAI's tools array, [{"type": "function", "function": {"name",
 * "description", "parameters"}}] (NULL: no tools; kvant_chat_render is this
 * with NULL).  Qwen 2.5 / 3, Llama 3.1 / 3.2 and Mistral v3 / v7 (and
 * their Tekken forms) render them as their own templates do; every other
 * template as the generic Hermes-style text README "Tool calls" shows.
 * KVANT_ERR_ARG also when tools_json or a message's tool_calls_json is not
 * a JSON array (of objects). */
char *kvant_chat_render_tools(kvant_chat_template t, const kvant_chat_msg *msgs, int n, const char *tools_json,
                              bool add_assistant, kvant_status *st);

/* A tool call read from the model's reply (malloc'd strings). */
typedef struct {
    char *id;        /* the id the model wrote (Mistral), else one made from id_seed and the call's
                        index: "call_" + 9 letters and digits (Mistral templates: the 9 alone) */
    char *name;      /* the function's name */
    char *arguments; /* the JSON text of its arguments object, compact: {"city":"Paris"} ("{}" when none) */
} kvant_chat_tool_call;

typedef struct {
    char *content;               /* the text outside the calls, trailing whitespace removed when
                                    there are calls; all of the text when there are none */
    kvant_chat_tool_call *calls; /* n_calls of them (NULL when 0) */
    int n_calls;
} kvant_chat_reply;

/* Reads the tool calls in a model's reply text[0..len) as t's family
 * writes them: Qwen / generic <tool_call>{"name", "arguments"}</tool_call>
 * blocks after any text (not inside a leading <think>...</think>), Llama
 * 3.1 / 3.2 a reply that is {"name", "parameters"} objects (";" or space
 * between several) or such objects after <|python_tag|>, Mistral
 * [TOOL_CALLS][{"name", "arguments", "id"}, ...] after any text.  A reply
 * with no calls, or whose calls do not read (malformed JSON, no name,
 * arguments not an object), is all content, n_calls 0: KVANT_OK either way.
 * Call it only when the request gave tools.  Same text and id_seed, same
 * ids.  KVANT_ERR_NOMEM (out emptied) or KVANT_ERR_ARG (template, no out);
 * free with kvant_chat_reply_free. */
kvant_code kvant_chat_parse_tool_calls(kvant_chat_template t, const char *text, size_t len, uint64_t id_seed,
                                       kvant_chat_reply *out, kvant_status *st);
void kvant_chat_reply_free(kvant_chat_reply *r);

/* For streaming a reply while it may hold calls: given the reply so far,
 * text[0..len), whether it is plain text, may still become a call, or a
 * call has begun; *plain_len (if not NULL) is how much of it is surely
 * content and may be sent now.  plain_len never counts trailing whitespace
 * (it is held until something follows: whitespace before a call is not
 * content) and never shrinks as the text grows; kvant_chat_parse_tool_calls'
 * content begins with text[0..plain_len) of every prefix.  Once a call has
 * begun, send nothing more until the reply ends and has been parsed; at the
 * end send what the parsed content has beyond what was sent. */
typedef enum {
    KVANT_CHAT_TOOL_TEXT = 0,  /* no call so far: send text[0..plain_len) */
    KVANT_CHAT_TOOL_MAYBE = 1, /* the end of the text may begin a call: hold it */
    KVANT_CHAT_TOOL_CALL = 2,  /* a call began at or after plain_len */
} kvant_chat_tool_state;

kvant_chat_tool_state kvant_chat_tool_prefix(kvant_chat_template t, const char *text, size_t len, size_t *plain_len);
/* The grammar that forces a tool call (OpenAI's tool_choice "required", or
 * a named function when name is not NULL) in t's format, which
 * kvant_chat_parse_tool_calls reads back: its JSON is an anyOf over the
 * allowed tools of {"name": <the tool's name>, "arguments": <its parameters
 * schema, absent: any object>} (Llama 3.x: "parameters"), compiled by the
 * JSON Schema compiler (README "Structured outputs" lists the keywords).
 * Qwen 2.5 / 3 and every generic (Hermes) template: exactly one
 * "<tool_call>\n" JSON "\n</tool_call>" and nothing else (no <think>);
 * Llama 3.1 / 3.2: the JSON object is the whole reply.  NULL + st:
 * KVANT_ERR_UNSUPPORTED for Mistral templates (their [TOOL_CALLS] is a control
 * token, which a grammar never allows) and for a tool whose parameters kvant
 * cannot compile (*bad_tool, if not NULL, is then its index, else -1; the
 * message begins "tools[i].function.parameters: "), KVANT_ERR_ARG for
 * malformed tools_json (OpenAI's tools array), no tools, or no tool named
 * name.  kvant_chat_tool_gbnf gives the GBNF text (malloc'd), for logs. */
char *kvant_chat_tool_gbnf(kvant_chat_template t, const char *tools_json, const char *name, int *bad_tool,
                           kvant_status *st);
kvant_grammar *kvant_chat_tool_grammar(kvant_model *m, kvant_chat_template t, const char *tools_json,
                                       const char *name, int *bad_tool, kvant_status *st);
/* Tokenizes a rendered prompt as llama.cpp does: the text of special tokens
 * becomes those tokens (parse_special), and BOS is put first when the
 * vocabulary adds one (tokenizer.ggml.add_bos_token) unless the text already
 * begins with it.  Returns the count, -(needed) when max is too small, or
 * INT_MIN when out of memory. */
int kvant_chat_tokenize(const kvant_model *m, const char *text, size_t len, int32_t *tokens, int max);

/* ---- vocabulary only ---------------------------------------------------------
 * The tokenizer of a GGUF file without its weights: any file with
 * tokenizer.ggml.* metadata, also a vocabulary-only one that has no tensors
 * and no architecture (as llama.cpp's vocab_only loads them).  The handle is
 * immutable and may be used from many threads. */
typedef struct kvant_vocab kvant_vocab;

/* NULL with st set when the file cannot be read (KVANT_ERR_IO), is not a
 * GGUF or has no usable tokenizer (KVANT_ERR_FORMAT), or names a tokenizer
 * or pre-tokenizer kvant does not have (KVANT_ERR_UNSUPPORTED). */
kvant_vocab *kvant_vocab_open(const char *path, kvant_status *st);
void kvant_vocab_free(kvant_vocab *v);
int kvant_vocab_n_tokens(const kvant_vocab *v);
/* Encodes UTF-8 text as llama.cpp's llama_tokenize.  add_special: BOS
 * first and EOS last where the vocabulary asks for them
 * (tokenizer.ggml.add_bos_token / add_eos_token).  parse_special: text that
 * spells a control token (e.g. "<|im_end|>") becomes that token; without it
 * only user-defined tokens are.  Returns the token count, -(needed) when
 * max_tokens is too small (tokens untouched), INT32_MIN when out of memory. */
int kvant_vocab_tokenize(const kvant_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                         int32_t *tokens, int max_tokens);
/* The bytes of one token, as it stands (no leading-space rule).  special:
 * control and unknown tokens give their text instead of nothing.  Returns
 * the byte count, -(needed) when cap is too small, 0 for an id outside the
 * vocabulary. */
int kvant_vocab_piece(const kvant_vocab *v, int32_t token, bool special, char *buf, int cap);

#ifdef __cplusplus
}
#endif
#endif
