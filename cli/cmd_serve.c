/* cmd_serve.c - `kvant serve`: the OpenAI-compatible HTTP server. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "server/server.h"


static void usage(FILE *f) {
    fprintf(f,
            "usage: kvant serve [-m MODEL] [options]\n"
            "\n"
            "OpenAI-compatible HTTP server: POST /v1/completions, POST /v1/chat/completions\n"
            "(stream: true gives Server-Sent Events), GET /v1/models, GET /health, GET /metrics,\n"
            "POST /v1/embeddings, POST /tokenize, POST /detokenize,\n"
            "POST /apply-template ({\"messages\": [...]} -> {\"prompt\": \"...\"}, the chat prompt),\n"
            "GET / (a chat page for a browser: streaming replies, Stop, sampling settings, a live\n"
            "panel of the engine from /metrics).\n"
            "\n"
            "  -m, --model FILE        GGUF or llama2.c model (default: the built-in stories260K)\n"
            "  -z, --tokenizer FILE    llama2.c tokenizer.bin\n"
            "  --host ADDR             IPv4 address to bind (default 127.0.0.1: loopback only;\n"
            "                          0.0.0.0 exposes the server to the network)\n"
            "  --port N                TCP port (default 8080; 0: any free port, printed on stderr)\n"
            "  --api-key KEY           require 'Authorization: Bearer KEY' on /v1/*, /apply-template,\n"
            "                          /tokenize and /detokenize (else 401; compared in constant time)\n"
            "                          (default: none; /, /health, /metrics stay open: the page asks)\n"
            "  --alias NAME            model id clients name (default: the model's name)\n"
            "  --max-seqs N            sequences running at once (default 64)\n"
            "  --max-queue N           requests waiting beyond those; more get 429 (default 1024)\n"
            "  --max-batch-tokens N    tokens per engine step (default 512)\n"
            "  --target-step-ms MS     adapt prompt chunks so a step stays under about MS (they\n"
            "                          aim at 0.9 x MS; default 200; 0: fixed --max-batch-tokens)\n"
            "  --kv-mem MIB            KV cache pool size (default: max-seqs x context, at most 1 GiB)\n"
            "  --kv-type T             f16 (default, as llama-server), f32, q8_0\n"
            "  --block-size N          tokens per KV block (default 16)\n"
            "  -c, --ctx N             tokens one sequence may hold (default: training context)\n"
            "  --no-prefix-cache       do not reuse KV blocks of identical prompt prefixes\n"
            "  --max-body BYTES        largest request body (default 1048576; larger: 413)\n"
            "  --max-conns N           connections open at once (default 1000); more wait in the\n"
            "                          kernel's listen backlog, unanswered, until one closes\n"
            "  --timeout S             close a connection idle S seconds: nothing received or sent,\n"
            "                          e.g. a half-sent request (default 30; one waiting for the\n"
            "                          engine is not idle)\n"
            "  -t, --threads N         compute threads (default: all CPUs)\n"
            "  --chat-template NAME    render chats with this template instead of the one detected\n"
            "                          from the model's tokenizer.chat_template (names below)\n"
            "  --chat-template-file F  the template a Jinja file F holds, found by its markers\n"
            "  -q, --quiet             no per-request log lines\n"
            "\n"
            "SIGINT/SIGTERM: stop accepting, let running requests finish (up to 10 s),\n"
            "cancel the rest, exit 0.\n"
            "\n"
            "chat templates: %s\n",
            kvant_chat_template_list());
}

int cmd_serve(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant serve", false};
    const char *tmpl_file = NULL;
    const char *model = NULL, *tokenizer = NULL;
    srv_params p = {.port = 8080, .log_requests = true};
    p.engine = kvant_engine_default();
    /* the KV cache is the library's default, F16 as llama-server: half the KV
     * memory, and flash attention reads it in place, so decode batches run
     * faster than from F32 (bench-batch, 16-32 seqs) */
    /* prompt chunks sized so a step stays near 200 ms: 32 streaming clients on
     * stories110M Q8_0 keep ~95% of the throughput with a third of the ITL p99 */
    p.engine.target_step_ms = 200;
    int threads = 0;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            usage(stdout);
            return CLI_OK;
        } else if (cli_is(&a, "-m", "--model")) model = cli_str(&a);
        else if (cli_is(&a, "-z", "--tokenizer")) tokenizer = cli_str(&a);
        else if (cli_is(&a, "--host", NULL)) p.host = cli_str(&a);
        else if (cli_is(&a, "--port", NULL)) p.port = cli_int(&a, 0, 65535);
        else if (cli_is(&a, "--api-key", NULL)) p.api_key = cli_str(&a);
        else if (cli_is(&a, "--alias", NULL)) p.model_id = cli_str(&a);
        else if (cli_is(&a, "--max-seqs", NULL)) p.engine.max_seqs = cli_int(&a, 1, 4096);
        else if (cli_is(&a, "--max-queue", NULL)) p.engine.max_waiting = cli_int(&a, 1, 1 << 20);
        else if (cli_is(&a, "--max-batch-tokens", NULL)) p.engine.max_batch_tokens = cli_int(&a, 1, 1 << 16);
        else if (cli_is(&a, "--target-step-ms", NULL)) p.engine.target_step_ms = cli_float(&a, 0, 1e5);
        else if (cli_is(&a, "--kv-mem", NULL)) p.engine.kv_mem_mib = cli_float(&a, 0.001f, 1e7);
        else if (cli_is(&a, "--kv-type", NULL)) p.engine.kv_type = (kvant_kv_type)cli_choice_arg(&a, cli_kv_types);
        else if (cli_is(&a, "--block-size", NULL)) p.engine.block_size = cli_int(&a, 1, 4096);
        else if (cli_is(&a, "-c", "--ctx")) p.engine.max_ctx = cli_int(&a, 1, 1 << 24);
        else if (cli_is(&a, "--no-prefix-cache", NULL)) p.engine.prefix_cache = false;
        else if (cli_is(&a, "--max-body", NULL)) p.max_body = (size_t)cli_int(&a, 64, 1 << 30);
        else if (cli_is(&a, "--max-conns", NULL)) p.max_conns = cli_int(&a, 1, 1 << 16);
        else if (cli_is(&a, "--timeout", NULL)) p.timeout_s = cli_int(&a, 1, 86400);
        else if (cli_is(&a, "-t", "--threads")) threads = cli_int(&a, 1, 1024);
        else if (cli_is(&a, "-q", "--quiet")) p.log_requests = false;
        else if (cli_is(&a, "--chat-template", NULL)) p.chat_template = cli_str(&a);
        else if (cli_is(&a, "--chat-template-file", NULL)) tmpl_file = cli_str(&a);
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!model) cli_note_builtin_model("kvant serve");
    kvant_status st;
    kvant_chat_template tmpl;
    const char *from_file = NULL; /* --chat-template wins over --chat-template-file */
    if (tmpl_file && !p.chat_template && !(p.chat_template = from_file = cli_chat_template_file("kvant serve", tmpl_file)))
        return CLI_USAGE;
    if (p.chat_template && kvant_chat_template_by_name(p.chat_template, &tmpl, &st)) {
        fprintf(stderr, "kvant serve: --chat-template: %s\n", st.msg);
        return CLI_USAGE;
    }
    /* SIGINT/SIGTERM are blocked in every thread (those started later inherit
     * the mask); this one takes them with sigwait */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    kvant_model_params mp = {.tokenizer_path = tokenizer, .n_threads = threads};
    kvant_model *m = kvant_model_open(model, &mp, &st);
    if (!m) {
        fprintf(stderr, "kvant serve: %s\n", st.msg);
        return cli_status_exit(&st);
    }
    /* model id: --alias, else the file name without directory and extension */
    char id[256];
    if (!p.model_id) {
        const char *name = model ? model : "stories260K.gguf", *b = strrchr(name, '/');
        snprintf(id, sizeof id, "%s", b ? b + 1 : name);
        char *dot = strrchr(id, '.');
        if (dot && dot != id) *dot = 0;
        p.model_id = id;
    }
    srv *s = srv_start(m, &p, &st);
    if (!s) {
        fprintf(stderr, "kvant serve: %s\n", st.msg);
        kvant_model_free(m);
        return st.code == KVANT_ERR_ARG ? CLI_USAGE : CLI_FAIL;
    }
    fprintf(stderr, "kvant serve: %s on http://%s:%d (model id '%s', %d threads)\n", model ? model : "stories260K (built in)",
            p.host ? p.host : "127.0.0.1", srv_port(s), p.model_id,
            threads ? threads : kvant_default_threads());
    const char *why = p.chat_template ? "--chat-template" : "from the model";
    if (tmpl_file && p.chat_template == from_file) why = tmpl_file;
    else if (!p.chat_template && kvant_chat_detect(m) == KVANT_CHAT_PLAIN) why = "none known in the model";
    fprintf(stderr, "kvant serve: chat template %s (%s)\n", kvant_chat_template_name(srv_chat_template(s)), why);
    fflush(stderr);
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "kvant serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_stop(s, 10000);
    kvant_model_free(m);
    fprintf(stderr, "kvant serve: stopped\n");
    return CLI_OK;
}
