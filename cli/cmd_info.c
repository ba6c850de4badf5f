/* cmd_info.c - `kvant info`: what a model is and what it will cost. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void info_help(void) {
    printf("usage: kvant info -m MODEL [-z TOKENIZER]\n"
           "\n"
           "Prints the architecture, every hyperparameter, the parameter count, the tensor\n"
           "types with their byte totals, every tensor (with --tensors), and the KV cache\n"
           "size: 2 x layers x kv_heads x head_dim x bytes, per token and for the full context.\n"
           "\n"
           "  -m, --model FILE       GGUF (v2/v3) or llama2.c checkpoint (required)\n"
           "  -z, --tokenizer FILE   llama2.c tokenizer.bin (for .bin checkpoints)\n"
           "      --tensors          also list every tensor\n"
           "  -h, --help             this text\n");
}

static void print_bytes(double b) {
    if (b >= 1 << 30) printf("%.2f GiB", b / (1 << 30));
    else if (b >= 1 << 20) printf("%.2f MiB", b / (1 << 20));
    else if (b >= 1 << 10) printf("%.2f KiB", b / (1 << 10));
    else printf("%.0f B", b);
}

int cmd_info(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant info", false};
    const char *path = NULL, *tokenizer = NULL;
    bool list = false;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { info_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) path = cli_str(&a);
        else if (cli_is(&a, "-z", "--tokenizer")) tokenizer = cli_str(&a);
        else if (cli_is(&a, "--tensors", NULL)) list = true;
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!path) {
        fprintf(stderr, "kvant info: no model given: -m MODEL (see --help)\n");
        return CLI_USAGE;
    }
    kvant_status st;
    kvant_model_params mp = {.tokenizer_path = tokenizer, .n_threads = 1, .no_repack = 1};
    kvant_model *m = kvant_model_open(path, &mp, &st);
    if (!m) {
        fprintf(stderr, "kvant info: %s\n", st.msg);
        return cli_status_exit(&st);
    }
    kvant_model_info in;
    kvant_model_get_info(m, &in);

    printf("model:            %s\n", in.name);
    printf("file:             %s (%s)\n", path, in.file_format);
    printf("architecture:     %s\n", in.arch);
    printf("embedding dim:    %d\n", in.dim);
    printf("FFN hidden dim:   %d\n", in.hidden_dim);
    printf("layers:           %d\n", in.n_layers);
    printf("attention heads:  %d\n", in.n_heads);
    printf("KV heads:         %d (%s)\n", in.n_kv_heads,
           in.n_kv_heads == in.n_heads ? "MHA" : in.n_kv_heads == 1 ? "MQA" : "GQA");
    printf("head dim:         %d\n", in.head_dim);
    printf("vocabulary:       %d (%s tokenizer, BOS %d, EOS %d)\n", in.vocab_size, in.tokenizer_model, in.bos_id,
           in.eos_id);
    printf("context length:   %d\n", in.n_ctx_train);
    printf("RMSNorm epsilon:  %g\n", in.norm_eps);
    printf("RoPE:             base %g, %d dims per head, %s ordering\n", in.rope_base, in.rope_dim,
           in.rope_neox ? "NeoX (half-split)" : "adjacent-pair");
    if (in.rope_freqs) printf("RoPE factors:     yes (per-pair frequency factors)\n");
    printf("feed-forward:     GLU, %s gate%s\n", in.activation, in.n_expert ? "" : ", dense");
    if (in.n_expert)
        printf("experts:          %d, %d used per token, %d wide (softmax router, renormalized)\n", in.n_expert,
               in.n_expert_used, in.expert_hidden);
    if (in.swa_window)
        printf("sliding window:   %d positions on %d of %d layers (RoPE base %g there)\n", in.swa_window,
               in.n_swa_layers, in.n_layers, in.rope_base_swa);
    if (in.attn_softcap || in.final_softcap)
        printf("soft-capping:     attention %g, final logits %g\n", in.attn_softcap, in.final_softcap);
    if (in.embd_scale != 1.0f) printf("embedding scale:  %g\n", in.embd_scale);
    if (in.qkv_bias || in.qk_norm || in.post_norms)
        printf("extra tensors:   %s%s%s\n", in.qkv_bias ? " q/k/v biases" : "", in.qk_norm ? " q/k norms" : "",
               in.post_norms ? " post-attention/FFN norms" : "");
    printf("output matrix:    %s\n", in.tied_output ? "tied to the token embedding" : "separate");
    printf("parameters:       %lld (%.3f M)\n", (long long)in.n_params, in.n_params / 1e6);
    printf("weights:          %zu bytes (", in.weight_bytes);
    print_bytes((double)in.weight_bytes);
    printf(")\n");

    /* byte totals per tensor type */
    printf("\ntensor types:\n");
    const int nt = kvant_model_n_tensors(m);
    const char *seen[64];
    int n_seen = 0;
    for (int i = 0; i < nt; i++) {
        kvant_tensor_info ti;
        kvant_model_tensor(m, i, &ti);
        bool dup = false;
        for (int j = 0; j < n_seen; j++) dup |= !strcmp(seen[j], ti.type_name);
        if (dup || n_seen == 64) continue;
        seen[n_seen++] = ti.type_name;
        int count = 0;
        size_t bytes = 0;
        long long elems = 0;
        for (int j = i; j < nt; j++) {
            kvant_tensor_info tj;
            kvant_model_tensor(m, j, &tj);
            if (strcmp(tj.type_name, ti.type_name)) continue;
            count++;
            bytes += tj.nbytes;
            elems += tj.ne[0] * tj.ne[1] * tj.ne[2] * tj.ne[3];
        }
        printf("  %-6s %4d tensors %12lld params %12zu bytes (", ti.type_name, count, elems, bytes);
        print_bytes((double)bytes);
        printf(")\n");
    }
    if (list) {
        printf("\ntensors:\n");
        for (int i = 0; i < nt; i++) {
            kvant_tensor_info ti;
            kvant_model_tensor(m, i, &ti);
            printf("  %-28s %-5s [", ti.name, ti.type_name);
            for (int d = 0; d < ti.n_dims; d++) printf(d ? ", %lld" : "%lld", (long long)ti.ne[d]);
            printf("] %zu bytes\n", ti.nbytes);
        }
    }

    /* KV cache from the formula, in the default type (F16) and the others */
    const long long per_tok = 2LL * in.n_layers * in.n_kv_heads * in.head_dim * 2;
    printf("\nKV cache (2 x layers x kv_heads x head_dim x bytes):\n");
    printf("  per token (F16, the default): 2 x %d x %d x %d x 2 = %lld bytes\n", in.n_layers, in.n_kv_heads,
           in.head_dim, per_tok);
    printf("  full context %d:     %lld bytes (", in.n_ctx_train, per_tok * in.n_ctx_train);
    print_bytes((double)(per_tok * in.n_ctx_train));
    printf(")\n");
    printf("  per token (F32):        %lld bytes; full context %lld bytes\n", per_tok * 2, per_tok * 2 * in.n_ctx_train);
    if (in.head_dim % 32 == 0) /* Q8_0: 34 bytes per 32 values */
        printf("  per token (Q8_0):       %lld bytes; full context %lld bytes\n", per_tok / 2 * 34 / 32,
               per_tok / 2 * 34 / 32 * in.n_ctx_train);
    kvant_model_free(m);
    return CLI_OK;
}
