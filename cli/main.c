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
            "  chat   talk to a model in the terminal (its chat template; KV cache kept between turns)\n"
            "  info   describe a model: hyperparameters, tensors, KV cache size\n"
            "  tokenize  the token ids of a text (also from a vocabulary-only GGUF)\n"
            "  logits the logits of every position of one batch, as float32 (compare with other engines)\n"
            "  ppl    perplexity (llama.cpp's method) and KL divergence from a base model\n"
            "  stream-ppl  per-token loss over a long stream under a KV policy (StreamingLLM)\n"
            "  attn-stats  attention mass on the first tokens, per layer (attention sinks)\n"
            "  bench  prefill (pp) and decode (tg) tokens/s, llama-bench style\n"
            "  quantize  quantize a GGUF model (llama.cpp types and mixes)\n"
            "  synth  write a synthetic model (random weights) at a real model's shape\n"
            "  outliers  activation outliers at every linear layer's input (LLM.int8 criterion)\n"
            "  bench-int8  INT8 GEMM (W8A8, LLM.int8) vs the F32 matmul at layer shapes\n"
            "  serve  OpenAI-compatible HTTP server (continuous batching)\n"
            "  loadgen  load generator for OpenAI-compatible servers (TTFT, TPOT, ITL, throughput)\n"
            "  bench-batch  N sequences decoding together through the serving engine\n"
            "  train  train a model (from a config or a GGUF) with AdamW\n"
            "  distill  train a student on a teacher's logits (knowledge distillation)\n"
            "  qat    quantization-aware training (fake quantization, STE)\n"
            "  prune  prune a GGUF model (magnitude, Wanda, SparseGPT, structured; 2:4 formats)\n"
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
        printf("kvant %s\n%s\n", kvant_version(), kvant_cpu_report());
        return CLI_OK;
    }
    if (!strcmp(cmd, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "ppl")) return cmd_ppl(argc - 1, argv + 1);
    if (!strcmp(cmd, "stream-ppl")) return cmd_stream_ppl(argc - 1, argv + 1);
    if (!strcmp(cmd, "attn-stats")) return cmd_attn_stats(argc - 1, argv + 1);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(cmd, "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(cmd, "outliers")) return cmd_outliers(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench-int8")) return cmd_bench_int8(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "loadgen")) return cmd_loadgen(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench-batch")) return cmd_bench_batch(argc - 1, argv + 1);
    if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(cmd, "distill")) return cmd_distill(argc - 1, argv + 1);
    if (!strcmp(cmd, "qat")) return cmd_qat(argc - 1, argv + 1);
    if (!strcmp(cmd, "prune")) return cmd_prune(argc - 1, argv + 1);
    if (!strcmp(cmd, "cliff")) return cmd_cliff(argc - 1, argv + 1);
    fprintf(stderr, "kvant: unknown command '%s' (see kvant --help)\n", cmd);
    return CLI_USAGE;
}
