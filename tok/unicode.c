/* tok/unicode.c - code points and their classes as llama.cpp's unicode.cpp
 * sees them: its lenient UTF-8 decoder, the category/whitespace flags
 * (table generated into unicode_data.c), its Han ranges. */
#include "tok/tok_impl.h"

uint8_t tok_uni_flags(uint32_t cp) {
    if (cp < 0x100) return tok_uni_latin1[cp];
    if (cp >= 0x110000) return TOKU_C;
    /* last range whose first code point is <= cp */
    int lo = 0, hi = tok_uni_n_ranges - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (tok_uni_ranges[mid] >> 8 <= cp) lo = mid;
        else hi = mid - 1;
    }
    return (uint8_t)(tok_uni_ranges[lo] & 0xFF);
}

static bool cont(uint8_t c) { return (c & 0xC0) == 0x80; }

uint32_t tok_uni_decode(const uint8_t *s, size_t n, uint32_t *len) {
    uint8_t c = s[0];
    *len = 1;
    if (!(c & 0x80)) return c;
    if (!(c & 0x40)) return 0xFFFD; /* a stray continuation byte */
    if (!(c & 0x20)) {
        if (n < 2 || !cont(s[1])) return 0xFFFD;
        *len = 2;
        return (uint32_t)(c & 0x1F) << 6 | (s[1] & 0x3F);
    }
    if (!(c & 0x10)) {
        if (n < 3 || !cont(s[1]) || !cont(s[2])) return 0xFFFD;
        *len = 3;
        return (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    }
    if (!(c & 0x08)) {
        if (n < 4 || !cont(s[1]) || !cont(s[2]) || !cont(s[3])) return 0xFFFD;
        *len = 4;
        return (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 |
               (s[3] & 0x3F);
    }
    return 0xFFFD;
}

bool tok_uni_is_han(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) ||   /* CJK Unified Ideographs */
           (cp >= 0x3400 && cp <= 0x4DBF) ||   /* extension A */
           (cp >= 0x20000 && cp <= 0x2A6DF) || /* B */
           (cp >= 0x2A700 && cp <= 0x2B73F) || /* C */
           (cp >= 0x2B740 && cp <= 0x2B81F) || /* D */
           (cp >= 0x2B820 && cp <= 0x2CEAF) || /* E */
           (cp >= 0x2CEB0 && cp <= 0x2EBEF) || /* F */
           (cp >= 0xF900 && cp <= 0xFAFF) ||   /* compatibility ideographs */
           (cp >= 0x2F800 && cp <= 0x2FA1F);   /* their supplement */
}
