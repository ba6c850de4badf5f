/* prune.c - kvant_prune (include/kvant.h) over compress/prune.h. */
#include <stdio.h>
#include <string.h>

#include "kvant.h"
#include "compress/prune.h"

kvant_code kvant_prune(const char *in_path, const char *out_path, const kvant_prune_params *p, kvant_status *st) {
    core_ok(st);
    prune_params q = {.sparsity = p->sparsity, .layerwise = p->layerwise, .calib_path = p->calib_path,
                      .calib_tokens = p->calib_tokens, .calib_ctx = p->calib_ctx, .sequential = p->sequential, .block = p->block,
                      .target = p->target, .format = p->format, .n_threads = p->n_threads, .quiet = p->quiet};
    static const char *methods[] = {"magnitude", "wanda", "sparsegpt", "structured"};
    int mi = -1;
    for (int i = 0; i < 4; i++)
        if (p->method && !strcmp(p->method, methods[i])) mi = i;
    if (mi < 0) return core_fail(st, KVANT_ERR_ARG, "unknown method '%s' (magnitude, wanda, sparsegpt, structured)",
                                 p->method ? p->method : "");
    q.method = (prune_method)mi;
    if (p->pattern && strcmp(p->pattern, "unstructured")) {
        int n, m;
        char tail;
        if (sscanf(p->pattern, "%d:%d%c", &n, &m, &tail) != 2 || m < 2 || m > 64 || n < 1 || n >= m)
            return core_fail(st, KVANT_ERR_ARG, "bad pattern '%s' (unstructured, 2:4, 4:8, N:M)", p->pattern);
        q.nm_keep = n;
        q.nm_group = m;
    }
    return prune_file(in_path, out_path, &q, st);
}
