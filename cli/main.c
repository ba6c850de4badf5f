/* main.c - `kvant COMMAND ...` dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "kvant %s - LLM inference and compression in C\n"
            "\n"
            "usage: kvant COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  run    generate text from a prompt (GGUF or llama2.c model)\n"
            "  info   describe a model: hyperparameters, tensors, KV cache size\n"
            "  ppl    perplexity (llama.cpp's method) and KL divergence from a base model\n"
            "  stream-ppl  per-token loss over a long stream under a KV policy (StreamingLLM)\n"
            "  attn-stats  attention mass on the first tokens, per layer (attention sinks)\n"
            "  bench  prefill (pp) and decode (tg) tokens/s, llama-bench style\n"
            "  quantize  quantize a GGUF model (llama.cpp types and mixes)\n"
            "  synth  write a synthetic model (random weights) at a real model's shape\n"
            "  cliff  perplexity and KL of every PTQ scheme x granularity x bits (+ llama.cpp types), plot\n"
            "\n"
            "`kvant COMMAND --help` describes each command's options.\n",
            kvant_version());
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(cmd, "--version")) {
        printf("kvant %s\n", kvant_version());
        return CLI_OK;
    }
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "ppl")) return cmd_ppl(argc - 1, argv + 1);
    if (!strcmp(cmd, "stream-ppl")) return cmd_stream_ppl(argc - 1, argv + 1);
    if (!strcmp(cmd, "attn-stats")) return cmd_attn_stats(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "cliff")) return cmd_cliff(argc - 1, argv + 1);
    fprintf(stderr, "kvant: unknown command '%s' (see kvant --help)\n", cmd);
    return CLI_USAGE;
}
