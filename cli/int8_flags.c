/* int8_flags.c - parsing and building the INT8 setup for the commands
 * that run a model (see int8_flags.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/int8_flags.h"

void cli_int8_init(cli_int8 *o) {
    memset(o, 0, sizeof *o);
    o->p = kvant_int8_default();
    o->p.inject_scale = 20.0f;
    o->p.inject_dims = o->inject;
}

void cli_int8_help(void) {
    printf("INT8 (linear layers wq..w_down; the classifier stays as stored):\n"
           "      --int8-mixed     LLM.int8: INT8 per token x INT8 per output channel, plus\n"
           "                       F32 for input columns with some |x| >= threshold\n"
           "      --threshold X    LLM.int8 outlier threshold (default 6.0)\n"
           "      --w8a8           plain W8A8: INT8 weights per output channel x INT8\n"
           "                       activations per token, no outlier handling\n"
           "      --smoothquant    SmoothQuant: fold s_j = max|X_j|^a / max|W_j|^(1-a) from\n"
           "                       calibration into attn_norm/ffn_norm and the wq/wk/wv,\n"
           "                       gate/up columns, then W8A8 (wo, w_down unsmoothed)\n"
           "      --smooth-wo      --smoothquant, and wo's input too: scales per KV head and\n"
           "                       channel folded into wv's rows (w_down stays unsmoothed)\n"
           "      --alpha A        SmoothQuant migration strength (default 0.5)\n"
           "      --calib FILE     calibration text for --smoothquant (required there)\n"
           "      --calib-skip B   skip the first B bytes of FILE (e.g. the evaluated part)\n"
           "      --calib-tokens N calibration tokens (default 4096)\n"
           "      --int8-mode M    w8a8, mixed or f32 (f32: only the transforms, no INT8)\n"
           "      --inject-outliers D1,D2,..  synthetic outliers: multiply these hidden\n"
           "                       dims by --inject-scale (default 20) at every attn/ffn\n"
           "                       norm and divide the matching weight columns by it\n"
           "                       (same function, outlier activations)\n"
           "      --inject-scale S\n");
}

bool cli_int8_flag(cli_args *a, cli_int8 *o) {
    if (cli_is(a, "--int8-mixed", NULL)) o->mixed = true;
    else if (cli_is(a, "--w8a8", NULL)) o->w8a8 = true;
    else if (cli_is(a, "--smoothquant", NULL)) o->smooth = true;
    else if (cli_is(a, "--smooth-wo", NULL)) o->p.smooth_wo = o->smooth = true;
    else if (cli_is(a, "--threshold", NULL)) o->p.threshold = cli_float(a, 1e-6f, 1e30f);
    else if (cli_is(a, "--alpha", NULL)) o->p.alpha = cli_float(a, 0.0f, 1.0f);
    else if (cli_is(a, "--calib", NULL)) o->calib_path = cli_str(a);
    else if (cli_is(a, "--calib-skip", NULL)) o->calib_skip = cli_int(a, 0, 1 << 30);
    else if (cli_is(a, "--calib-tokens", NULL)) o->p.calib_tokens = cli_int(a, 1, 1 << 24);
    else if (cli_is(a, "--int8-mode", NULL)) o->mode = (kvant_int8_mode)cli_choice_arg(a, cli_int8_modes), o->mode_set = true;
    else if (cli_is(a, "--inject-scale", NULL)) o->p.inject_scale = cli_float(a, 1e-6f, 1e6f);
    else if (cli_is(a, "--inject-outliers", NULL)) {
        const char *v = cli_str(a);
        if (!v) return true;
        o->p.n_inject = 0;
        for (const char *s = v; *s;) {
            char *end;
            long d = strtol(s, &end, 10);
            if (end == s || d < 0 || d > 1 << 20 || o->p.n_inject >= 256 || (*end && *end != ',')) {
                fprintf(stderr, "%s: bad --inject-outliers '%s' (comma-separated dims, at most 256)\n", a->cmd, v);
                a->error = true;
                return true;
            }
            o->inject[o->p.n_inject++] = (int)d;
            s = *end ? end + 1 : end;
        }
    } else return false;
    o->any = true;
    return true;
}

static void progress(void *user, const char *what, int done, int total) {
    (void)user;
    if (done == total || isatty(2)) fprintf(stderr, "%s%s %d/%d%s", isatty(2) ? "\r" : "", what, done, total,
                                            done == total || !isatty(2) ? "\n" : "");
}

int cli_int8_build(cli_int8 *o, kvant_model *m, const char *cmd, kvant_int8 **out) {
    *out = NULL;
    if (!o->any) return CLI_OK;
    o->p.smooth = o->smooth;
    o->p.mode = o->mode_set ? o->mode : o->mixed ? KVANT_INT8_MIXED : (o->w8a8 || o->smooth) ? KVANT_INT8_W8A8 : KVANT_INT8_NONE;
    if (o->smooth && !o->calib_path) {
        fprintf(stderr, "%s: --smoothquant needs --calib FILE\n", cmd);
        return CLI_USAGE;
    }
    if (o->calib_path) { /* SmoothQuant's scales; LLM.int8's stored outlier dims (kvant quantize) */
        size_t n = 0;
        o->calib_buf = cli_read_file(o->calib_path, &n);
        if (!o->calib_buf) {
            fprintf(stderr, "%s: cannot read %s\n", cmd, o->calib_path);
            return CLI_USAGE;
        }
        if (o->calib_skip >= (long)n) {
            fprintf(stderr, "%s: --calib-skip %ld leaves nothing of %s (%zu bytes)\n", cmd, o->calib_skip,
                    o->calib_path, n);
            return CLI_USAGE;
        }
        n -= (size_t)o->calib_skip;
        memmove(o->calib_buf, o->calib_buf + o->calib_skip, n + 1);
        o->p.calib_text = o->calib_buf;
        o->p.calib_len = (size_t)n;
    }
    o->p.progress = progress;
    kvant_status st;
    *out = kvant_int8_new(m, &o->p, &st);
    if (!*out) {
        fprintf(stderr, "%s: %s\n", cmd, st.msg);
        return st.code == KVANT_ERR_ARG ? CLI_USAGE : CLI_FAIL;
    }
    return CLI_OK;
}

void cli_int8_describe(const cli_int8 *o, const kvant_int8 *q, const char *cmd) {
    if (!q) return;
    kvant_int8_stats s;
    kvant_int8_get_stats(q, &s);
    fprintf(stderr, "%s: int8 mode %s", cmd, cli_choice_name(cli_int8_modes, o->p.mode));
    if (o->p.mode == KVANT_INT8_MIXED) fprintf(stderr, " (threshold %g)", o->p.threshold);
    if (o->smooth)
        fprintf(stderr, ", SmoothQuant%s alpha %.2f (scales %.3g..%.3g)", o->p.smooth_wo ? " (wo too)" : "", s.alpha,
                s.scale_min, s.scale_max);
    if (o->p.n_inject) fprintf(stderr, ", %d synthetic outlier dims x %g", o->p.n_inject, o->p.inject_scale);
    if (s.int8_bytes) fprintf(stderr, ", %.2f MiB INT8 weights", s.int8_bytes / 1048576.0);
    fprintf(stderr, "\n");
}

void cli_int8_free(cli_int8 *o) {
    free(o->calib_buf);
    o->calib_buf = NULL;
}
