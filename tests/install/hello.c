/* hello.c - a program that uses kvant as an installed library: built by
 * tests/install/check.sh with `pkg-config --cflags --libs kvant` against
 * `cmake --install` output, never against the source tree.  Greedy text from
 * the built-in model, through the public API only. */
#include <kvant_infer.h> /* only the inference part of the API */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    kvant_status st;
    kvant_model *m = kvant_model_open(NULL, NULL, &st); /* NULL: the built-in stories260K */
    if (!m) {
        fprintf(stderr, "hello: %s\n", st.msg);
        return 1;
    }
    kvant_model_info in;
    kvant_model_get_info(m, &in);
    const char *prompt = "Once upon a time";
    int32_t toks[64];
    int n = kvant_tokenize(m, prompt, strlen(prompt), true, toks, 32);
    kvant_seq *s = kvant_seq_new(m, 64, &st);
    float *logits = malloc(sizeof(float) * (size_t)in.vocab_size);
    if (n <= 0 || !s || !logits || kvant_forward(s, toks, n, logits, false, &st)) return 1;
    printf("kvant %s, %s: %s", kvant_version(), in.name, prompt);
    for (int g = 0; g < 24; g++) {
        int32_t best = 0;
        for (int v = 1; v < in.vocab_size; v++) best = logits[v] > logits[best] ? v : best;
        char piece[64];
        const int len = kvant_token_to_piece(m, toks[n - 1], best, piece, sizeof piece);
        printf("%.*s", len, piece);
        toks[n++] = best;
        if (kvant_forward(s, &best, 1, logits, false, &st)) return 1;
    }
    printf("\n");
    free(logits);
    kvant_seq_free(s);
    kvant_model_free(m);
    return 0;
}
