/* cmd_outliers.c - `kvant outliers`: activation magnitudes at the inputs of
 * every linear layer, per layer and dimension, and which hidden dimensions
 * meet LLM.int8's outlier criterion; a table, JSON, and a gnuplot heatmap. */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/int8_flags.h"

static void help(void) {
    printf("usage: kvant outliers -m MODEL --calib TEXT [--tokens N] [--threshold 6.0] [--min-layers 0.25]\n"
           "                      [--min-tokens 0.06] [-o heatmap.png] [--json] [--top N]\n"
           "\n"
           "Runs up to N tokens of TEXT (chunks of -c tokens, BOS first) and records, at the\n"
           "input of every linear layer (attn_in: wq/wk/wv, wo_in, ffn_in: gate/up, down_in)\n"
           "and for every dimension: max |x|, mean |x| and the share of tokens with\n"
           "|x| >= threshold.  A hidden dimension is an outlier (LLM.int8's criterion) when\n"
           "|x| >= threshold at >= min-layers of the 2 x n_layers attn_in/ffn_in inputs and\n"
           "in >= min-tokens of the tokens (a token counts if any of those inputs reached it).\n"
           "\n"
           "  -m, --model FILE     GGUF or llama2.c model (-z TOKENIZER for llama2.c)\n"
           "      --calib TEXT     text file to run\n"
           "      --tokens N       tokens to run (default 4096)\n"
           "  -c, --ctx N          tokens per chunk (default 512)\n"
           "      --threshold X    outlier magnitude (default 6.0)\n"
           "      --min-layers F   share of layer inputs (default 0.25)\n"
           "      --min-tokens F   share of tokens (default 0.06)\n"
           "  -o, --output PNG     heatmap of max |x| per (layer input, hidden dim), drawn by\n"
           "                       gnuplot; PNG.dat and PNG.gp are written beside it\n"
           "      --top N          hidden dims listed by max |x| (default 12)\n"
           "  -t, --threads N      threads (default: all CPUs)\n"
           "      --json           the report as one JSON object (per-site arrays included)\n"
           "      --inject-outliers D1,D2,..  synthetic outliers (see below), --inject-scale S\n"
           "      --smoothquant --calib-tokens N --alpha A  measure after SmoothQuant's folding\n"
           "                       (calibrated on the same --calib text)\n"
           "\n"
           "--inject-outliers multiplies the listed hidden dims by --inject-scale (default 20)\n"
           "at every attn/ffn norm and divides the matching wq/wk/wv/gate/up columns by it:\n"
           "the model computes the same function, with outlier activations.\n");
}

static void progress(void *user, int done, int total) {
    if (*(bool *)user || done == total) fprintf(stderr, "%schunk %d/%d%s", *(bool *)user ? "\r" : "", done, total,
                                                done == total || !*(bool *)user ? "\n" : "");
}

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *v = ctx;
    const float x = v[*(const int *)a], y = v[*(const int *)b];
    return x < y ? 1 : x > y ? -1 : 0;
}

static void json_farr(const float *v, int n) {
    printf("[");
    for (int i = 0; i < n; i++) printf("%s%.4g", i ? "," : "", v[i]);
    printf("]");
}

static int heatmap(const kvant_outlier_report *r, const char *png, const char *model, float thr) {
    char dat[4200], gp[4200];
    snprintf(dat, sizeof dat, "%s.dat", png);
    snprintf(gp, sizeof gp, "%s.gp", png);
    FILE *f = fopen(dat, "w");
    if (!f) {
        fprintf(stderr, "kvant outliers: cannot write %s\n", dat);
        return CLI_FAIL;
    }
    const int C = r->dim;
    for (int l = 0; l < r->n_layers; l++)
        for (int site = 0; site <= 2; site += 2) {
            for (int j = 0; j < C; j++) {
                const float v = r->max_abs[site][(size_t)l * C + j];
                fprintf(f, "%s%.5g", j ? " " : "", v > 1e-3f ? v : 1e-3f);
            }
            fprintf(f, "\n");
        }
    fclose(f);
    if (!(f = fopen(gp, "w"))) {
        fprintf(stderr, "kvant outliers: cannot write %s\n", gp);
        return CLI_FAIL;
    }
    const char *base = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
    fprintf(f, "set terminal pngcairo size 1200,%d\n", 300 + 24 * 2 * r->n_layers);
    fprintf(f, "set output '%s'\n", png);
    fprintf(f, "set title \"%s: max |x| at the inputs of wq/wk/wv (attn) and gate/up (ffn), %lld tokens; "
               "outlier threshold %g\" noenhanced\n", base, (long long)r->n_tokens, thr);
    fprintf(f, "set xlabel 'hidden dimension'\nset ylabel 'layer input'\nset logscale cb\nset cblabel 'max |x|'\n");
    fprintf(f, "set palette rgbformulae 33,13,10\nset xrange [-0.5:%d.5]\nset yrange [%d.5:-0.5]\nset ytics (", C - 1,
            2 * r->n_layers - 1);
    for (int i = 0; i < 2 * r->n_layers; i++)
        fprintf(f, "%s\"L%d %s\" %d", i ? ", " : "", i / 2, i % 2 ? "ffn" : "attn", i);
    fprintf(f, ")\nplot '%s' matrix with image notitle\n", dat);
    fclose(f);
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "gnuplot '%s'", gp);
    const int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "kvant outliers: gnuplot failed (%d); data in %s, script in %s\n", rc, dat, gp);
        return CLI_FAIL;
    }
    fprintf(stderr, "kvant outliers: heatmap %s (data %s, script %s)\n", png, dat, gp);
    return CLI_OK;
}

