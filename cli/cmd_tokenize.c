/* cmd_tokenize.c - `kvant tokenize`: the tokens of a text, as llama.cpp's
 * llama-tokenize lists them.  Reads only the vocabulary (kvant_vocab). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void tokenize_help(void) {
    printf("usage: kvant tokenize -m MODEL (-p TEXT | -f FILE) [--ids] [--no-bos] [--no-special]\n"
           "\n"
           "Prints the tokens of a text, one line per token as ID<TAB>'PIECE' (the piece's\n"
           "bytes as they are; control tokens show their text), or with --ids one line of\n"
           "space-separated ids.  Only the vocabulary is read, so a vocabulary-only GGUF\n"
           "(no tensors, no architecture) works as well as a whole model.  As llama.cpp\n"
           "does, BOS (and EOS) are added where the vocabulary asks for them and text that\n"
           "spells a special token becomes that token.\n"
           "\n"
           "  -m, --model FILE    GGUF file with tokenizer.ggml.* metadata (required)\n"
           "  -p, --prompt TEXT   the text\n"
           "  -f, --file FILE     read the text from FILE ('-': standard input)\n"
           "      --ids           print only the ids\n"
           "      --no-bos        add no BOS or EOS\n"
           "      --no-special    text like <|im_end|> stays plain text\n"
           "  -h, --help          this text\n");
}

/* All of standard input (malloc'd, NUL-terminated), or NULL. */
static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, stdin);
        n += r;
        if (r == 0) break;
        if (cap - n < 2) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    if (!buf || ferror(stdin)) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int cmd_tokenize(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "kvant tokenize", false};
    const char *path = NULL, *prompt = NULL, *file = NULL;
    bool ids_only = false, bos = true, special = true;
    for (; a.i < argc && !a.error; a.i++) {
        if (cli_is(&a, "-h", "--help")) { tokenize_help(); return CLI_OK; }
        else if (cli_is(&a, "-m", "--model")) path = cli_str(&a);
        else if (cli_is(&a, "-p", "--prompt")) prompt = cli_str(&a);
        else if (cli_is(&a, "-f", "--file")) file = cli_str(&a);
        else if (cli_is(&a, "--ids", NULL)) ids_only = true;
        else if (cli_is(&a, "--no-bos", NULL)) bos = false;
        else if (cli_is(&a, "--no-special", NULL)) special = false;
        else cli_unknown(&a);
    }
    if (a.error) return CLI_USAGE;
    if (!path) {
        fprintf(stderr, "kvant tokenize: no model given: -m MODEL (see --help)\n");
        return CLI_USAGE;
    }
    if (!prompt == !file) {
        fprintf(stderr, "kvant tokenize: give the text with either -p TEXT or -f FILE (see --help)\n");
        return CLI_USAGE;
    }
    size_t len = 0;
    char *text = NULL;
    if (file) {
        text = strcmp(file, "-") ? cli_read_file(file, &len) : read_stdin(&len);
        if (!text) {
            fprintf(stderr, "kvant tokenize: cannot read '%s'\n", file);
            return CLI_USAGE;
        }
    }
    kvant_status st;
    kvant_vocab *v = kvant_vocab_open(path, &st);
    if (!v) {
        fprintf(stderr, "kvant tokenize: %s\n", st.msg);
        free(text);
        return cli_status_exit(&st);
    }
    const char *s = text ? text : prompt;
    if (!text) len = strlen(prompt);
    int n = kvant_vocab_tokenize(v, s, len, bos, special, NULL, 0);
    int32_t *ids = n < 0 && n != INT32_MIN ? malloc((size_t)-n * sizeof *ids) : NULL;
    if (ids) n = kvant_vocab_tokenize(v, s, len, bos, special, ids, -n);
    if (n < 0) {
        fprintf(stderr, "kvant tokenize: out of memory for the tokens of %zu bytes\n", len);
        free(ids);
        free(text);
        kvant_vocab_free(v);
        return CLI_FAIL;
    }
    char small[256];
    for (int i = 0; i < n; i++) {
        if (ids_only) {
            printf(i ? " %d" : "%d", ids[i]);
            continue;
        }
        char *piece = small;
        int k = kvant_vocab_piece(v, ids[i], true, small, (int)sizeof small);
        if (k < 0 && (piece = malloc((size_t)-k))) k = kvant_vocab_piece(v, ids[i], true, piece, -k);
        printf("%d\t'", ids[i]);
        if (k > 0) fwrite(piece, 1, (size_t)k, stdout);
        printf("'\n");
        if (piece != small) free(piece);
    }
    if (ids_only) printf("\n");
    free(ids);
    free(text);
    kvant_vocab_free(v);
    return CLI_OK;
}
