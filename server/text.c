/* text.c - generated text with stop strings matched across token pieces. */
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

bool srv_text_append(srv_text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) cap *= 2;
        char *p = realloc(t->buf, cap);
        if (!p) return false;
        t->buf = p;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = 0;
    return true;
}

size_t srv_utf8_complete(const char *s, size_t n) {
    /* walk back over at most 3 continuation bytes to the last lead byte */
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, back++;
    if (i == 0) return n;
    const unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
    return back + 1 >= need ? n : i - 1;
}

size_t srv_text_scan(srv_text *t, const char *const *stops, int n_stops, bool final) {
    if (t->stopped) return t->len;
    /* earliest stop match starting at or after `sent` (earlier starts were
     * ruled out when those bytes were sent) */
    size_t best = (size_t)-1;
    for (int i = 0; i < n_stops; i++) {
        const size_t sl = strlen(stops[i]);
        if (!sl || t->len < sl) continue;
        for (size_t p = t->sent; p + sl <= t->len && p < best; p++)
            if (!memcmp(t->buf + p, stops[i], sl)) {
                best = p;
                break;
            }
    }
    if (best != (size_t)-1) {
        t->len = best;
        t->buf[best] = 0;
        t->stopped = true;
        return best;
    }
    if (final) return t->len;
    /* withhold the longest tail that could still grow into a stop string */
    size_t hold = 0;
    for (int i = 0; i < n_stops; i++) {
        const size_t sl = strlen(stops[i]);
        for (size_t k = sl ? sl - 1 : 0; k > hold; k--) {
            if (k > t->len - t->sent) continue;
            if (!memcmp(t->buf + t->len - k, stops[i], k)) {
                hold = k;
                break;
            }
        }
    }
    size_t end = t->len - hold;
    end = srv_utf8_complete(t->buf, end);
    return end < t->sent ? t->sent : end;
}

void srv_text_free(srv_text *t) {
    free(t->buf);
    memset(t, 0, sizeof *t);
}
