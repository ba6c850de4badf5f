/* test_chat_cli.c - `kvant chat` driven through a pipe, as a script would:
 * replies, the KV cache kept between turns (the prefix cache finds the
 * earlier turns and the replies), a reply computed with the cache equal to
 * one computed from nothing, /save and /load, a context that fills up
 * (refused, never cut), --stream going on past it, Ctrl-C stopping a reply
 * without ending the session, and bad input.  The built-in model (no -m). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* runs `kvant chat ARGS` with `input` on stdin; stdout returned, stderr in *err */
static char *chat(const char *args, const char *input, char **err, int *status) {
    char in[512], errp[512], cmd[4096];
    snprintf(in, sizeof in, "%s", tmp_path("chat_in.txt"));
    snprintf(errp, sizeof errp, "%s", tmp_path("chat_err.txt"));
    FILE *f = fopen(in, "w");
    assert_non_null(f);
    fputs(input, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s chat %s < %s 2> %s", KVANT_BIN, args, in, errp);
    char *out = run_capture(cmd, status);
    assert_non_null(out);
    *err = read_file(errp, NULL);
    assert_non_null(*err);
    return out;
}

/* the number after `label` in text (-1 when absent) */
static long after(const char *text, const char *label) {
    const char *p = strstr(text, label);
    return p ? strtol(p + strlen(label), NULL, 10) : -1;
}

/* the n-th line of text (0-based), malloc'd */
static char *line(const char *text, int n) {
    for (; n > 0 && text; n--) text = strchr(text, '\n'), text = text ? text + 1 : NULL;
    assert_non_null(text);
    const char *e = strchr(text, '\n');
    const size_t len = e ? (size_t)(e - text) : strlen(text);
    char *l = malloc(len + 1);
    memcpy(l, text, len);
    l[len] = 0;
    return l;
}

/* Three turns with greedy decoding: replies stream one per line; turn 2
 * takes the blocks of turn 1 (prompt and reply) from the prefix cache; the
 * transcript saved after turn 2 and loaded into a fresh process gives turn
 * 3 the same reply as the process that kept its cache. */
static void test_turns_cache_and_transcript(void **state) {
    (void)state;
    char save[600], script[2048];
    snprintf(save, sizeof save, "%s", tmp_path("chat_transcript.json"));
    snprintf(script, sizeof script,
             "Hello there\n/stats\nTell me about a cat\n/stats\n/save %s\nAnd a dog?\n/stats\n", save);
    int status;
    char *err, *out = chat("--temp 0 -n 24", script, &err, &status);
    assert_int_equal(status, 0);
    /* line 0 reply 1, lines 1-3 stats, 4 reply 2, 5-7 stats, 8 reply 3, 9-11 stats */
    char *r1 = line(out, 0), *s1 = line(out, 1), *r2 = line(out, 4), *s2 = line(out, 5), *r3 = line(out, 8);
    assert_true(strlen(r1) > 10 && strlen(r2) > 10 && strlen(r3) > 10);
    assert_int_equal(after(s1, "turn "), 1);
    assert_int_equal(after(s1, "from the cache, "), after(s1, "prompt ")); /* nothing cached yet: all computed */
    assert_int_equal(after(s1, "reply "), 24);
    /* turn 2: prompt = turn 1's 19-token prompt + its 24-token reply + the new
     * message; the full blocks of the first 43 tokens come from the cache */
    const long p2 = after(s2, "prompt "), cached2 = after(s2, "tokens ("), computed2 = after(s2, "from the cache, ");
    assert_int_equal(cached2, 32); /* 2 full blocks of 16 of the 43 tokens turn 1 left */
    assert_int_equal(cached2 + computed2, p2);
    assert_non_null(strstr(err, "chat template plain"));
    assert_non_null(strstr(err, "saved 4 messages"));

    /* the transcript: 4 messages, user / assistant, the replies as printed */
    char *js = read_file(save, NULL);
    assert_non_null(js);
    cJSON *root = cJSON_Parse(js), *msgs = cJSON_GetObjectItem(root, "messages");
    assert_int_equal(cJSON_GetArraySize(msgs), 4);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 0), "content")->valuestring, "Hello there");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 1), "role")->valuestring, "assistant");
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, 3), "content")->valuestring, r2 + (r2[0] == ' '));
    cJSON_Delete(root);
    free(js);

    /* a fresh process computes everything, and writes the same third reply */
    snprintf(script, sizeof script, "/load %s\nAnd a dog?\n/stats\n", save);
    char *err2, *out2 = chat("--temp 0 -n 24", script, &err2, &status);
    assert_int_equal(status, 0);
    char *f3 = line(out2, 0), *fs = line(out2, 1);
    assert_int_equal(after(fs, "tokens ("), 0); /* nothing from a cache */
    assert_string_equal(f3, r3);
    assert_non_null(strstr(err2, "loaded 4 messages"));
    free(f3), free(fs), free(err2), free(out2);
    free(r1), free(s1), free(r2), free(s2), free(r3), free(err), free(out);
}

/* /reset keeps the system message and forgets the rest: the turn after it
 * is the first turn again (same reply as a fresh session's first turn) */
