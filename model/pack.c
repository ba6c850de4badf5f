/* pack.c - model_repack: the layer matrices in the matmul's packed layout. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "kernels/repack.h"
#include "model/model.h"

typedef struct {
    const model_mat *w;
    void *dst;
} pack_job;

static void pack_task(void *ctx, int ith, int nth) {
    const pack_job *j = ctx;
    int64_t lo, hi;
    core_split((j->w->rows + KERN_PACK_ROWS - 1) / KERN_PACK_ROWS, ith, nth, &lo, &hi);
    kern_pack(j->w->data, j->w->type, j->w->rows, j->w->cols, j->dst, lo, hi);
}

/* the whole pages inside [p, p + n): given back to the kernel (a private
 * read-only file mapping: they are read from the file again if touched) */
static void drop_pages(const void *p, size_t n) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + n) & ~(page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

static kvant_code pack_one(model *m, model_mat *w, bool drop, kvant_status *st) {
    if (!w->data || w->packed || !kern_pack_fits(w->type, w->cols)) return KVANT_OK;
    const size_t bytes = kern_pack_bytes(w->type, w->rows, w->cols);
    void *dst = core_alloc_huge(bytes); /* decode streams the whole matrix */
    void **list = realloc(m->packed, (size_t)(m->n_packed + 1) * sizeof *list);
    if (!dst || !list) {
        free(dst);
        if (list) m->packed = list;
        return core_fail(st, KVANT_ERR_NOMEM, "cannot allocate %zu bytes to repack a weight matrix", bytes);
    }
    m->packed = list;
    pack_job j = {w, dst};
    core_pool_run(m->pool, pack_task, &j);
    m->packed[m->n_packed++] = dst;
    m->packed_bytes += bytes;
    w->packed = dst;
    if (drop && m->gguf && !m->builtin) drop_pages(w->data, kern_row_bytes(w->type, w->cols) * (size_t)w->rows);
    return KVANT_OK;
}

kvant_code model_repack(model *m, bool all, kvant_status *st) {
    const char *env = getenv("KVANT_REPACK");
    /* LLM_INT8's outlier columns have only the packed path: packed always */
    const bool only_outl = !all || (env && !strcmp(env, "0"));
    for (int l = 0; l < m->cfg.n_layers; l++) {
        model_layer *L = &m->layers[l];
        model_mat *mats[5 + 3 * 1024];
        const int n = model_layer_mats(L, m->cfg.n_expert, mats, (int)(sizeof mats / sizeof *mats));
        /* row views of one fused tensor (phi3's attn_qkv, an expert of ffn_*_exps) drop only the pages
         * wholly inside them; a dropped page is read from the file again if touched */
        for (int i = 0; i < n; i++)
            if ((!only_outl || mats[i]->outl.n) && pack_one(m, mats[i], true, st) != KVANT_OK) return st->code;
    }
    if (only_outl && !m->output.outl.n) return KVANT_OK;
    /* a tied classifier shares its rows with the embedding, which stays in use */
    return pack_one(m, &m->output, !m->tied_output, st);
}
