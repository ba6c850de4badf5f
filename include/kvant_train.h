/* kvant_train.h - training: fine-tuning, training from a config,
 * distillation, quantization-aware training and iterative pruning, in one
 * loop. */
#ifndef KVANT_PUBLIC_TRAIN_H
#define KVANT_PUBLIC_TRAIN_H

#include "kvant_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- training: train, distill, QAT (train/loop.c) ---------------------------
 * One loop for all three: an FP32 model (from a GGUF, any type dequantized,
 * or from a config with seeded init) trained with AdamW on random windows
 * of a text file's first 90% (the last 10%, from a line start, is the
 * validation part).  With a teacher, the loss is distillation's; with
 * qat_bits, the forward pass sees fake-quantized weights (STE backward). */
typedef struct {
    int step, steps;
    double loss;            /* this step's training loss */
    double val_loss;        /* NaN unless evaluated at this step */
    double lr, grad_norm;
    double tokens_per_s;    /* training tokens per second so far */
    double eta_s;
} kvant_train_progress;

typedef struct {
    const char *model;          /* GGUF to start from (fine-tune, QAT, student); NULL with config */
    const char *config;         /* from scratch: "dim=32,layers=4,heads=4,kv_heads=2,hidden=86"
                                   (+ head_dim, ctx, rope_base, tied=0/1) */
    const char *tokenizer_from; /* GGUF model whose tokenizer (and vocabulary) a config uses */
    const char *teacher;        /* distillation: teacher model (same tokenizer); NULL: none */
    float temp, alpha;          /* distillation temperature and hard-label weight */
    int qat_bits;               /* 2..8: quantization-aware training; 0: off */
    int qat_group;              /* elements per group: 32, 64, 128 (0: per row) */
    bool qat_zeropoint;         /* zero-point (asymmetric) instead of absmax */
    bool qat_clip_mse;          /* PTQ init with MSE-optimal clipping (quantize --clip mse) */
    float prune_sparsity;       /* > 0: iterative magnitude pruning of the layer matrices (not the
                                   embedding / classifier), per output row, to this sparsity */
    int prune_rounds;           /* rounds: round k masks target * (1 - (1 - k/K)^3) of each row,
                                   then fine-tunes steps / K steps with the mask held */
    const char *text_path, *out_path;
    const char *resume;         /* a checkpoint written by kvant_train (its .state beside it) */
    int steps, batch, ctx;      /* total optimizer steps; B sequences of T tokens per step */
    int stop_at;                /* > 0: stop (and write the checkpoint) after this step; the
                                   schedule still spans `steps`, so --resume continues exactly */
    int eval_every;             /* validation loss every K steps (0: only at the start and end) */
    int eval_windows;           /* validation windows of ctx tokens at most (0: 64) */
    int warmup, n_threads;
    float lr, min_lr, weight_decay, clip;
    uint64_t seed;
    const char *log_csv;        /* NULL, or a CSV file: step,loss,val_loss,lr */
    void (*progress)(void *user, const kvant_train_progress *p);
    void *user;
} kvant_train_params;
kvant_train_params kvant_train_default(void);

typedef struct {
    int64_t n_params, n_train_tokens, n_val_tokens;
    double init_val_loss, val_loss, val_ppl;    /* validation (QAT: with quantized weights) */
    double last_loss;                           /* mean training loss of the last 10 steps */
    double sparsity;                            /* pruning: share of zeros in the layer matrices */
    double step_ms, fwd_ms;     /* fastest training step (forward + backward + AdamW; with a
                                   teacher, its forward too); fastest forward only (plain CE),
                                   same batch size and threads */
    double train_tok_s;         /* training tokens / s over the whole run (mean step) */
    double fwd_tok_s;           /* batch tokens / fwd_ms */
    double seconds;
} kvant_train_result;

kvant_code kvant_train(const kvant_train_params *p, kvant_train_result *r, kvant_status *st);

#ifdef __cplusplus
}
#endif
#endif
