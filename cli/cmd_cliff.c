/* cmd_cliff.c - `kvant cliff`: the precision cliff.  Quantizes MODEL with
 * every PTQ scheme x granularity x bit width (and llama.cpp's types), then
 * measures perplexity and KL divergence from MODEL for each; prints a table
 * (or JSON) and plots perplexity against bits per weight with gnuplot. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

typedef struct {
    char name[48];          /* "zp4-g32", "Q4_0" */
    char family[32];        /* plot series: "zp g32", "llama.cpp" */
    const char *scheme, *gran;
    int bits;               /* 0 for llama.cpp types */
    double bpw, ppl, ppl_err, kl_mean, kl_p99, same_top, file_mib;
    bool ok;
} cliff_row;

static void cliff_help(void) {
    printf("usage: kvant cliff -m MODEL -f TEXT [-c 512] [--chunks N] [-o DIR] [--json]\n"
           "                   [--bits 8,6,5,4,3,2] [--schemes absmax,zeropoint]\n"
           "                   [--grans tensor,channel,group:32,group:64,group:128]\n"
           "                   [--clip mse|none] [--calib TEXT|none] [--fallback channel|f16|f32]\n"
           "                   [--no-gptq] [--tensor-bits L] [--no-llama] [-t N]\n"
           "\n"
           "The precision cliff: quantizes MODEL (a GGUF, F32 or F16) with every PTQ\n"
           "scheme x granularity x bit width (kvant quantize --scheme ...), and with\n"
           "llama.cpp's types F16 Q8_0 Q5_1 Q5_0 Q4_1 Q4_0 (kvant quantize TYPE, byte-\n"
           "identical to llama.cpp's files), and measures each file's perplexity on TEXT\n"
           "(llama.cpp's method, as kvant ppl) and its KL divergence from MODEL.  Bits per\n"
           "weight = 8 x tensor bytes / parameters, over ALL tensors (norms and tensors a\n"
           "type cannot hold, e.g. llama.cpp's F32 fallbacks, included).\n"
           "\n"
           "  -o DIR          where the quantized files, cliff.dat, cliff.gp and cliff.png go\n"
           "                  (default: cliff-out)\n"
           "  --clip C        clipping of the PTQ runs (default mse)\n"
           "  --calib T       calibration text for the clipping (default: the last 64 KiB of\n"
           "                  TEXT, written to DIR/calib.txt, disjoint from the chunks scored\n"
           "                  unless TEXT is short); none: unweighted\n"
           "  --no-gptq       no GPTQ error compensation (default: GPTQ when calibrated)\n"
           "  --tensor-bits L other widths for some tensors (kvant quantize --tensor-bits)\n"
           "  --json          print the table as one JSON object\n"
           "  --no-llama      skip llama.cpp's types\n"
           "Progress on stderr; the table on stdout.\n");
}

/* splits a comma list into at most max items (pointers into a copy) */
static int split(char *s, const char **out, int max) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok && n < max; tok = strtok(NULL, ",")) out[n++] = tok;
    return n;
}

static double file_mib(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? sb.st_size / 1048576.0 : 0.0;
}

/* perplexity + KL of one file; fills r */
static bool measure(const char *path, kvant_model *base, const char *text, size_t len, const kvant_ppl_params *pp,
                    int n_threads, cliff_row *r) {
    kvant_status st;
    kvant_model_params mp = {.n_threads = n_threads};
    kvant_model *m = kvant_model_open(path, &mp, &st);
    if (!m) { fprintf(stderr, "kvant cliff: %s: %s\n", path, st.msg); return false; }
    kvant_model_info info;
    kvant_model_get_info(m, &info);
    r->bpw = info.n_params ? 8.0 * (double)info.weight_bytes / (double)info.n_params : 0.0;
    r->file_mib = file_mib(path);
    kvant_ppl_params p = *pp;
    p.kl_base = base;
    kvant_ppl_result res;
    bool ok = kvant_perplexity(m, text, len, &p, &res, &st) == KVANT_OK;
    if (!ok) fprintf(stderr, "kvant cliff: %s: %s\n", path, st.msg);
    else {
        r->ppl = res.ppl;
        r->ppl_err = res.ppl_err;
        r->kl_mean = res.kl_mean;
        r->kl_p99 = res.kl_p99;
        r->same_top = res.same_top;
        r->ok = true;
    }
    kvant_model_free(m);
    return ok;
}

