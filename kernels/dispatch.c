/* dispatch.c - chooses each type's operations for the CPU at run time.
 * Tier REF maps to the _ref rows of the type table. */
#include "kernels/types.h"

static kern_type_ops g_ref[KT_GGML_COUNT];
static kern_tier g_active = KERN_TIER_REF;
static bool g_ready;

static void init(void) {
    if (g_ready) return;
    for (int t = 0; t < KT_GGML_COUNT; t++) {
        const kern_type_traits *tt = kern_type_get(t);
        if (!tt) continue;
        g_ref[t] = (kern_type_ops){tt->to_float, tt->from_float_ref, tt->vec_dot_ref};
    }
    g_active = kern_best_tier();
    g_ready = true;
}

kern_tier kern_best_tier(void) { return KERN_TIER_REF; }

const kern_type_ops *kern_ops_tier(int t, kern_tier tier) {
    init();
    if (t < 0 || t >= KT_GGML_COUNT || !kern_type_get(t)) return 0;
    if (tier != KERN_TIER_REF) return 0;
    return &g_ref[t];
}

const kern_type_ops *kern_ops(int t) { init(); return kern_ops_tier(t, g_active); }
kern_tier kern_active_tier(void) { init(); return g_active; }

bool kern_set_tier(kern_tier tier) {
    init();
    if (tier > kern_best_tier()) return false;
    g_active = tier;
    return true;
}

const char *kern_tier_name(kern_tier tier) {
    static const char *names[] = {"ref", "scalar", "avx2", "avx512"};
    return tier < KERN_TIER_COUNT ? names[tier] : "unknown";
}
