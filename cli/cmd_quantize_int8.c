/* cmd_quantize_int8.c - `kvant quantize IN OUT --w8a8 [--smoothquant ...]`:
 * a stored W8A8 file (kernels/w8a8.h), with SmoothQuant's scales folded in
 * when asked; cmd_quantize hands over when one of these flags is given. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/int8_flags.h"

bool cli_int8_quantize_wanted(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--w8a8") || !strcmp(argv[i], "--smoothquant") || !strcmp(argv[i], "--smooth-wo") ||
            !strcmp(argv[i], "--int8-mixed"))
            return true;
    return false;
}

void cli_int8_quantize_help(void) {
    printf("   or: kvant quantize IN.gguf OUT.gguf --w8a8 [--smoothquant --calib TEXT [--alpha A]\n"
           "                      [--calib-tokens N] [--calib-skip B] [--smooth-wo]] [-t N]\n"
           "\n"
           "W8A8 as a stored type (GGUF type 1100, \"W8A8\"; kvant.int8.* metadata; llama.cpp\n"
           "cannot load it): every layer's attn_q/k/v/output and ffn_gate/up/down become INT8\n"
           "rows with one F32 scale per output channel; at run time activations are quantized\n"
           "per token and the INT8 x INT8 dots run in the packed tiles (VNNI where the CPU has\n"
           "it).  Embeddings, the classifier and norms keep their type.  The result is the one\n"
           "`kvant run --w8a8` computes by converting at load, bit for bit.\n"
           "  --smoothquant    fold s_j = max|X_j|^A / max|W_j|^(1-A), from calibration on TEXT,\n"
           "                   into attn_norm / ffn_norm and the wq/wk/wv, gate/up columns first\n"
           "                   (the norms are stored folded); --smooth-wo also wo's input\n"
           "  --alpha A        migration strength (default 0.5)\n"
           "   or: kvant quantize IN.gguf OUT.gguf --int8-mixed --calib TEXT [--threshold 6]\n"
           "                      [--calib-tokens N] [--calib-skip B] [-t N]\n"
           "\n"
           "LLM.int8 as a stored type (1101, \"LLM_INT8\"): the hidden dims that reach |x| >=\n"
           "threshold on TEXT in >= 25%% of the layers' inputs and >= 6%% of the tokens (LLM.int8's\n"
           "criterion, kvant outliers) are kept in F16 weight columns (NAME.outlier_cols,\n"
           "NAME.outliers) of wq/wk/wv/gate/up; the rest of those rows, and wo / ffn_down, are\n"
           "INT8 as W8A8.  At run time those columns are left out of the activation quantization\n"
           "and added in float.  The set is fixed at quantization (kvant run --int8-mixed picks\n"
           "it per batch instead).\n");
}

int cmd_int8_quantize(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant quantize", false};
    const char *pos[2] = {0};
    int npos = 0, threads = 0;
    cli_int8 i8;
    cli_int8_init(&i8);
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_int8_flag(&a, &i8)) {}
        else if (cli_is(&a, "-t", "--threads")) threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "-q", "--quiet")) {}
        else if (argv[a.i][0] == '-' && argv[a.i][1]) cli_unknown(&a);
        else if (npos < 2) pos[npos++] = argv[a.i];
        else { fprintf(stderr, "kvant quantize: too many arguments (W8A8 form: IN OUT --w8a8 ...)\n"); a.error = true; }
    }
    int rc = CLI_USAGE;
    kvant_model *m = NULL;
    kvant_int8 *q = NULL;
    if (a.error) goto done;
    if (i8.mixed && !i8.calib_path) {
        fprintf(stderr, "kvant quantize: --int8-mixed needs --calib TEXT (the outlier columns a stored LLM.int8 "
                        "file keeps are chosen there)\n");
        goto done;
    }
    if (i8.mixed && i8.smooth) {
        fprintf(stderr, "kvant quantize: --int8-mixed and --smoothquant are two answers to the same outliers; "
                        "give one\n");
        goto done;
    }
    if (npos != 2) {
        fprintf(stderr, "kvant quantize: W8A8 form needs IN OUT --w8a8 (see --help)\n");
        goto done;
    }
    if (access(pos[0], R_OK) != 0) {
        fprintf(stderr, "kvant quantize: cannot open %s\n", pos[0]);
        goto done;
    }
    if (!i8.mixed) i8.w8a8 = true; /* --smoothquant alone means SmoothQuant W8A8 */
    kvant_status st;
    kvant_model_params mp = {.n_threads = threads, .no_repack = 1};
    if (!(m = kvant_model_open(pos[0], &mp, &st))) {
        fprintf(stderr, "kvant quantize: %s\n", st.msg);
        rc = cli_status_exit(&st);
        goto done;
    }
    if ((rc = cli_int8_build(&i8, m, "kvant quantize", &q)) != CLI_OK) goto done;
    cli_int8_describe(&i8, q, "kvant quantize");
    if (kvant_int8_save(q, pos[0], pos[1], &st)) {
        fprintf(stderr, "kvant quantize: %s\n", st.msg);
        rc = cli_status_exit(&st);
        goto done;
    }
    fprintf(stderr, "wrote %s: %s%s\n", pos[1], i8.mixed ? "LLM.int8 (LLM_INT8 + F16 outlier columns)" : "W8A8",
            i8.smooth ? " with SmoothQuant folded in" : "");
    rc = CLI_OK;
done:
    kvant_int8_free(q);
    kvant_model_free(m);
    cli_int8_free(&i8);
    return rc;
}
