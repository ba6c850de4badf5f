/* cmd_tools.c - `kvant synth` and `kvant quantize`: file tools. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"

static void list_types(FILE *f) {
    char names[512];
    cli_ftype_names(names, sizeof names);
    fputs(names, f);
}

static void synth_help(void) {
    printf("usage: kvant synth --shape NAME -o FILE [--type T] [--pure] [--seed S] [--ctx N] [--layers N] [-t N]\n"
           "\n"
           "Writes a GGUF model with RANDOM weights (fixed seed) at a real model's shape,\n"
           "with that model's architecture, keys and tensor names as llama.cpp reads them\n"
           "(llama, qwen2, qwen3, qwen3moe, gemma3, phi3), for throughput benchmarks; its\n"
           "metadata names it synthetic (general.description, kvant.synthetic = true).\n"
           "Text from it is noise; the vocabulary is a dummy SentencePiece one of the\n"
           "model's size.  The whole file is built in memory before it is written.\n"
           "\n"
           "  --shape NAME   one of (hyperparameters from each model's config.json):\n");
    const char *what;
    for (int i = 0; kvant_synth_shape(i, &what); i++) printf("                   %-15s %s\n", kvant_synth_shape(i, NULL), what);
    printf("  -o FILE        output path\n"
           "  --type T       tensor type or llama.cpp mix (default F32): ");
    list_types(stdout);
    printf("\n  --pure         every matrix in T (no llama.cpp mix rules)\n"
           "  --seed S       random seed (default 42)\n"
           "  --ctx N        context length to declare (default: the shape's)\n"
           "  --layers N     only the first N layers (block_count N; general.description and\n"
           "                 kvant.synthetic_layers_of say so), e.g. for qwen3-30b-a3b\n"
           "  -t N           threads (default: all CPUs)\n");
}

int cmd_synth(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant synth", false};
    kvant_synth_params p = {.seed = 42, .type = KVANT_FTYPE_F32};
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { synth_help(); return CLI_OK; }
        else if (cli_is(&a, "--shape", NULL)) p.shape = cli_str(&a);
        else if (cli_is(&a, "-o", "--output")) p.out_path = cli_str(&a);
        else if (cli_is(&a, "--type", NULL)) {
            const char *v = cli_str(&a);
            char names[512];
            cli_ftype_names(names, sizeof names);
            if (v && !cli_ftype_of(v, &p.type)) cli_bad_value(&a, "--type", v, names);
        }
        else if (cli_is(&a, "--pure", NULL)) p.pure = true;
        else if (cli_is(&a, "--seed", NULL)) p.seed = cli_u64(&a);
        else if (cli_is(&a, "--ctx", NULL)) p.n_ctx = cli_int(&a, 16, 1 << 22);
        else if (cli_is(&a, "--layers", NULL)) p.n_layers = cli_int(&a, 1, 4096);
        else if (cli_is(&a, "-t", "--threads")) p.n_threads = cli_int(&a, 1, 1024);
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!p.shape || !p.out_path) {
        fprintf(stderr, "kvant synth: --shape and -o are required (see --help)\n");
        return CLI_USAGE;
    }
    kvant_status st;
    if (kvant_synth(&p, &st)) {
        fprintf(stderr, "kvant synth: %s\n", st.msg);
        return st.code == KVANT_ERR_ARG ? CLI_USAGE : CLI_FAIL;
    }
    return CLI_OK;
}

static void quantize_help(void) {
    printf("usage: kvant quantize IN.gguf OUT.gguf TYPE [--pure] [-t N] [-q]\n"
           "\n"
           "Quantizes a GGUF llama model as llama.cpp's quantize tool does, so the output\n"
           "loads in llama.cpp: output.weight goes to Q6_K for quantized targets (except\n"
           "Q8_0), the _K_M mixes give some attn_v / ffn_down layers Q6_K, _K_S some Q5_K.\n"
           "Tensors whose rows do not divide a type's block fall back to a type that fits\n"
           "(and the tool says so); norms and other 1-D tensors stay as they are.\n"
           "\n"
           "  TYPE     ");
    list_types(stdout);
    printf("\n  --pure   every matrix in TYPE (llama.cpp --pure)\n"
           "  -t N     threads (default: all CPUs)\n"
           "  -q       no per-tensor progress\n");
    cli_ptq_help();
    cli_int8_quantize_help();
}

int cmd_quantize(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant quantize", false};
    const char *pos[3] = {0};
    int npos = 0;
    kvant_quantize_params p = {0};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { quantize_help(); return CLI_OK; }
    if (cli_ptq_wanted(argc, argv)) return cmd_ptq_quantize(argc, argv);
    if (cli_int8_quantize_wanted(argc, argv)) return cmd_int8_quantize(argc, argv);
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { quantize_help(); return CLI_OK; }
        else if (cli_is(&a, "--pure", NULL)) p.pure = true;
        else if (cli_is(&a, "-q", "--quiet")) p.quiet = true;
        else if (cli_is(&a, "-t", "--threads")) p.n_threads = cli_int(&a, 1, 1024);
        else if (argv[a.i][0] == '-' && argv[a.i][1]) cli_unknown(&a);
        else if (npos < 3) pos[npos++] = argv[a.i];
        else { fprintf(stderr, "kvant quantize: too many arguments (see --help)\n"); return CLI_USAGE; }
    }
    if (a.error) return CLI_USAGE;
    if (npos != 3) {
        fprintf(stderr, "kvant quantize: expected IN OUT TYPE (see --help)\n");
        return CLI_USAGE;
    }
    if (access(pos[0], R_OK) != 0) {
        fprintf(stderr, "kvant quantize: cannot open %s\n", pos[0]);
        return CLI_USAGE;
    }
    if (!cli_ftype_of(pos[2], &p.type)) {
        fprintf(stderr, "kvant quantize: unknown type '%s'; one of: ", pos[2]);
        list_types(stderr);
        fprintf(stderr, "\n");
        return CLI_USAGE;
    }
    kvant_status st;
    if (kvant_quantize(pos[0], pos[1], &p, &st)) {
        fprintf(stderr, "kvant quantize: %s\n", st.msg);
        return cli_status_exit(&st);
    }
    return CLI_OK;
}