int cmd_outliers(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant outliers", false};
    const char *path = NULL, *tokenizer = NULL, *png = NULL;
    kvant_outlier_params op = kvant_outlier_default();
    int threads = 0, top = 12;
    bool json = false;
    cli_int8 i8;
    cli_int8_init(&i8);
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) path = cli_str(&a);
        else if (cli_is(&a, "-z", "--tokenizer")) tokenizer = cli_str(&a);
        else if (cli_is(&a, "--tokens", NULL)) op.max_tokens = cli_int(&a, 1, 1 << 24);
        else if (cli_is(&a, "-c", "--ctx")) op.ctx = cli_int(&a, 2, 1 << 20);
        else if (cli_is(&a, "--threshold", NULL)) op.threshold = cli_float(&a, 0.0f, 1e30f);
        else if (cli_is(&a, "--min-layers", NULL)) op.min_layers = cli_float(&a, 0.0f, 1.0f);
        else if (cli_is(&a, "--min-tokens", NULL)) op.min_tokens = cli_float(&a, 0.0f, 1.0f);
        else if (cli_is(&a, "-o", "--output")) png = cli_str(&a);
        else if (cli_is(&a, "--top", NULL)) top = cli_int(&a, 0, 1 << 20);
        else if (cli_is(&a, "-t", "--threads")) threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "--json", NULL)) json = true;
        else if (cli_int8_flag(&a, &i8)) {}
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!path || !i8.calib_path) {
        fprintf(stderr, "kvant outliers: -m MODEL and --calib TEXT are required (see --help)\n");
        return CLI_USAGE;
    }
    if (i8.mixed || i8.w8a8 || (i8.mode_set && i8.mode != KVANT_INT8_NONE)) {
        fprintf(stderr, "kvant outliers: measures F32 activations; --int8-mixed/--w8a8/--int8-mode do not apply\n");
        return CLI_USAGE;
    }
    i8.mode = KVANT_INT8_NONE, i8.mode_set = true;
    i8.any = i8.smooth || i8.p.n_inject > 0; /* --calib alone is the text to measure */
    size_t n = 0;
    char *text = cli_read_file(i8.calib_path, &n);
    if (!text) {
        fprintf(stderr, "kvant outliers: cannot read %s\n", i8.calib_path);
        return CLI_USAGE;
    }
    kvant_status st;
    kvant_model_params mp = {.tokenizer_path = tokenizer, .n_threads = threads};
    kvant_model *m = kvant_model_open(path, &mp, &st);
    kvant_int8 *q8 = NULL;
    kvant_outlier_report r = {0};
    int rc = CLI_FAIL;
    if (!m) {
        fprintf(stderr, "kvant outliers: %s\n", st.msg);
        rc = cli_status_exit(&st);
        goto done;
    }
    if ((rc = cli_int8_build(&i8, m, "kvant outliers", &q8)) != CLI_OK) goto done;
    rc = CLI_FAIL;
    cli_int8_describe(&i8, q8, "kvant outliers");
    bool tty = isatty(2);
    op.transform = q8;
    op.progress = progress;
    op.user = &tty;
    if (kvant_outliers(m, text, n, &op, &r, &st)) {
        fprintf(stderr, "kvant outliers: %s\n", st.msg);
        rc = st.code == KVANT_ERR_ARG ? CLI_USAGE : CLI_FAIL;
        goto done;
    }
    const int C = r.dim, L = r.n_layers;
    /* hidden dims: max over layers of attn_in / ffn_in */
    float *hmax = calloc((size_t)C, sizeof(float)), *hmean = calloc((size_t)C, sizeof(float));
    int *order = malloc(sizeof(int) * (size_t)C);
    if (!hmax || !hmean || !order) {
        free(hmax); free(hmean); free(order);
        fprintf(stderr, "kvant outliers: out of memory\n");
        goto done;
    }
    for (int j = 0; j < C; j++) {
        order[j] = j;
        for (int l = 0; l < L; l++)
            for (int s = 0; s <= 2; s += 2) {
                const size_t k = (size_t)l * C + j;
                if (r.max_abs[s][k] > hmax[j]) hmax[j] = r.max_abs[s][k];
                hmean[j] += r.mean_abs[s][k] / (2.0f * L);
            }
    }
    qsort_r(order, (size_t)C, sizeof(int), cmp_desc, hmax);
    if (json) {
        printf("{\"model\": \"%s\", \"tokens\": %lld, \"layers\": %d, \"dim\": %d, \"threshold\": %g, "
               "\"min_layers\": %g, \"min_tokens\": %g, \"n_outliers\": %d, \"outliers\": [",
               path, (long long)r.n_tokens, L, C, op.threshold, op.min_layers, op.min_tokens, r.n_outliers);
        for (int j = 0, k = 0; j < C; j++)
            if (r.is_outlier[j]) printf("%s%d", k++ ? "," : "", j);
        printf("], \"dims\": [");
        for (int j = 0; j < C; j++)
            printf("%s{\"dim\": %d, \"max_abs\": %.5g, \"mean_abs\": %.5g, \"layer_share\": %.4f, "
                   "\"token_share\": %.4f, \"outlier\": %s}",
                   j ? ", " : "", j, hmax[j], hmean[j], r.layer_share[j], r.token_share[j],
                   r.is_outlier[j] ? "true" : "false");
        printf("], \"sites\": {");
        for (int s = 0; s < KVANT_N_SITES; s++) {
            printf("%s\"%s\": {\"dims\": %d, \"max_abs\": [", s ? ", " : "", r.site_name[s], r.site_dim[s]);
            for (int l = 0; l < L; l++) {
                printf("%s", l ? "," : "");
                json_farr(r.max_abs[s] + (size_t)l * r.site_dim[s], r.site_dim[s]);
            }
            printf("], \"mean_abs\": [");
            for (int l = 0; l < L; l++) {
                printf("%s", l ? "," : "");
                json_farr(r.mean_abs[s] + (size_t)l * r.site_dim[s], r.site_dim[s]);
            }
            printf("], \"share_over\": [");
            for (int l = 0; l < L; l++) {
                printf("%s", l ? "," : "");
                json_farr(r.share_over[s] + (size_t)l * r.site_dim[s], r.site_dim[s]);
            }
            printf("]}");
        }
        printf("}}\n");
    } else {
        printf("%lld tokens, %d layers; threshold %g, criterion: >= %.0f%% of the %d attn_in/ffn_in inputs and "
               ">= %.0f%% of tokens\n\n",
               (long long)r.n_tokens, L, op.threshold, 100 * op.min_layers, 2 * L, 100 * op.min_tokens);
        printf("per layer input: max |x| (dim), mean |x|, dims with some |x| >= %g, share of values >= %g\n",
               op.threshold, op.threshold);
        printf("%5s %-8s %6s %10s %6s %9s %7s %10s\n", "layer", "input", "dims", "max |x|", "dim", "mean |x|",
               ">=thr", "share");
        for (int l = 0; l < L; l++)
            for (int s = 0; s < KVANT_N_SITES; s++) {
                const int D = r.site_dim[s];
                const float *mx = r.max_abs[s] + (size_t)l * D, *mn = r.mean_abs[s] + (size_t)l * D,
                            *sh = r.share_over[s] + (size_t)l * D;
                int arg = 0, over = 0;
                double mean = 0, share = 0;
                for (int j = 0; j < D; j++) {
                    if (mx[j] > mx[arg]) arg = j;
                    over += mx[j] >= op.threshold;
                    mean += mn[j] / D;
                    share += sh[j] / D;
                }
                printf("%5d %-8s %6d %10.3f %6d %9.4f %7d %9.4f%%\n", l, r.site_name[s], D, mx[arg], arg, mean, over,
                       100 * share);
            }
        printf("\nhidden dims by max |x| (attn_in and ffn_in of all layers):\n");
        printf("%6s %10s %10s %12s %12s %8s\n", "dim", "max |x|", "mean |x|", "layer share", "token share", "outlier");
        for (int i = 0; i < top && i < C; i++) {
            const int j = order[i];
            printf("%6d %10.3f %10.4f %11.1f%% %11.2f%% %8s\n", j, hmax[j], hmean[j], 100 * r.layer_share[j],
                   100 * r.token_share[j], r.is_outlier[j] ? "yes" : "no");
        }
        printf("\n%d of %d hidden dims meet the criterion", r.n_outliers, C);
        if (r.n_outliers) {
            printf(":");
            for (int j = 0; j < C; j++)
                if (r.is_outlier[j]) printf(" %d", j);
        }
        printf("\n");
    }
    free(hmax);
    free(hmean);
    free(order);
    rc = png ? heatmap(&r, png, path, op.threshold) : CLI_OK;
done:
    kvant_outlier_report_free(&r);
    kvant_int8_free(q8);
    cli_int8_free(&i8);
    kvant_model_free(m);
    free(text);
    return rc;
}
