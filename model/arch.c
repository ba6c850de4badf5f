/* arch.c - one row per GGUF architecture kvant runs: what the families
 * differ in, as data, so that the loader fills model_config and the forward
 * pass (model/llama.c) stays one function with a few guarded steps.
 *
 * Tensor names and `{arch}.*` keys are llama.cpp's (src/llama-arch.cpp,
 * src/llama-model.cpp at 34af94cd9).  What a row says:
 *   neox          RoPE rotates (x[i], x[i + rot/2]) instead of (x[2i], x[2i+1])
 *   act           the gate activation of the GLU feed-forward
 *   embd_sqrt     embeddings are multiplied by sqrt(n_embd) (gemma)
 *   need_*        tensors llama.cpp requires for the architecture (a file
 *                 without them is refused); optional ones (biases, q/k norms,
 *                 rope_freqs, output.weight, fused or separate QKV) are used
 *                 whenever present, in every architecture
 *   swa_pattern   default sliding-window pattern when the file has a window
 *                 but no attention.sliding_window_pattern: layer il is local
 *                 when il % n < n - 1 (gemma2: 2, every other layer)
 *   moe           may carry experts (ffn_gate_inp, ffn_*_exps)
 *
 * Every `{arch}.*` key of a file must be read by the loader or appear in
 * k_ignored_keys (harmless for the computation); anything else is refused,
 * so a file is never run with a setting silently dropped. */
#include <string.h>

#include "model/model.h"

static const model_arch k_archs[] = {
    /* name       neox   act                  embd_sqrt need_bias need_qk_norm need_post swa moe */
    {"llama",     false, MODEL_ACT_SILU,      false,    false,    false,       false,    0,  true},
    {"mistral",   false, MODEL_ACT_SILU,      false,    false,    false,       false,    0,  false},
    {"qwen2",     true,  MODEL_ACT_SILU,      false,    true,     false,       false,    0,  false},
    {"qwen3",     true,  MODEL_ACT_SILU,      false,    false,    true,        false,    0,  false},
    {"qwen3moe",  true,  MODEL_ACT_SILU,      false,    false,    true,        false,    0,  true},
    {"gemma2",    true,  MODEL_ACT_GELU_TANH, true,     false,    false,       true,     2,  false},
    {"gemma3",    true,  MODEL_ACT_GELU_TANH, true,     false,    true,        true,     6,  false},
    {"phi3",      true,  MODEL_ACT_SILU,      false,    false,    false,       false,    0,  false},
};

const model_arch *model_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof k_archs / sizeof *k_archs; i++)
        if (!strcmp(k_archs[i].name, name)) return &k_archs[i];
    return NULL;
}

void model_arch_names(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof k_archs / sizeof *k_archs && n + 1 < cap; i++) {
        const size_t len = strlen(k_archs[i].name);
        if (n + len + 3 >= cap) break;
        if (i) memcpy(buf + n, ", ", 2), n += 2;
        memcpy(buf + n, k_archs[i].name, len + 1);
        n += len;
    }
}

/* `{arch}.<suffix>` keys that change nothing kvant computes */
static const char *const k_ignored_keys[] = {
    "vocab_size",                   /* the embedding's row count is used */
    "tensor_data_layout",           /* informational ("Meta AI original pth") */
    "rope.scaling.finetuned",       /* informational */
    "rope.scaling.original_context_length", /* read only with rope factors (phi3 long/short) */
    "attention.value_length",       /* checked equal to key_length */
    "attention.causal",             /* checked true when present */
    "expert_gating_func",           /* checked softmax when present */
    "expert_weights_norm",          /* checked against the family's rule when present */
    "rope.scaling.type",            /* checked: none or linear */
    NULL,
};

bool model_arch_key_ignored(const char *suffix) {
    for (int i = 0; k_ignored_keys[i]; i++)
        if (!strcmp(k_ignored_keys[i], suffix)) return true;
    return false;
}
