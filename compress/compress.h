/* compress/ - making models smaller.  So far: llama.cpp-compatible
 * quantization of GGUF files to ggml's types and llama.cpp's mixes
 * (Q4_K_M, ...), with the same per-tensor type choices llama.cpp makes. */
#ifndef KVANT_COMPRESS_H
#define KVANT_COMPRESS_H

#include "core/core.h"
#include "format/gguf.h"

/* A target file type: a default tensor type plus llama.cpp's mix rules. */
typedef struct {
    const char *name;   /* "Q4_K_M", "Q8_0", "F16", ... */
    int ftype;          /* llama.cpp's general.file_type number */
    int base_type;      /* kern_type for most matrices */
    enum { MIX_NONE, MIX_K_S, MIX_K_M } mix;
} quant_ftype;

/* NULL if unknown (case-insensitive).  quant_ftype_list: all, for --help. */
const quant_ftype *quant_ftype_find(const char *name);
/* by llama.cpp's general.file_type number; NULL if kvant writes no such type */
const quant_ftype *quant_ftype_of(int ftype);
const quant_ftype *quant_ftype_list(int *n);

/* Per-model state of the type chooser (llama.cpp counts attn_v / ffn_down
 * tensors to decide which layers get more bits). */
typedef struct {
    const quant_ftype *ft;
    bool pure;           /* every matrix in base_type (llama.cpp --pure) */
    int n_layers;
    int n_gqa;           /* n_heads / n_kv_heads */
    bool tied_output;    /* no output.weight: token_embd doubles as it */
    int n_expert;        /* {arch}.expert_count (0: dense) */
    int n_attn_v;        /* attn_v-like tensors in the file (attn_v, attn_qkv); 0: n_layers */
    int i_attn_v, i_ffn_down;
    int n_fallback;
} quant_chooser;

/* The type tensor `name` of shape ne (n_dims) and source type src_type gets.
 * Tensors that are not quantized (1-D, norms) keep src_type.  When the row
 * length does not divide the chosen type's block, falls back as llama.cpp
 * does (K-quant -> 32-block type -> F16) and writes why into note (may be
 * "" when there is nothing to say). */
int quant_choose_type(quant_chooser *qc, const char *name, int n_dims, const int64_t *ne, int src_type,
                      char *note, size_t note_cap);

/* Converts n_rows rows of row_len floats to `type`, rows split across the
 * pool.  out holds kern_row_bytes(type, row_len) * n_rows bytes. */
void quant_rows(core_pool *pool, int type, const float *src, void *out, int64_t n_rows, int64_t row_len);

typedef struct {
    int ftype;          /* quant_ftype number (general.file_type) */
    bool pure;
    int n_threads;      /* 0: all CPUs */
    bool quiet;         /* no progress lines on stderr */
} quant_params;

/* Reads a GGUF, writes it quantized (metadata copied, general.file_type and
 * general.quantization_version set).  One line per tensor on stderr unless
 * quiet.  The input must be a llama-family model file. */
kvant_code quant_file(const char *in_path, const char *out_path, const quant_params *p, kvant_status *st);

#endif
