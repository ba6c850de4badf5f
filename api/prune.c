/* prune.c - kvant_prune (include/kvant_compress.h) over compress/prune.h. */
#include "kvant_compress.h"
#include "compress/prune.h"

_Static_assert((int)PRUNE_STRUCTURED == (int)KVANT_PRUNE_STRUCTURED && (int)PRUNE_WANDA == (int)KVANT_PRUNE_WANDA &&
                   (int)PRUNE_SPARSEGPT == (int)KVANT_PRUNE_SPARSEGPT && (int)PRUNE_HEADS == (int)KVANT_PRUNE_HEADS &&
                   (int)PRUNE_SPARSE24_Q8 == (int)KVANT_PRUNE_SPARSE24_Q8 &&
                   (int)PRUNE_SPARSE24_F16 == (int)KVANT_PRUNE_SPARSE24_F16,
               "compress/prune.h numbers its choices as the public header");

kvant_code kvant_prune(const char *in_path, const char *out_path, const kvant_prune_params *p, kvant_status *st) {
    core_ok(st);
    if ((unsigned)p->method > KVANT_PRUNE_STRUCTURED || (unsigned)p->target > KVANT_PRUNE_HEADS ||
        (unsigned)p->format > KVANT_PRUNE_SPARSE24_Q8)
        return core_fail(st, KVANT_ERR_ARG, "pruning settings out of range (method %d, target %d, format %d)",
                         (int)p->method, (int)p->target, (int)p->format);
    const bool nm = p->nm_keep || p->nm_group;
    if (nm && (p->nm_group < 2 || p->nm_group > 64 || p->nm_keep < 1 || p->nm_keep >= p->nm_group))
        return core_fail(st, KVANT_ERR_ARG, "bad N:M pattern %d:%d (1 <= N < M <= 64)", p->nm_keep, p->nm_group);
    const prune_params q = {.method = (prune_method)p->method, .sparsity = p->sparsity, .nm_keep = p->nm_keep,
                            .nm_group = p->nm_group, .layerwise = p->layerwise, .calib_path = p->calib_path,
                            .calib_tokens = p->calib_tokens, .calib_ctx = p->calib_ctx, .sequential = p->sequential,
                            .block = p->block, .target = (prune_target)p->target, .format = (prune_format)p->format,
                            .n_threads = p->n_threads, .quiet = p->quiet};
    return prune_file(in_path, out_path, &q, st);
}
