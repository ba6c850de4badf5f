/* cmd_prune.c - `kvant prune`: pruning and 2:4 sparsity. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static void prune_help(void) {
    printf("usage: kvant prune IN.gguf OUT.gguf --method M [--sparsity S] [--pattern P] [--calib TEXT]\n"
           "                  [--calib-tokens N] [--calib-ctx N] [--sequential] [--block N] [--layerwise]\n"
           "                  [--target ffn|heads] [--format F] [-t N] [-q]\n"
           "\n"
           "Prunes the layer matrices (attn_q/k/v/output, ffn_gate/up/down; never the\n"
           "embedding or output matrix) of a GGUF llama model and writes a loadable GGUF\n"
           "with kvant.prune.* metadata; prints the sparsity achieved per layer.\n"
           "\n"
           "  --method M        magnitude  |W|, lowest per output row\n"
           "                    wanda      |W_ij| * ||X_j||_2 over calibration tokens, per row\n"
           "                    sparsegpt  OBS with optimal update of the kept weights\n"
           "                               (H = 2XX^T + 1%% damp, blocks of 128 columns)\n"
           "                    structured remove whole FFN neurons or KV groups (a KV head\n"
           "                               with its query heads) by activation-weighted\n"
           "                               norm: a smaller model (config keys rewritten)\n"
           "  --sparsity S      fraction removed, 0 <= S < 1 (default 0.5; ignored for N:M)\n"
           "  --pattern P       unstructured (default), 2:4, 4:8 or any N:M: keep N of every\n"
           "                    M consecutive weights along the input dimension\n"
           "  --layerwise       magnitude / wanda: rank over the whole matrix, not per row\n"
           "  --calib TEXT      calibration text (wanda, sparsegpt, structured); its LAST\n"
           "                    --calib-tokens tokens are used (default 16384), in sequences\n"
           "                    of --calib-ctx tokens (default 512)\n"
           "  --sequential      collect each layer's inputs through the already-pruned\n"
           "                    layers before it (one calibration pass per layer)\n"
           "  --block N         sparsegpt: columns per block (default 128; a multiple of M\n"
           "                    for N:M); masks are chosen per block after the updates of\n"
           "                    the blocks before it\n"
           "  --target T        structured: ffn (neurons) or heads (KV groups)\n"
           "  --format F        dense (default: the source type, zeros stored),\n"
           "                    sparse24-f16 or sparse24-q8 (2:4 compressed types, need\n"
           "                    --pattern 2:4; rows that do not fit the block stay dense)\n"
           "  -t N              threads (default: all CPUs)\n"
           "  -q                no per-layer report\n"
           "\n"
           "Iterative pruning with fine-tuning (the training loop of `kvant train`):\n"
           "  kvant prune IN.gguf OUT.gguf --iterative --sparsity S -f TEXT [--steps K]\n"
           "              [--finetune-steps N] [training options of kvant train]\n"
           "  in each of K rounds (default 4) mask the smallest |w| of every output row of\n"
           "  the layer matrices (cubic schedule up to S), then fine-tune N steps (default\n"
           "  50) on TEXT with the masks held; see `kvant train --help` for the rest.\n");
}

/* `--iterative`: IN OUT --sparsity S --steps K --finetune-steps N plus any
 * `kvant train` option, run by the training loop with its --prune */
