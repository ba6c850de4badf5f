/* cmd_qat.c - `kvant qat`: quantization-aware training. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void qat_help(void) {
    printf("usage: kvant qat -m MODEL -f TEXT --bits B [--granularity group:G|channel] [--scheme zeropoint|absmax]\n"
           "                 -o OUT.gguf [options]\n"
           "\n"
           "Quantization-aware training: the forward pass sees every weight matrix\n"
           "fake-quantized (per group of G elements of a row, b bits; absmax:\n"
           "s = max|w| / (2^(b-1) - 1), zero-point: s = (max - min) / (2^b - 1) and\n"
           "z = round(-min / s)); scales and zero-points are set by round-to-nearest PTQ\n"
           "of the starting weights and then held.  The backward pass is the straight-\n"
           "through estimator (gradient passed through the rounding, dropped where the\n"
           "clamp cut the value); AdamW updates FP32 shadow weights.  --steps 0 writes the\n"
           "PTQ (round-to-nearest) model itself, the baseline.\n"
           "\n"
           "Every 2-D weight matrix is quantized (token embedding and classifier too),\n"
           "as `kvant quantize --scheme S --bits B --granularity G` does; rows that fit no\n"
           "group of 32/64/128 use per-channel scales (the PTQ tool's default fallback).\n"
           "OUT is written in the PTQ tool's types (kvant.ptq.* metadata) with the held\n"
           "scales, so run/ppl load it and its values equal the trained forward's; the\n"
           "FP32 shadow weights go to OUT.shadow.gguf (resume with --resume OUT.shadow.gguf).\n"
           "\n"
           "  -m, --model MODEL    GGUF model (any type)\n"
           "      --bits B         2..8\n"
           "      --granularity G  group:N (N = 32, 64, 128 elements of a row) or channel (default group:32)\n"
           "      --scheme S       zeropoint (default) or absmax\n"
           "      --ptq-clip C     none (default) or mse: the PTQ initialization's clipping\n"
           "%s",
           cli_train_common_help);
}

int cmd_qat(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant qat", false};
    kvant_train_params p = kvant_train_default();
    p.lr = 5e-4f;
    p.qat_group = 32;
    p.qat_zeropoint = true;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { qat_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) p.model = cli_str(&a);
        else if (cli_is(&a, "--bits", "-b")) p.qat_bits = cli_int(&a, 2, 8);
        else if (cli_is(&a, "--ptq-clip", NULL)) {
            const char *c = cli_str(&a);
            if (!c) break;
            if (!strcmp(c, "mse")) p.qat_clip_mse = true;
            else if (strcmp(c, "none")) { fprintf(stderr, "kvant qat: bad --ptq-clip '%s' (mse or none)\n", c); return CLI_USAGE; }
        }
        else if (cli_is(&a, "--granularity", "-g")) {
            const char *g = cli_str(&a);
            if (!g) break;
            if (!strcmp(g, "channel")) p.qat_group = 0;
            else if (!strncmp(g, "group:", 6) && atoi(g + 6) > 0) p.qat_group = atoi(g + 6);
            else { fprintf(stderr, "kvant qat: bad --granularity '%s' (group:N or channel)\n", g); return CLI_USAGE; }
        } else if (cli_is(&a, "--scheme", NULL)) {
            const char *s = cli_str(&a);
            if (!s) break;
            if (!strcmp(s, "zeropoint")) p.qat_zeropoint = true;
            else if (!strcmp(s, "absmax")) p.qat_zeropoint = false;
            else { fprintf(stderr, "kvant qat: bad --scheme '%s' (zeropoint or absmax)\n", s); return CLI_USAGE; }
        } else if (!cli_train_flag(&a, &p)) cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!p.model || !p.qat_bits) {
        fprintf(stderr, "kvant qat: -m MODEL and --bits B are required (see --help)\n");
        return CLI_USAGE;
    }
    return cli_train_run("kvant qat", &p);
}