static void test_reset_and_system(void **state) {
    (void)state;
    int status;
    char *err, *out = chat("--temp 0 -n 16 --system 'You tell stories.'", "Hi\nMore\n/reset\nHi\n", &err, &status);
    assert_int_equal(status, 0);
    char *a = line(out, 0), *b = line(out, 2);
    assert_string_equal(a, b);
    assert_non_null(strstr(err, "system message stays"));
    free(a), free(b), free(err), free(out);
}

/* A context of 64: the second turn does not fit and is refused with a
 * message (an empty reply line on the pipe), the session goes on; --stream
 * keeps talking for six turns in the same 64 positions. */
static void test_context_full_and_stream(void **state) {
    (void)state;
    int status;
    char *err, *out = chat("--temp 0 -n 40 -c 64", "Hello there\nTell me about a cat\n/stats\n", &err, &status);
    assert_int_equal(status, 0);
    assert_non_null(strstr(err, "does not fit the context of 64 tokens"));
    char *r2 = line(out, 1), *s = line(out, 2);
    assert_string_equal(r2, ""); /* refused */
    assert_int_equal(after(s, "turn "), 1); /* still the first turn's numbers */
    free(r2), free(s), free(err), free(out);

    out = chat("--temp 0 -n 40 -c 64 --stream", "Hello there\nTell me about a cat\nAnd a dog\nmore\nmore\nmore\n/stats\n",
               &err, &status);
    assert_int_equal(status, 0);
    for (int i = 0; i < 6; i++) {
        char *r = line(out, i);
        assert_true(strlen(r) > 5);
        free(r);
    }
    const char *st = strstr(out, "turn 6: ");
    assert_non_null(st);
    assert_true(after(st, "prompt ") > 64);          /* the conversation outgrew the cache ... */
    assert_int_equal(after(st, "\ncontext "), 64);    /* ... which stays at 64 positions */
    assert_null(strstr(err, "does not fit"));
    free(err), free(out);
}

/* Ctrl-C (SIGINT) stops a reply that would not end by itself; the session
 * answers the next command and ends normally at end of input. */
static void test_interrupt_stops_reply(void **state) {
    (void)state;
    int to[2], from[2];
    assert_int_equal(pipe(to), 0);
    assert_int_equal(pipe(from), 0);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(to[0], 0), dup2(from[1], 1);
        close(to[1]), close(from[0]);
        execl(KVANT_BIN, KVANT_BIN, "chat", "--temp", "0", "--ignore-eos", "-n", "16000000", "-c", "100000", "--stream",
              (char *)NULL);
        _exit(127);
    }
    close(to[0]), close(from[1]);
    assert_int_equal(write(to[1], "Hello\n", 6), 6);
    char buf[4096];
    ssize_t k = read(from[0], buf, sizeof buf); /* the reply has begun */
    assert_true(k > 0);
    usleep(200 * 1000);
    kill(pid, SIGINT);
    assert_int_equal(write(to[1], "/stats\n", 7), 7);
    close(to[1]);
    size_t len = 0, cap = 1 << 16;
    char *out = malloc(cap);
    while ((k = read(from[0], buf, sizeof buf)) > 0) {
        if (len + (size_t)k + 1 > cap) out = realloc(out, cap *= 2);
        memcpy(out + len, buf, (size_t)k);
        len += (size_t)k;
    }
    out[len] = 0;
    close(from[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    const long gen = after(out, "reply ");
    assert_true(gen > 0 && gen < 16000000); /* stopped, not finished */
    free(out);
}

static void test_bad_input(void **state) {
    (void)state;
    int status;
    char *err, *out = chat("--kv-type f8", "", &err, &status);
    assert_int_equal(status, 2);
    assert_non_null(strstr(err, "bad value 'f8' for --kv-type"));
    free(err), free(out);
    out = chat("--temp 0 -n 4", "/load /nonexistent.json\n/load\n/nosuch\nHi\n", &err, &status);
    assert_int_equal(status, 0);
    assert_non_null(strstr(err, "cannot read /nonexistent.json"));
    assert_non_null(strstr(err, "unknown command /load without FILE"));
    assert_non_null(strstr(err, "unknown command /nosuch"));
    char *r = line(out, 0);
    assert_true(strlen(r) > 0); /* the conversation went on */
    free(r), free(err), free(out);
    /* a file that is not a transcript leaves the conversation as it is */
    char bad[600], script[1024];
    snprintf(bad, sizeof bad, "%s", tmp_path("chat_bad.json"));
    FILE *f = fopen(bad, "w");
    fputs("{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", f);
    fclose(f);
    snprintf(script, sizeof script, "Hi\n/load %s\n/stats\n", bad);
    out = chat("--temp 0 -n 4", script, &err, &status);
    assert_int_equal(status, 0);
    assert_non_null(strstr(err, "is not a transcript"));
    free(err), free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_turns_cache_and_transcript),
        cmocka_unit_test(test_reset_and_system),
        cmocka_unit_test(test_context_full_and_stream),
        cmocka_unit_test(test_interrupt_stops_reply),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