static int prune_iterative(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant prune --iterative", false};
    kvant_train_params p = kvant_train_default();
    p.prune_rounds = 4;
    p.prune_sparsity = 0.5f;
    int finetune = 50, npos = 0;
    const char *pos[2] = {0};
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "--iterative", NULL)) continue;
        else if (cli_is(&a, "-h", "--help")) { prune_help(); return CLI_OK; }
        else if (cli_is(&a, "--sparsity", NULL)) p.prune_sparsity = cli_float(&a, 0.001f, 0.999f);
        else if (cli_is(&a, "--steps", NULL)) p.prune_rounds = cli_int(&a, 1, 1000);
        else if (cli_is(&a, "--finetune-steps", NULL)) finetune = cli_int(&a, 1, 10000000);
        else if (cli_is(&a, "--method", NULL)) {
            const char *m = cli_str(&a);
            if (m && strcmp(m, "magnitude")) {
                fprintf(stderr, "kvant prune --iterative: only --method magnitude (|w| per row) is iterative\n");
                return CLI_USAGE;
            }
        } else if (cli_train_flag(&a, &p)) continue;
        else if (argv[a.i][0] == '-' && argv[a.i][1]) cli_unknown(&a);
        else if (npos < 2) pos[npos++] = argv[a.i];
        else { fprintf(stderr, "kvant prune: too many arguments (see --help)\n"); return CLI_USAGE; }
    }
    if (a.error) return CLI_USAGE;
    if (npos != 2) {
        fprintf(stderr, "kvant prune --iterative: expected IN OUT (see --help)\n");
        return CLI_USAGE;
    }
    if (access(pos[0], R_OK) != 0) {
        fprintf(stderr, "kvant prune: cannot open %s\n", pos[0]);
        return CLI_USAGE;
    }
    p.model = pos[0];
    p.out_path = pos[1];
    p.steps = p.prune_rounds * finetune;
    return cli_train_run("kvant prune --iterative", &p);
}

int cmd_prune(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--iterative")) return prune_iterative(argc, argv);
    cli_args a = {argc, 1, argv, "kvant prune", false};
    const char *pos[2] = {0};
    int npos = 0;
    kvant_prune_params p = {.sparsity = 0.5f};
    bool method_set = false;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { prune_help(); return CLI_OK; }
        else if (cli_is(&a, "--method", NULL)) p.method = (kvant_prune_method)cli_choice_arg(&a, cli_prune_methods), method_set = true;
        else if (cli_is(&a, "--sparsity", NULL)) p.sparsity = cli_float(&a, 0.0f, 0.999f);
        else if (cli_is(&a, "--pattern", NULL)) {
            const char *v = cli_str(&a);
            if (v && !cli_pattern_of(v, &p.nm_keep, &p.nm_group))
                cli_bad_value(&a, "--pattern", v, "unstructured, 2:4, 4:8 or N:M with 1 <= N < M <= 64");
        }
        else if (cli_is(&a, "--layerwise", NULL)) p.layerwise = true;
        else if (cli_is(&a, "--calib", NULL)) p.calib_path = cli_str(&a);
        else if (cli_is(&a, "--calib-tokens", NULL)) p.calib_tokens = cli_int(&a, 1, 1 << 26);
        else if (cli_is(&a, "--calib-ctx", NULL)) p.calib_ctx = cli_int(&a, 2, 1 << 16);
        else if (cli_is(&a, "--sequential", NULL)) p.sequential = true;
        else if (cli_is(&a, "--block", NULL)) p.block = cli_int(&a, 1, 1 << 16);
        else if (cli_is(&a, "--target", NULL)) p.target = (kvant_prune_target)cli_choice_arg(&a, cli_prune_targets);
        else if (cli_is(&a, "--format", NULL)) p.format = (kvant_prune_format)cli_choice_arg(&a, cli_prune_formats);
        else if (cli_is(&a, "-t", "--threads")) p.n_threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "-q", "--quiet")) p.quiet = true;
        else if (argv[a.i][0] == '-' && argv[a.i][1]) cli_unknown(&a);
        else if (npos < 2) pos[npos++] = argv[a.i];
        else { fprintf(stderr, "kvant prune: too many arguments (see --help)\n"); return CLI_USAGE; }
    }
    if (a.error) return CLI_USAGE;
    if (npos != 2 || !method_set) {
        fprintf(stderr, "kvant prune: expected IN OUT --method M (see --help)\n");
        return CLI_USAGE;
    }
    if (access(pos[0], R_OK) != 0) {
        fprintf(stderr, "kvant prune: cannot open %s\n", pos[0]);
        return CLI_USAGE;
    }
    if (p.calib_path && access(p.calib_path, R_OK) != 0) {
        fprintf(stderr, "kvant prune: cannot open %s\n", p.calib_path);
        return CLI_USAGE;
    }
    kvant_status st;
    if (kvant_prune(pos[0], pos[1], &p, &st)) {
        fprintf(stderr, "kvant prune: %s\n", st.msg);
        return st.code == KVANT_ERR_ARG ? CLI_USAGE : cli_status_exit(&st);
    }
    return CLI_OK;
}