static void write_plot(const char *dir, const cliff_row *rows, int n, const char *model, double base_ppl) {
    char path[1024];
    snprintf(path, sizeof path, "%s/cliff.dat", dir);
    FILE *f = fopen(path, "w");
    if (!f) { fprintf(stderr, "kvant cliff: cannot write %s\n", path); return; }
    /* one gnuplot data block per family (blank-line separated, indexed) */
    char fams[32][32];
    int nf = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int k = 0; k < nf; k++) seen |= !strcmp(fams[k], rows[i].family);
        if (!seen && nf < 32) snprintf(fams[nf++], 32, "%s", rows[i].family);
    }
    for (int k = 0; k < nf; k++) {
        fprintf(f, "# %s\n", fams[k]);
        for (int i = 0; i < n; i++)
            if (rows[i].ok && !strcmp(rows[i].family, fams[k]))
                fprintf(f, "%.4f %.5f %s %.6f\n", rows[i].bpw, rows[i].ppl, rows[i].name, rows[i].kl_mean);
        fprintf(f, "\n\n");
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/cliff.gp", dir);
    f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "set terminal pngcairo size 1200,800 font ',11'\nset output '%s/cliff.png'\n"
               "set title 'precision cliff: %s (perplexity vs bits per weight, all tensors counted)' noenhanced\n"
               "set xlabel 'bits per weight (tensor bytes x 8 / parameters)'\nset ylabel 'perplexity (log scale)'\n"
               "set logscale y\nset grid\nset key outside right top noenhanced\n"
               "set arrow from graph 0, first %.5f to graph 1, first %.5f nohead dt 2 lc rgb 'gray'\n"
               "plot ", dir, model, base_ppl, base_ppl);
    for (int k = 0; k < nf; k++) {
        const bool llama = !strcmp(fams[k], "llama.cpp");
        fprintf(f, "%s'%s/cliff.dat' index %d using 1:2 with %s title '%s'", k ? ", \\\n     " : "", dir, k,
                llama ? "points pt 7 ps 1.8 lc rgb 'black'" : "linespoints pt 5", fams[k]);
        if (llama)
            fprintf(f, ", \\\n     '%s/cliff.dat' index %d using 1:2:3 with labels offset 1.5,0.6 noenhanced notitle", dir, k);
    }
    fprintf(f, "\n");
    fclose(f);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "gnuplot '%s/cliff.gp'", dir);
    if (system(cmd) != 0) fprintf(stderr, "kvant cliff: gnuplot failed (the data is in %s/cliff.dat)\n", dir);
    else fprintf(stderr, "plot: %s/cliff.png\n", dir);
}

static void print_json(FILE *f, const cliff_row *rows, int n, const char *model, const char *text_path, int n_ctx,
                       const kvant_ppl_result *base, const char *clip, const char *calib, bool gptq) {
    const kvant_ppl_result base_res = *base;
    fprintf(f, "{\"model\": \"%s\", \"text\": \"%s\", \"n_ctx\": %d, \"chunks\": %d, \"base_ppl\": %.6f, \"clip\": \"%s\", "
           "\"calib\": \"%s\", \"gptq\": %s, \"rows\": [", model, text_path, n_ctx, base_res.n_chunks, base_res.ppl, clip,
           calib ? calib : "none", gptq && calib ? "true" : "false");
    for (int i = 0; i < n; i++) {
        const cliff_row *r = &rows[i];
        fprintf(f, "%s\n  {\"name\": \"%s\", \"family\": \"%s\", \"bits\": %d, \"bpw\": %.4f, \"file_mib\": %.4f, \"ok\": %s, "
               "\"ppl\": %.6f, \"ppl_err\": %.6f, \"kl_mean\": %.6f, \"kl_p99\": %.6f, \"same_top\": %.6f}",
               i ? "," : "", r->name, r->family, r->bits, r->bpw, r->file_mib, r->ok ? "true" : "false", r->ppl,
               r->ppl_err, r->kl_mean, r->kl_p99, r->same_top);
    }
    fprintf(f, "\n]}\n");
}

