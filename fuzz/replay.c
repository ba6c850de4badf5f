/* replay.c - main() for a fuzz harness outside libFuzzer: feeds
 * LLVMFuzzerTestOneInput every regular file under the directories (and the
 * files) named on the command line, once each, in name order, so that the
 * committed corpus - the seeds and every input that once crashed - runs as
 * a unit test in any build (gcc, ASan, TSan).  Exits 0 when all ran, 1 when
 * a file could not be read or there was nothing to run; a crash is a crash. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return -1; }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; }
            else buf = nb;
        }
    }
    fclose(f);
    if (!buf) { fprintf(stderr, "replay: out of memory reading %s\n", path); return -1; }
    /* a copy of exactly n bytes, so ASan sees a read past the input */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) { free(buf); return -1; }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* runs path (a file, or every file of a directory tree); adds to *n_run */
static int run_path(const char *path, int *n_run) {
    struct stat sb;
    if (stat(path, &sb)) { fprintf(stderr, "replay: no such file or directory: %s\n", path); return -1; }
    if (!S_ISDIR(sb.st_mode)) {
        if (run_file(path)) return -1;
        (*n_run)++;
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) { fprintf(stderr, "replay: cannot read %s\n", path); return -1; }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue; /* ., .., and hidden files such as .gitkeep */
        if (n == cap) {
            char **nn = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof *names);
            if (!nn) { rc = -1; break; }
            names = nn;
        }
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) { rc = -1; break; }
        snprintf(names[n++], len, "%s/%s", path, e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, by_name);
    for (size_t i = 0; i < n; i++) {
        if (!rc && run_path(names[i], n_run)) rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int n_run = 0;
    for (int i = 1; i < argc; i++)
        if (run_path(argv[i], &n_run)) return 1;
    if (!n_run) { fprintf(stderr, "replay: no inputs under the paths given\n"); return 1; }
    printf("replay: %d inputs ran\n", n_run);
    return 0;
}
