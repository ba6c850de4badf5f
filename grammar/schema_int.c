/* grammar/schema_int.c - a JSON Schema integer with bounds (minimum,
 * maximum, exclusive ones) as a GBNF rule: the digit strings between the
 * bounds, by length, as llama.cpp's converter builds them. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/schema_impl.h"

/* ---- integers with bounds ------------------------------------------------------------- */
enum { INT_DIGITS = 16 };

static int ndigits(int64_t x) {
    int n = 1;
    while (x >= 10) x /= 10, n++;
    return n;
}

/* digit strings X and Y of the same length k, X <= Y: every number between */
static void same_len(gstr *o, const char *X, const char *Y, int k) {
    int i = 0;
    while (i < k && X[i] == Y[i]) i++;
    if (i) {
        gstr_put(o, "\"", 1);
        gstr_put(o, X, (size_t)i);
        gstr_put(o, "\" ", 2);
    }
    if (i == k) return;
    X += i, Y += i, k -= i;
    bool zeros = true, nines = true;
    for (int j = 1; j < k; j++) {
        if (X[j] != '0') zeros = false;
        if (Y[j] != '9') nines = false;
    }
    char lo = X[0], hi = Y[0];
    bool first = true;
    gstr_put(o, "(", 1);
    if (!zeros) {
        char n9[32];
        memset(n9, '9', (size_t)k - 1);
        gstr_printf(o, "\"%c\" ", X[0]);
        same_len(o, X + 1, n9, k - 1);
        first = false;
        lo++;
    }
    bool tail = !nines;
    if (tail) hi--;
    if (lo <= hi) {
        if (!first) gstr_puts(o, " | ");
        gstr_printf(o, "[%c-%c]", lo, hi);
        if (k > 1) gstr_printf(o, " [0-9]{%d}", k - 1);
        first = false;
    }
    if (tail) {
        char n0[32];
        memset(n0, '0', (size_t)k - 1);
        if (!first) gstr_puts(o, " | ");
        gstr_printf(o, "\"%c\" ", Y[0]);
        same_len(o, n0, Y + 1, k - 1);
    }
    gstr_put(o, ")", 1);
}

static int64_t pow10i(int k) {
    int64_t p = 1;
    while (k-- > 0) p *= 10;
    return p;
}

/* [a, b] of non-negative integers (b < 0: unbounded, up to INT_DIGITS digits
 * or a's), as alternatives */
static void nonneg_range(gstr *o, int64_t a, int64_t b) {
    int la = ndigits(a), lb = b < 0 ? (la > INT_DIGITS ? la : INT_DIGITS) : ndigits(b);
    bool first = true;
    for (int len = la; len <= lb; len++) {
        int64_t lo = len == 1 ? 0 : pow10i(len - 1);
        int64_t hi = pow10i(len) - 1;
        if (lo < a) lo = a;
        if (b >= 0 && hi > b) hi = b;
        if (lo > hi) continue;
        if (!first) gstr_puts(o, " | ");
        first = false;
        if (b < 0 && len > la && len == la + 1) { /* every longer length at once */
            gstr_printf(o, "[1-9] [0-9]{%d,%d}", len - 1, lb - 1);
            break;
        }
        char X[32], Y[32];
        /* both have len digits: lo >= 10^(len-1) (or len is 1) */
        snprintf(X, sizeof X, "%lld", (long long)lo);
        snprintf(Y, sizeof Y, "%lld", (long long)hi);
        same_len(o, X, Y, len);
    }
}

static bool int_bound(sc *c, const gjson *s, const char *key, bool upper, bool *has, int64_t *out) {
    const gjson *v = gjson_get(s, key);
    if (!v) return true;
    if (v->type == GJSON_BOOL) return true; /* draft 4 form, read with minimum / maximum */
    if (v->type != GJSON_NUMBER) return sc_fail(c, KVANT_ERR_ARG, "'%s' must be a number", key);
    bool excl = !strncmp(key, "exclusive", 9);
    if (!excl) {
        const gjson *d4 = gjson_get(s, upper ? "exclusiveMaximum" : "exclusiveMinimum");
        excl = d4 && d4->type == GJSON_BOOL && d4->b;
    }
    double x = v->num;
    const double lim = 1e18;
    if (upper ? x >= lim : x <= -lim) return true; /* beyond anything the grammar writes */
    if (upper ? x <= -lim : x >= lim)
        return sc_fail(c, KVANT_ERR_UNSUPPORTED, "'%s' beyond +-10^18 is not supported", key);
    int64_t b;
    if (upper) b = excl ? (int64_t)ceil(x) - 1 : (int64_t)floor(x);
    else b = excl ? (int64_t)floor(x) + 1 : (int64_t)ceil(x);
    if (*has) b = upper ? (b < *out ? b : *out) : (b > *out ? b : *out);
    *has = true;
    *out = b;
    return true;
}

bool schema_int_range(sc *c, const gjson *s, gstr *o) {
    bool has_lo = false, has_hi = false;
    int64_t lo = 0, hi = 0;
    if (!int_bound(c, s, "minimum", false, &has_lo, &lo) || !int_bound(c, s, "exclusiveMinimum", false, &has_lo, &lo) ||
        !int_bound(c, s, "maximum", true, &has_hi, &hi) || !int_bound(c, s, "exclusiveMaximum", true, &has_hi, &hi))
        return false;
    if (has_lo && has_hi && lo > hi) return sc_fail(c, KVANT_ERR_ARG, "no integer lies within the bounds");
    gstr_put(o, "(", 1);
    bool any = false;
    if (!has_lo || lo < 0) { /* negatives: "-" and magnitudes [max(1, -hi), -lo] */
        int64_t mlo = has_hi && hi < -1 ? -hi : 1;
        gstr_puts(o, "\"-\" (");
        nonneg_range(o, mlo, has_lo ? -lo : -1);
        gstr_put(o, ")", 1);
        any = true;
    }
    if (!has_hi || hi >= 0) {
        if (any) gstr_puts(o, " | ");
        gstr_put(o, "(", 1);
        nonneg_range(o, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
        gstr_put(o, ")", 1);
    }
    gstr_printf(o, ") %s", sc_use(c, P_WS));
    return true;
}