int cmd_cliff(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant cliff", false};
    const char *model = NULL, *text_path = NULL, *dir = "cliff-out", *calib = NULL;
    kvant_ptq_clip clip_v = KVANT_PTQ_CLIP_MSE;
    kvant_ptq_fallback fallback = KVANT_PTQ_FALLBACK_CHANNEL;
    char bits_s[64] = "8,6,5,4,3,2", schemes_s[64] = "absmax,zeropoint",
         grans_s[128] = "tensor,channel,group:32,group:64,group:128";
    int n_ctx = 512, n_chunks = 0, n_threads = 0;
    bool json = false, llama = true, gptq = true;
    const char *tensor_bits = NULL;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { cliff_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) model = cli_str(&a);
        else if (cli_is(&a, "-f", "--file")) text_path = cli_str(&a);
        else if (cli_is(&a, "-c", "--ctx")) n_ctx = cli_int(&a, 8, 1 << 20);
        else if (cli_is(&a, "--chunks", NULL)) n_chunks = cli_int(&a, 1, 1 << 30);
        else if (cli_is(&a, "-o", "--out-dir")) dir = cli_str(&a);
        else if (cli_is(&a, "--clip", NULL)) clip_v = (kvant_ptq_clip)cli_choice_arg(&a, cli_ptq_clips);
        else if (cli_is(&a, "--calib", NULL)) calib = cli_str(&a);
        else if (cli_is(&a, "--fallback", NULL)) fallback = (kvant_ptq_fallback)cli_choice_arg(&a, cli_ptq_fallbacks);
        else if (cli_is(&a, "--bits", NULL)) { const char *v = cli_str(&a); if (v) snprintf(bits_s, sizeof bits_s, "%s", v); }
        else if (cli_is(&a, "--schemes", NULL)) { const char *v = cli_str(&a); if (v) snprintf(schemes_s, sizeof schemes_s, "%s", v); }
        else if (cli_is(&a, "--grans", NULL)) { const char *v = cli_str(&a); if (v) snprintf(grans_s, sizeof grans_s, "%s", v); }
        else if (cli_is(&a, "--json", NULL)) json = true;
        else if (cli_is(&a, "--no-llama", NULL)) llama = false;
        else if (cli_is(&a, "--no-gptq", NULL)) gptq = false;
        else if (cli_is(&a, "--tensor-bits", NULL)) tensor_bits = cli_str(&a);
        else if (cli_is(&a, "-t", "--threads")) n_threads = cli_int(&a, 1, 1024);
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    const char *clip = cli_choice_name(cli_ptq_clips, clip_v);
    if (!model || !text_path) { fprintf(stderr, "kvant cliff: -m MODEL and -f TEXT are required (see --help)\n"); return CLI_USAGE; }
    if (access(model, R_OK) || access(text_path, R_OK)) {
        fprintf(stderr, "kvant cliff: cannot open %s\n", access(model, R_OK) ? model : text_path);
        return CLI_USAGE;
    }
    const char *bits_l[8], *schemes_l[4], *grans_l[8];
    const int nb = split(bits_s, bits_l, 8), ns = split(schemes_s, schemes_l, 4), ng = split(grans_s, grans_l, 8);
    kvant_ptq_scheme schemes_v[4];
    kvant_ptq_granularity grans_v[8];
    int groups_v[8];
    for (int i = 0; i < ns; i++) {
        int v;
        if (!cli_choice_of(cli_ptq_schemes, schemes_l[i], &v)) {
            fprintf(stderr, "kvant cliff: unknown scheme '%s' in --schemes (absmax, zeropoint)\n", schemes_l[i]);
            return CLI_USAGE;
        }
        schemes_v[i] = (kvant_ptq_scheme)v;
    }
    for (int i = 0; i < ng; i++)
        if (!cli_granularity_of(grans_l[i], &grans_v[i], &groups_v[i])) {
            fprintf(stderr, "kvant cliff: bad granularity '%s' in --grans (tensor, channel, group:G)\n", grans_l[i]);
            return CLI_USAGE;
        }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) { fprintf(stderr, "kvant cliff: cannot create %s\n", dir); return CLI_FAIL; }

    size_t len = 0;
    char *text = cli_read_file(text_path, &len);
    if (!text) { fprintf(stderr, "kvant cliff: cannot read %s\n", text_path); return CLI_FAIL; }
    char calib_path[1024];
    if (!calib) { /* the text's last 64 KiB */
        snprintf(calib_path, sizeof calib_path, "%s/calib.txt", dir);
        FILE *f = fopen(calib_path, "wb");
        const size_t n = len < 65536 ? len : 65536;
        if (!f || fwrite(text + len - n, 1, n, f) != n) { fprintf(stderr, "kvant cliff: cannot write %s\n", calib_path); if (f) fclose(f); free(text); return CLI_FAIL; }
        fclose(f);
        calib = calib_path;
    } else if (!strcmp(calib, "none")) calib = NULL;

    kvant_status st;
    kvant_model_params mp = {.n_threads = n_threads};
    kvant_model *base = kvant_model_open(model, &mp, &st);
    if (!base) { fprintf(stderr, "kvant cliff: %s\n", st.msg); free(text); return cli_status_exit(&st); }
    kvant_ppl_params pp = {.n_ctx = n_ctx, .n_chunks = n_chunks};
    kvant_ppl_result base_res;
    if (kvant_perplexity(base, text, len, &pp, &base_res, &st)) { fprintf(stderr, "kvant cliff: %s\n", st.msg); kvant_model_free(base); free(text); return CLI_FAIL; }
    fprintf(stderr, "base %s: PPL %.4f over %d chunks\n", model, base_res.ppl, base_res.n_chunks);

    const int cap = ns * ng * nb + 8;
    cliff_row *rows = calloc((size_t)cap, sizeof *rows);
    int n = 0;
    static const char *const k_llama[] = {"F16", "Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0"};
    for (int i = 0; llama && i < 6; i++) {
        cliff_row *r = &rows[n++];
        snprintf(r->name, sizeof r->name, "%s", k_llama[i]);
        snprintf(r->family, sizeof r->family, "llama.cpp");
        char out[1024];
        snprintf(out, sizeof out, "%s/llama-%s.gguf", dir, k_llama[i]);
        kvant_quantize_params qp = {.n_threads = n_threads, .quiet = true};
        if (!cli_ftype_of(k_llama[i], &qp.type)) continue; /* every one of them is in kvant's list */
        if (kvant_quantize(model, out, &qp, &st)) { fprintf(stderr, "kvant cliff: %s: %s\n", k_llama[i], st.msg); continue; }
        measure(out, base, text, len, &pp, n_threads, r);
        fprintf(stderr, "[%3d/%3d] %-16s %6.3f bpw  PPL %.4f  KL %.5f\n", n, cap - 8 + (llama ? 6 : 0), r->name, r->bpw, r->ppl, r->kl_mean);
    }
    for (int si = 0; si < ns; si++)
        for (int gi = 0; gi < ng; gi++)
            for (int bi = 0; bi < nb; bi++) {
                cliff_row *r = &rows[n++];
                r->scheme = schemes_l[si];
                r->gran = grans_l[gi];
                r->bits = atoi(bits_l[bi]);
                const char *g = grans_l[gi];
                const char *gs = !strncmp(g, "group:", 6) ? g + 6 : g;
                const bool zp = schemes_v[si] == KVANT_PTQ_ZEROPOINT;
                snprintf(r->name, sizeof r->name, "%s%d-%s%s", zp ? "zp" : "absmax", r->bits,
                         !strncmp(g, "group:", 6) ? "g" : "", gs);
                snprintf(r->family, sizeof r->family, "%s %s%s", zp ? "zp" : "absmax", !strncmp(g, "group:", 6) ? "g" : "", gs);
                char out[1024];
                snprintf(out, sizeof out, "%s/ptq-%s.gguf", dir, r->name);
                kvant_ptq_params qp = {.scheme = schemes_v[si], .granularity = grans_v[gi], .group = groups_v[gi],
                                       .bits = r->bits, .clip = clip_v,
                                       .calib_path = calib, .gptq = gptq && calib, .fallback = fallback,
                                       .tensor_bits = tensor_bits, .n_threads = n_threads, .quiet = true};
                if (kvant_ptq_quantize(model, out, &qp, NULL, &st)) { fprintf(stderr, "kvant cliff: %s: %s\n", r->name, st.msg); continue; }
                measure(out, base, text, len, &pp, n_threads, r);
                fprintf(stderr, "[%3d/%3d] %-16s %6.3f bpw  PPL %.4f  KL %.5f\n", n, cap - 8 + (llama ? 6 : 0), r->name, r->bpw, r->ppl, r->kl_mean);
            }

    {
        char jp[1024];
        snprintf(jp, sizeof jp, "%s/cliff.json", dir);
        FILE *jf = fopen(jp, "w");
        if (jf) { print_json(jf, rows, n, model, text_path, n_ctx, &base_res, clip, calib, gptq); fclose(jf); }
    }
    if (json) {
        print_json(stdout, rows, n, model, text_path, n_ctx, &base_res, clip, calib, gptq);
    } else {
        printf("precision cliff: %s on %s, c=%d, %d chunks; base PPL %.4f; PTQ clip %s, calibration %s, GPTQ %s\n",
               model, text_path, n_ctx, base_res.n_chunks, base_res.ppl, clip, calib ? calib : "none",
               gptq && calib ? "on" : "off");
        printf("| %-16s | %6s | %8s | %9s | %8s | %8s | %8s | %8s |\n", "type", "bits", "bpw", "file MiB", "PPL",
               "KL mean", "KL p99", "same top");
        printf("|------------------|--------|----------|-----------|----------|----------|----------|----------|\n");
        for (int i = 0; i < n; i++) {
            const cliff_row *r = &rows[i];
            if (!r->ok) { printf("| %-16s | failed |\n", r->name); continue; }
            printf("| %-16s | %6d | %8.3f | %9.3f | %8.4f | %8.5f | %8.5f | %7.2f%% |\n", r->name, r->bits, r->bpw,
                   r->file_mib, r->ppl, r->kl_mean, r->kl_p99, 100.0 * r->same_top);
        }
    }
    write_plot(dir, rows, n, model, base_res.ppl);
    free(rows);
    kvant_model_free(base);
    free(text);
    return CLI_OK;
}
