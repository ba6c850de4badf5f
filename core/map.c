/* map.c - a whole file: read-only mmap, or read into memory; huge-page buffers. */
#include "core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void *core_alloc_huge(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    if (bytes > SIZE_MAX - huge) return NULL;
    bytes = (bytes + huge - 1) & ~(huge - 1);
    void *p = aligned_alloc(huge, bytes ? bytes : huge);
    if (p) madvise(p, bytes ? bytes : huge, MADV_HUGEPAGE); /* advice only: failure leaves 4 KiB pages */
    return p;
}

kvant_code core_map_file(const char *path, core_map *m, kvant_status *st) {
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return core_fail(st, KVANT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return core_fail(st, KVANT_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return core_fail(st, KVANT_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return KVANT_OK;
    }
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return core_fail(st, KVANT_ERR_IO, "%s: cannot mmap: %s", path, strerror(e));
    m->data = p;
    m->size = (size_t)sb.st_size;
    return KVANT_OK;
}

void core_unmap(core_map *m) {
    if (m->data) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

char *core_read_file(const char *path, size_t *len, kvant_status *st) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        core_fail(st, KVANT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    long n = -1;
    if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
        fclose(f);
        core_fail(st, KVANT_ERR_IO, "cannot read %s", path);
        return NULL;
    }
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        fclose(f);
        core_fail(st, KVANT_ERR_NOMEM, "out of memory reading %s (%ld bytes)", path, n);
        return NULL;
    }
    const size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) {
        free(buf);
        core_fail(st, KVANT_ERR_IO, "cannot read %s", path);
        return NULL;
    }
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}
