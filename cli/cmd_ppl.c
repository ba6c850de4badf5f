/* cmd_ppl.c - `kvant ppl`: perplexity (llama.cpp's method by default) and
 * KL divergence from a base model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/int8_flags.h"

static void ppl_help(void) {
    printf("usage: kvant ppl -m MODEL -f TEXT [-c 512] [--chunks N] [--stride S] [--kl-base BASE] [--json]\n"
           "\n"
           "Perplexity of MODEL on a text file.  Default: llama.cpp's perplexity method\n"
           "(non-overlapping chunks of c tokens, BOS first, only the second half of each\n"
           "chunk scored), so the numbers compare with llama.cpp's.  --stride S scores\n"
           "every token with sliding windows of c tokens advancing by S < c.\n"
           "\n"
           "  -m, --model FILE     GGUF or llama2.c model (-z TOKENIZER for llama2.c)\n"
           "  -f, --file TEXT      text file\n"
           "  -c, --ctx N          tokens per chunk (default 512)\n"
           "      --chunks N       evaluate only the first N chunks (default: all)\n"
           "      --stride S       sliding-window mode\n"
           "      --kl-base BASE   also report KL(BASE || MODEL) per token (mean, p99, max),\n"
           "                       the share of tokens with the same top token, and the\n"
           "                       perplexity ratio MODEL / BASE\n"
           "  -t, --threads N      threads (default: all CPUs)\n"
           "      --attn A         flash (default) or naive\n"
           "      --kv-type T      KV cache of the evaluated model: f16 (default), f32, q8_0\n"
           "      --json           print the result as one JSON object\n");
    cli_int8_help();
}

/* a redrawn bar on a terminal; one line per 10% otherwise (logs) */
static void progress(void *user, int done, int total, double ppl) {
    if (!*(const bool *)user) {
        if (done == total || (done * 10 / total) != ((done - 1) * 10 / total))
            fprintf(stderr, "%d/%d chunks, PPL so far %.4f\n", done, total, ppl);
        return;
    }
    const int width = 30, fill = (int)((double)done / total * width);
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : i == fill ? '>' : ' ';
    bar[width] = 0;
    fprintf(stderr, "\r[%s] %d/%d  PPL so far %.4f", bar, done, total, ppl);
    if (done == total) fprintf(stderr, "\n");
    fflush(stderr);
}

