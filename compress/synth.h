/* compress/synth.h - synthetic models: GGUF files with random weights at a
 * real model's shape, in any type the quantizer writes (compress.h), for
 * benchmarks at sizes ../shared does not hold.  It lives beside the
 * quantizer it writes with; model/ knows nothing of it. */
#ifndef KVANT_COMPRESS_SYNTH_H
#define KVANT_COMPRESS_SYNTH_H

#include "core/core.h"

typedef enum { SYNTH_ROPE_PLAIN, SYNTH_ROPE_LLAMA3, SYNTH_ROPE_LONGROPE } synth_rope;

/* One real model's hyperparameters (from its published config.json); the
 * architecture decides which tensors exist (qwen2: q/k/v biases; qwen3,
 * qwen3moe, gemma3: q/k norms; gemma3: post-attention/FFN norms; phi3:
 * fused attn_qkv and a doubled ffn_up; qwen3moe: router + 3-D experts). */
typedef struct {
    const char *name;
    const char *arch;       /* general.architecture */
    int dim, hidden, n_layers, n_heads, n_kv_heads, vocab, n_ctx;
    int head_dim;           /* > 0: config's head_dim, written as key_length/value_length; 0: dim / n_heads */
    int rope_dim;           /* dims rotated per head; 0: the head dim */
    float rope_base, norm_eps;
    bool tied;              /* no output.weight: the output reuses token_embd */
    int n_expert, n_expert_used, expert_hidden;   /* MoE; 0 = dense */
    int swa_window, swa_pattern;                  /* sliding-window layers (gemma3); 0 = none */
    float rope_base_swa;                          /* their RoPE base */
    synth_rope rope_scaling;                /* LLAMA3: rope_freqs.weight; LONGROPE: rope_factors_long/short */
    float rope_factor, rope_low, rope_high;       /* LLAMA3: factor, low/high frequency factors */
    int rope_orig_ctx;                            /* LLAMA3 / LONGROPE: context before the extension */
    const char *what;       /* the real model whose shape this is */
} synth_shape;

typedef struct {
    const char *shape;      /* a name from synth_shapes() */
    const char *out_path;
    int ftype;              /* llama.cpp general.file_type (quant_ftype_of); 0 = F32 */
    bool pure;
    uint64_t seed;
    int n_threads;
    bool quiet;
    int n_ctx;              /* > 0: context length to declare instead of the shape's */
    int n_layers;           /* > 0: only the first n_layers (<= the shape's); kvant.synthetic_layers_of says so */
    int n_vocab;            /* > 0 (>= 260): vocabulary size instead of the shape's (tests); kvant.synthetic_vocab_of */
    int n_expert;           /* > 0 (>= n_expert_used): expert count instead of the shape's (tests); kvant.synthetic_experts_of */
} synth_params;

const synth_shape *synth_shapes(int *n);
/* Writes a GGUF with random weights at a real model's shape, with its
 * architecture's keys and tensor names as llama.cpp reads them; metadata
 * names it synthetic (general.description, kvant.synthetic = true).
 * Memory: the whole file is built in memory before it is written. */
kvant_code synth_write(const synth_params *p, kvant_status *st);

#endif
