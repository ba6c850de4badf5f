/* train/convert.h - between train_model and kvant's models / GGUF files. */
#ifndef KVANT_TRAIN_CONVERT_H
#define KVANT_TRAIN_CONVERT_H

#include "format/gguf.h"
#include "model/model.h"
#include "train/train.h"

train_config train_config_of(const model *m);
/* an FP32 copy of m's weights (any stored type, dequantized) */
train_model *train_model_from(const model *m, kvant_status *st);

/* How a checkpoint's matrices are written: the default is F32; a hook
 * can write them another way (QAT export in a quantized format) and add
 * metadata. */
typedef struct {
    void *user;
    void (*meta)(void *user, gguf_writer *w);
    kvant_code (*tensor)(void *user, gguf_writer *w, const char *name, const float *data, int64_t cols, int64_t rows,
                         kvant_status *st);
} train_save_hook;
/* Writes weights P (NULL: t->p) as a llama GGUF named `name`, with
 * tok_src's tokenizer (a GGUF model). */
kvant_code train_model_save(const train_model *t, const float *P, const model *tok_src, const char *name,
                            const char *path, const train_save_hook *hook, kvant_status *st);
/* AdamW moments + step + data RNG, for --resume */
/* fq: NULL, or QAT's held scales / zero-points, saved too (so a resumed QAT
 * run quantizes exactly as the interrupted one) */
kvant_code train_state_save(const train_model *t, const char *path, uint64_t rng, const train_fq *fq,
                            kvant_status *st);
/* QAT: replaces fq's scales / zero-points with those saved in the state file */
kvant_code train_state_load_fq(train_fq *fq, const char *path, kvant_status *st);
kvant_code train_state_load(train_model *t, const char *path, uint64_t *rng, kvant_status *st);

#endif
