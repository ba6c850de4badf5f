/* grammar/grammar_impl.h - what the grammar module's files share: the
 * compiled grammar's layout, the builder the GBNF parser fills, a string
 * buffer.  Not part of grammar.h's contract. */
#ifndef KVANT_GRAMMAR_IMPL_H
#define KVANT_GRAMMAR_IMPL_H

#include "grammar/grammar.h"

/* ---- compiled grammar ------------------------------------------------------
 * elems: every rule's alternatives, each a run of elements ended by GE_END.
 * An element is one uint32: kind in the top two bits, value below.
 *   GE_END          end of an alternative
 *   GE_TERM | s     one byte from byte set sets[s]
 *   GE_REF  | r     the rule r
 * A position is an index into elems.  Rule r's alternatives start at
 * alts[rule_alt[r] .. rule_alt[r + 1]). */
enum { GE_END = 0u, GE_TERM = 1u << 30, GE_REF = 2u << 30 };
#define GE_KIND(e) ((e) & (3u << 30))
#define GE_VAL(e) ((e) & ((1u << 30) - 1))

typedef struct { uint64_t w[4]; } gbits; /* a set of bytes */
static inline bool gbits_has(const gbits *b, unsigned c) { return (b->w[c >> 6] >> (c & 63)) & 1; }
static inline void gbits_set(gbits *b, unsigned c) { b->w[c >> 6] |= 1ull << (c & 63); }

struct grammar {
    uint32_t *elems;
    uint32_t n_elems;
    uint32_t *alts;     /* alternative start positions */
    uint32_t *rule_alt; /* (n_rules + 1) */
    uint32_t n_rules;
    uint32_t root;
    gbits *sets;        /* byte sets, deduplicated */
    uint32_t n_sets;
    /* byte classes: bytes that no set tells apart share a class, so the
     * transition cache has one column per class, not per byte */
    uint8_t cls[256];
    uint16_t n_cls;
    uint8_t cls_rep[256]; /* a byte of each class */
    gbits *cls_bits;      /* (n_cls) the bytes of each class */
};

/* ---- builder -------------------------------------------------------------------
 * Rules hold their alternatives as elements (GE_TERM values are indices into
 * the builder's deduplicated sets), each alternative ended by GE_END.  The
 * GBNF parser is its only user; gb_finish checks and compiles.  The gvec a
 * caller builds a sequence in must be its own, never a rule's body: making
 * a rule may move b->rules. */
typedef struct {
    uint32_t *e;
    uint32_t n, cap;
} gvec;

typedef struct {
    char *name;
    gvec body;
    bool defined;
    size_t ref_at; /* 1 + the text offset where it was first referenced (0: none), for "undefined rule" */
} gb_rule;

typedef struct {
    gb_rule *rules;
    uint32_t n_rules, cap_rules;
    uint32_t *name_hash; /* open addressing: rule id + 1, 0 = empty */
    uint32_t name_cap;
    gbits *sets;
    uint32_t n_sets, cap_sets;
    uint32_t *set_hash; /* set id + 1 */
    uint32_t set_cap;
    uint64_t total; /* elements in all rules */
    bool oom;
    kvant_status *st;
} gbuild;

void gb_init(gbuild *b, kvant_status *st);
void gb_free(gbuild *b);
/* The rule named name[0..len) (created undefined when new); UINT32_MAX when out of memory. */
uint32_t gb_rule_named(gbuild *b, const char *name, size_t len);
/* A new rule named "<base>_<n>" (generated: groups, repetitions, classes). */
uint32_t gb_rule_new(gbuild *b, uint32_t base);
bool gb_push(gbuild *b, gvec *v, uint32_t e);
uint32_t gb_set(gbuild *b, const gbits *s); /* GE_TERM | id, or UINT32_MAX */
/* One character from the code points in ranges (pairs lo, hi, inclusive,
 * any order, may overlap); negate: the complement within Unicode.  Appends
 * the element (a GE_TERM for an ASCII-only class, else a GE_REF to a
 * generated rule of UTF-8 byte sequences) to v.  False: out of memory, or
 * an empty class (st filled). */
bool gb_class(gbuild *b, uint32_t owner, gvec *v, const uint32_t *ranges, int n_pairs, bool negate);
/* Appends x (the elements v->e[from..v->n), which it replaces) repeated
 * min..max times (max < 0: unbounded), through generated rules of owner. */
bool gb_repeat(gbuild *b, uint32_t owner, gvec *v, uint32_t from, long min, long max);
/* Checks (every rule defined, root exists, no left recursion, a way out
 * of every rule), drops alternatives that cannot finish, and compiles.
 * Frees nothing of b. */
grammar *gb_finish(gbuild *b, kvant_status *st);

/* UTF-8 encoding of cp (<= 0x10FFFF) into out[4]; returns its byte count. */
int gutf8_encode(uint32_t cp, uint8_t *out);
/* Decodes one code point from s[0..n); returns its byte count, 0 when the
 * bytes are not valid UTF-8 (overlong, surrogate, truncated). */