int cmd_ppl(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant ppl", false};
    const char *path = NULL, *tokenizer = NULL, *file = NULL, *base_path = NULL;
    kvant_ppl_params p = {.n_ctx = 512};
    int threads = 0;
    bool json = false;
    cli_int8 i8;
    cli_int8_init(&i8);
    kvant_int8 *q8 = NULL;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { ppl_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) path = cli_str(&a);
        else if (cli_is(&a, "-z", "--tokenizer")) tokenizer = cli_str(&a);
        else if (cli_is(&a, "-f", "--file")) file = cli_str(&a);
        else if (cli_is(&a, "-c", "--ctx")) p.n_ctx = cli_int(&a, 4, 1 << 20);
        else if (cli_is(&a, "--chunks", NULL)) p.n_chunks = cli_int(&a, 1, 1 << 30);
        else if (cli_is(&a, "--stride", NULL)) p.stride = cli_int(&a, 1, 1 << 20);
        else if (cli_is(&a, "--kl-base", NULL)) base_path = cli_str(&a);
        else if (cli_is(&a, "-t", "--threads")) threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "--json", NULL)) json = true;
        else if (cli_is(&a, "--attn", NULL)) p.attn = (kvant_attn)cli_choice_arg(&a, cli_attns);
        else if (cli_is(&a, "--kv-type", NULL)) p.kv_type = (kvant_kv_type)cli_choice_arg(&a, cli_kv_types);
        else if (cli_int8_flag(&a, &i8)) {}
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!path || !file) {
        fprintf(stderr, "kvant ppl: -m MODEL and -f TEXT are required (see --help)\n");
        return CLI_USAGE;
    }
    if (p.stride >= p.n_ctx) {
        fprintf(stderr, "kvant ppl: --stride %d must be below the context %d (windows overlap)\n", p.stride, p.n_ctx);
        return CLI_USAGE;
    }
    size_t n = 0;
    char *text = cli_read_file(file, &n);
    if (!text) {
        fprintf(stderr, "kvant ppl: cannot read %s\n", file);
        return CLI_USAGE;
    }

    kvant_status st;
    kvant_model_params mp = {.tokenizer_path = tokenizer, .n_threads = threads};
    kvant_model *m = kvant_model_open(path, &mp, &st), *base = NULL;
    int rc = CLI_FAIL;
    if (!m) {
        fprintf(stderr, "kvant ppl: %s\n", st.msg);
        rc = cli_status_exit(&st);
        goto done;
    }
    if (base_path && !(base = kvant_model_open(base_path, &mp, &st))) {
        fprintf(stderr, "kvant ppl: %s\n", st.msg);
        rc = cli_status_exit(&st);
        goto done;
    }
    p.kl_base = base;
    if ((rc = cli_int8_build(&i8, m, "kvant ppl", &q8)) != CLI_OK) goto done;
    rc = CLI_FAIL;
    cli_int8_describe(&i8, q8, "kvant ppl");
    p.int8 = q8;
    bool tty = isatty(2);
    p.progress = progress;
    p.user = &tty;
    kvant_ppl_result r;
    if (kvant_perplexity(m, text, n, &p, &r, &st)) {
        fprintf(stderr, "\nkvant ppl: %s\n", st.msg);
        rc = st.code == KVANT_ERR_ARG ? CLI_USAGE : CLI_FAIL;
        goto done;
    }
    if (json) {
        printf("{\"model\": \"%s\", \"file\": \"%s\", \"ctx\": %d, \"stride\": %d, \"chunks\": %d, "
               "\"tokens_scored\": %lld, \"text_tokens\": %lld, \"ppl\": %.6f, \"ppl_err\": %.6f, \"seconds\": %.3f",
               path, file, p.n_ctx, p.stride, r.n_chunks, (long long)r.n_scored, (long long)r.n_text_tokens, r.ppl,
               r.ppl_err, r.seconds);
        if (q8) {
            kvant_int8_stats qs;
            kvant_int8_get_stats(q8, &qs);
            printf(", \"int8_mode\": \"%s\", \"smoothquant\": %s, \"alpha\": %.3f, \"threshold\": %.3f, "
                   "\"outlier_cols_per_matmul\": %.4f",
                   cli_choice_name(cli_int8_modes, i8.p.mode), i8.smooth ? "true" : "false", i8.p.alpha, i8.p.threshold,
                   qs.matmuls ? (double)qs.outlier_cols / (double)qs.matmuls : 0.0);
        }
        if (r.has_kl)
            printf(", \"base\": \"%s\", \"base_ppl\": %.6f, \"ppl_ratio\": %.6f, \"kl_mean\": %.6g, \"kl_p99\": %.6g, "
                   "\"kl_max\": %.6g, \"same_top\": %.6f",
                   base_path, r.base_ppl, r.ppl_ratio, r.kl_mean, r.kl_p99, r.kl_max, r.same_top);
        printf("}\n");
    } else {
        printf("%s chunks of %d tokens, %lld tokens scored (%lld in the text), %.1f s\n",
               p.stride ? "sliding" : "llama.cpp-style", p.n_ctx, (long long)r.n_scored, (long long)r.n_text_tokens,
               r.seconds);
        printf("PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
        if (q8) {
            kvant_int8_stats qs;
            kvant_int8_get_stats(q8, &qs);
            if (i8.p.mode == KVANT_INT8_MIXED)
                printf("LLM.int8: %.3f outlier columns per matmul on average (%lld matmuls)\n",
                       qs.matmuls ? (double)qs.outlier_cols / (double)qs.matmuls : 0.0, (long long)qs.matmuls);
        }
        if (r.has_kl) {
            printf("base PPL = %.4f, ratio = %.4f\n", r.base_ppl, r.ppl_ratio);
            printf("KL divergence: mean %.6f, p99 %.6f, max %.6f\n", r.kl_mean, r.kl_p99, r.kl_max);
            printf("same top: %.2f%%\n", 100 * r.same_top);
        }
    }
    rc = CLI_OK;
done:
    kvant_int8_free(q8);
    cli_int8_free(&i8);
    kvant_model_free(base);
    kvant_model_free(m);
    free(text);
    return rc;
}
