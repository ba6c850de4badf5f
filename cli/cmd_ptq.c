/* cmd_ptq.c - `kvant quantize IN OUT --scheme ... --bits ...`: PTQ to
 * kvant's absmax / zero-point INT-n types (the llama.cpp form, IN OUT TYPE,
 * stays in cmd_tools.c; cmd_quantize hands over when a PTQ flag is given). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

bool cli_ptq_wanted(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--scheme") || !strcmp(argv[i], "--granularity") || !strcmp(argv[i], "--bits"))
            return true;
    return false;
}

void cli_ptq_help(void) {
    printf("   or: kvant quantize IN.gguf OUT.gguf --scheme absmax|zeropoint --bits 2..8\n"
           "                      [--granularity tensor|channel|group:G] [--clip mse|none]\n"
           "                      [--calib TEXT [--calib-tokens N] [--gptq]] [--fallback channel|f16|f32]\n"
           "                      [--keep NAMES] [--tensor-bits L] [-t N] [-q]\n"
           "\n"
           "PTQ to kvant's own tensor types (GGUF types 1024..1093, kvant.ptq.* metadata;\n"
           "llama.cpp cannot load them).  Every 2-D weight matrix is quantized, norms stay F32.\n"
           "  --scheme         absmax: symmetric, scale = max|x| / (2^(b-1) - 1);\n"
           "                   zeropoint: asymmetric, scale = (max - min) / (2^b - 1), integer zero\n"
           "  --bits B         2..8\n"
           "  --granularity    tensor, channel (one scale per row) or group:G, G = 32, 64, 128\n"
           "                   (default channel); F16 scales\n"
           "  --clip mse       per group, the clip ratio (1 .. 0.3) minimizing the squared error\n"
           "                   of the weights, weighted by E[a^2] of each input column when\n"
           "                   --calib is given (default none)\n"
           "  --calib TEXT     calibration text run through the model (first 16384 tokens)\n"
           "  --gptq           with --calib: GPTQ (each column's rounding error is moved onto\n"
           "                   the later columns through the inverse input Hessian)\n"
           "  --fallback F     rows that fit no group of 32/64/128 (stories260K's ffn_down has\n"
           "                   172 columns): channel (default, same bits), f16 or f32\n"
           "  --keep NAMES     comma-separated name substrings kept F16 (e.g. token_embd,output)\n"
           "  --tensor-bits L  other bit widths for some tensors, L = SUBSTR=B,... (e.g.\n"
           "                   ffn_down=6,output=8); the first matching SUBSTR wins\n"
           "Fallbacks are printed per tensor and in the summary.\n");
}

int cmd_ptq_quantize(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant quantize", false};
    const char *pos[2] = {0};
    int npos = 0;
    kvant_ptq_params p = {0};
    bool scheme_set = false;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "--scheme", NULL)) p.scheme = (kvant_ptq_scheme)cli_choice_arg(&a, cli_ptq_schemes), scheme_set = true;
        else if (cli_is(&a, "--granularity", NULL)) {
            const char *v = cli_str(&a);
            if (v && !cli_granularity_of(v, &p.granularity, &p.group))
                cli_bad_value(&a, "--granularity", v, "tensor, channel or group:G");
        }
        else if (cli_is(&a, "--bits", NULL)) p.bits = cli_int(&a, 2, 8);
        else if (cli_is(&a, "--clip", NULL)) p.clip = (kvant_ptq_clip)cli_choice_arg(&a, cli_ptq_clips);
        else if (cli_is(&a, "--calib", NULL)) p.calib_path = cli_str(&a);
        else if (cli_is(&a, "--calib-tokens", NULL)) p.calib_tokens = cli_int(&a, 1, 1 << 24);
        else if (cli_is(&a, "--fallback", NULL)) p.fallback = (kvant_ptq_fallback)cli_choice_arg(&a, cli_ptq_fallbacks);
        else if (cli_is(&a, "--gptq", NULL)) p.gptq = true;
        else if (cli_is(&a, "--keep", NULL)) p.keep = cli_str(&a);
        else if (cli_is(&a, "--tensor-bits", NULL)) p.tensor_bits = cli_str(&a);
        else if (cli_is(&a, "-t", "--threads")) p.n_threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "-q", "--quiet")) p.quiet = true;
        else if (argv[a.i][0] == '-' && argv[a.i][1]) cli_unknown(&a);
        else if (npos < 2) pos[npos++] = argv[a.i];
        else { fprintf(stderr, "kvant quantize: too many arguments (PTQ form: IN OUT --scheme ... --bits ...)\n"); return CLI_USAGE; }
    }
    if (a.error) return CLI_USAGE;
    if (npos != 2 || !scheme_set || !p.bits) {
        fprintf(stderr, "kvant quantize: PTQ form needs IN OUT --scheme S --bits B (see --help)\n");
        return CLI_USAGE;
    }
    if (access(pos[0], R_OK) != 0) {
        fprintf(stderr, "kvant quantize: cannot open %s\n", pos[0]);
        return CLI_USAGE;
    }
    kvant_status st;
    kvant_ptq_report r;
    if (kvant_ptq_quantize(pos[0], pos[1], &p, &r, &st)) {
        fprintf(stderr, "kvant quantize: %s\n", st.msg);
        return st.code == KVANT_ERR_ARG ? CLI_USAGE : cli_status_exit(&st);
    }
    return CLI_OK;
}