int gutf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* ---- a sequence's state (match.c) --------------------------------------------
 * Frames: (position, parent frame), hash-consed; frame 0 is the empty stack
 * (the grammar complete).  A state is a sorted list of frame ids (the tops
 * of its stacks), hash-consed too; state 0 is the dead state (no stacks).
 * trans[S * n_cls + class] is the state after one byte of that class from S
 * (GM_UNKNOWN until computed). */
enum { GM_UNKNOWN = 0xFFFFFFFFu };
enum { GM_TEXT_DONE = 1, GM_TEXT_UTF8 = 2 };
enum { GM_MEMO = 8, GM_MEMO_MAX_RANGES = 1 << 16 };

struct grammar_state {
    const grammar *g;
    uint32_t *fpos, *fpar, *stamp; /* frames (cap_fr) */
    uint32_t n_fr, cap_fr;
    uint32_t *fhash, fhcap; /* frame ids, 0 = empty slot */
    uint32_t gen;           /* stamp generation of the closure in progress */
    uint32_t *soff, *slen;  /* states (cap_st): their frames in sfr */
    uint32_t n_st, cap_st;
    uint32_t *sfr;
    size_t n_sfr, cap_sfr;
    uint32_t *shash, shcap; /* state ids, 0 = empty slot */
    uint32_t *trans;        /* (cap_st * n_cls) */
    /* text steps (cap_st), see gm_text: */
    uint32_t *tnext;        /* the state most ASCII bytes lead to (0: none) */
    gbits *tbits;           /* the ASCII bytes that lead there */
    uint8_t *tflags;        /* GM_TEXT_* */
    uint32_t cur;           /* the current state */
    bool ended;             /* an eog token was accepted */
    bool in_walk;           /* a mask walk is on: the hard cap of states applies */
    bool cache_full;        /* a mask walk passed the hard cap of states */
    uint32_t *work;         /* closure work list: (pos, parent) pairs */
    size_t n_work, cap_work;
    uint32_t *buf[2];       /* GRAMMAR_MAX_STACKS + 1 each: step outputs */
    uint32_t *wnext, *wend, *wst; /* trie walk stack (cap_walk) */
    int cap_walk;
    uint32_t *ranges;       /* the walk's allowed tokens: [lo, hi) pairs in trie order */
    size_t n_ranges, cap_ranges;
    /* the last masks (vocab.c): a state met again (inside a long string it
     * recurs token after token) costs writing its ranges out, not a walk */
    struct {
        const grammar_vocab *v;
        uint32_t state, count;
        uint32_t *ranges;
        size_t n_ranges, cap;
        uint64_t used;
    } memo[GM_MEMO];
    uint64_t memo_clock;
    /* cache limits (match.c's defaults; gm_set_limits for tests) */
    uint32_t lim_frames;
    size_t lim_sfr, lim_cells, lim_cells_hard;
    kvant_status err;
};

/* Tests: small cache limits, so compaction (soft) and the reference
 * fallback of a walk that fills the cache (hard) happen all the time. */
void gm_set_limits(grammar_state *s, uint32_t frames, size_t cells_soft, size_t cells_hard);

/* match.c, for vocab.c */
void gm_begin(grammar_state *s);                       /* clears err, compacts the caches if over their soft limits */
uint32_t gm_next_slow(grammar_state *s, uint32_t S, uint8_t byte); /* computes and caches one transition */
/* the state after byte from S (cached); 0 = dead */
static inline uint32_t gm_next(grammar_state *s, uint32_t S, uint8_t byte) {
    uint32_t t = s->trans[(size_t)S * s->g->n_cls + s->g->cls[byte]];
    return t != GM_UNKNOWN ? t : gm_next_slow(s, S, byte);
}
/* Text steps, for accepting a trie subtree whole: T = *next is the state
 * most ASCII bytes lead S to (0: none but dead), *bits those bytes; true
 * when every valid non-ASCII UTF-8 character leads S to T as well.  Inside
 * a string T is S itself (a loop); under a length bound, S counted on. */
bool gm_text_slow(grammar_state *s, uint32_t S);
static inline bool gm_text(grammar_state *s, uint32_t S, uint32_t *next, const gbits **bits) {
    if (!s->tflags[S]) gm_text_slow(s, S);
    *next = s->tnext[S];
    *bits = &s->tbits[S];
    return s->tflags[S] & GM_TEXT_UTF8;
}
bool gm_can_end_state(const grammar_state *s, uint32_t S);
/* The plain step, without the cache: in[0..n) frames -> out (sorted; returns
 * its count, 0 when dead, -1 on overflow / out of memory (s->err set)). */
int gm_step_raw(grammar_state *s, const uint32_t *in, int n, uint8_t byte, uint32_t *out);

/* ---- string buffer ------------------------------------------------------------ */
typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} gstr;
void gstr_put(gstr *b, const char *s, size_t n);
void gstr_puts(gstr *b, const char *s);
void gstr_printf(gstr *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gstr_free(gstr *b);

/* GBNF parser on an existing builder (the schema compiler adds its rules
 * through text). */
grammar *gbnf_compile(const char *text, size_t len, kvant_status *st);

#endif
