/* tok/pretok.c - pre-tokenizers: the split of a text into words before
 * byte-level BPE, one family per tokenizer.ggml.pre value, as llama.cpp's
 * llm_tokenizer_bpe and unicode_regex_split do it.
 *
 * A family is a list of regexes.  The text starts as one chunk; each regex
 * splits every chunk into its matches and the stretches between them (which
 * are kept as words of their own), and the next regex works on those chunks.
 * A regex sees only its chunk: a lookahead at the chunk's end sees the end of
 * the text.  Each regex runs in one of three ways, exactly as in llama.cpp:
 *
 *  - the GPT-2 and the Llama 3 regexes (and two families' special patterns)
 *    by hand-written splitters over the code points (llama.cpp's fast paths;
 *    they are what llama.cpp runs, so they are the behaviour to match);
 *  - a regex using \p{..} classes on the "collapsed" text: every code point
 *    above 127 becomes one byte standing for its class (0xD1 number, 0xD2
 *    letter, 0xD3 punctuation, 0xD4 mark, 0xD5 symbol, 0xD0 other, 0x0B for
 *    whitespace) and each \p{X} becomes [<that byte><the ASCII members>];
 *    PCRE2 then matches bytes with ASCII-only \s.  As in llama.cpp, \p{Lu},
 *    \p{Ll}, ... all mean any letter, and '~' is not in \p{S};
 *  - any other regex on the code points (PCRE2 in UTF mode, ASCII-only \s,
 *    non-ASCII whitespace replaced by \v first, as llama.cpp does for
 *    std::wregex).
 *
 * Matching follows std::regex_iterator: leftmost match, first alternative
 * wins, an empty match is retried non-empty at the same place and otherwise
 * skipped by one character, '$' matches only at the end.
 *
 * Text that is not UTF-8: llama.cpp turns every byte that starts no valid
 * sequence into U+FFFD.  Here such a byte is classified as U+FFFD (so the
 * words break in the same places) but kept, so the bytes reach the BPE and
 * survive a round trip. */
#include "tok/tok_impl.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- the regexes, spelled as llama.cpp has them (non-ASCII as \x{..}) ---- */

#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define CONTRACTIONS_OPT CONTRACTIONS "?"

static const char R_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char R_LLAMA3[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* tokenizer.json's own spelling; llama.cpp takes its fast path for it too */
static const char R_LLAMA3_ICASE[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char R_HAN[] = "\\p{Han}+";                   /* Kimi K2: one hand-written splitter */
static const char R_AFMOE_DIGITS[] = "\\p{AFMoE_digits}";  /* AFMoE's digit grouping */

static const char R_QWEN2[] = CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char R_QWEN35[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char R_JAIS2[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|"
    "\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";
static const char R_NEWLINE[] = "[\\r\\n]";
static const char R_DIGIT[] = "\\p{N}";
static const char R_DIGITS[] = "\\p{N}+";
static const char R_DIGITS3[] = "\\p{N}{1,3}";
static const char R_THREE_DIGITS[] = "[0-9][0-9][0-9]";
/* CJK ideographs, U+0800..U+4E00, Hangul (deepseek-llm / deepseek-coder) */
static const char R_DS_CJK[] = "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";
/* deepseek-llm's cased letters: its tokenizer.json lists them by range */
static const char R_DS_LETTERS[] =
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
    "\\x{1E900}-\\x{1E943}]+";
/* ASCII and fullwidth punctuation, quotes, ideographic space and marks */
static const char R_DS_PUNCT[] =
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+";
static const char R_DS_TRAIL_SPACE[] = "\\s+$";
static const char R_DSC_LETTERS[] = "\\s?\\p{L}+";
static const char R_DSC_PUNCT[] = "\\s?\\p{P}+";
/* CJK ideographs, hiragana, katakana */
static const char R_CJK_KANA[] = "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
static const char R_DS3_MAIN[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
static const char R_SPARK_MAIN[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+";
/* Hangul, CJK punctuation, bopomofo, CJK + kana */
static const char R_YOUTU_CJK[] =
    "[\\x{AC00}-\\x{D7A3}\\x{3131}-\\x{318E}]+|[\\x{FF01}\\x{2026}\\x{201C}\\x{201D}\\x{2018}\\x{2019}\\x{2014}"
    "\\x{FF1A}\\x{FF1B}\\x{FF0C}\\x{3001}-\\x{303F}\\x{FE30}-\\x{FE4F}]+|[\\x{3105}-\\x{312F}]+|"
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
#define CASED_WORDS(contr)                                                                                   \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" contr         \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" contr
static const char R_YOUTU_MAIN[] = CASED_WORDS(CONTRACTIONS_OPT) "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
                                   "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char R_TINY_AYA_DIGITS[] = "\\d{1,3}(?=(?:\\d{3})*\\b)";
static const char R_TINY_AYA_MAIN[] = CASED_WORDS(CONTRACTIONS_OPT) "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
                                      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* upper/lower runs without \p{Lu}: "a letter that is not a-z" */
#define LOOKAHEAD_WORDS(cls, contr)                                                                         \
    "[^\\r\\n\\p{L}\\p{N}]?((?=[" cls "])([^a-z]))*((?=[" cls "])([^A-Z]))+" contr                           \
    "|[^\\r\\n\\p{L}\\p{N}]?((?=[" cls "])([^a-z]))+((?=[" cls "])([^A-Z]))*" contr
static const char R_TEKKEN[] = LOOKAHEAD_WORDS("\\p{L}", "") "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
                                                             "\\s+(?!\\S)|\\s+";
static const char R_GPT4O[] =
    LOOKAHEAD_WORDS("\\p{L}", CONTRACTIONS_OPT) "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char R_GRANITE_EMB[] =
    LOOKAHEAD_WORDS("\\p{L}\\p{M}", CONTRACTIONS_OPT) "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* anything but whitespace, '|', parentheses and (CJK / Devanagari / Arabic) punctuation */
static const char R_PORO[] = " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+";
static const char R_CHAM_SENTINEL[] = "<sentinel:[0-9]+>";
static const char R_CHAM_IMAGE[] = "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z";
static const char R_CHAM_SPACES[] = "([\\t\\n]|    |  )";
static const char R_CHAM_PUNCT[] = "[\\p{P}!-/:-@\\[-`{-~]";
static const char R_SUPERBPE_GROUPS[] = "(?=(\\d{3})+(?!\\d))";
static const char R_BAILING[] =
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char R_SEED_CODER[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char R_UFAKZEKA[] =
    "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* CJK, kana, halfwidth kana, Kangxi radicals, Thai, Lao, Khmer, Myanmar, Hangul */
static const char R_AFMOE_SCRIPTS[] =
    "[\\x{4E00}-\\x{9FFF}\\x{3400}-\\x{4DBF}\\x{F900}-\\x{FAFF}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}"
    "\\x{FF65}-\\x{FF9F}\\x{2F00}-\\x{2FDF}\\x{E40}-\\x{E7F}\\x{E80}-\\x{EFF}\\x{1780}-\\x{17FF}\\x{1000}-\\x{109F}"
    "\\x{AA60}-\\x{AA7F}\\x{A9E0}-\\x{A9FF}\\x{AC00}-\\x{D7AF}\\x{1100}-\\x{11FF}]+";
static const char R_AFMOE_MAIN[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char R_LINES[] = "[^\\n]+|[\\n]+";
static const char R_EXAONE_MOE[] =
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?"
    "[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char R_MINICPM5[] = CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char R_DEFAULT_PUNCT[] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
static const char R_FALCON_PUNCT[] = "[\\p{P}\\$\\+<=>\\^~\\|`]+";

/* ---- families: llama.cpp's tokenizer.ggml.pre -> regex list ------------------ */

#define MAX_STEPS 8

typedef struct {
    const char *names;                   /* the pre values, '|'-separated */
    unsigned flags;                      /* TOK_PRE_* */
    const char *regex[MAX_STEPS];        /* applied in order; NULL-terminated */
} family;

static const family k_families[] = {
    {"default", 0, {R_DEFAULT_PUNCT, R_GPT2, R_DIGITS, R_THREE_DIGITS}},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano",
     TOK_PRE_IGNORE_MERGES | TOK_PRE_ADD_BOS, {R_LLAMA3}},
    {"dbrx|smaug-bpe", 0, {R_LLAMA3}},
    {"glm4|chatglm-bpe", TOK_PRE_NO_BOS, {R_LLAMA3}},
    {"jais-2", 0, {R_JAIS2}},
    {"deepseek-llm", 0, {R_NEWLINE, R_DS_LETTERS, R_DS_PUNCT, R_DS_TRAIL_SPACE, R_DS_CJK, R_DIGITS}},
    {"deepseek-coder", 0, {R_NEWLINE, R_DSC_LETTERS, R_DSC_PUNCT, R_DS_CJK, R_DIGIT}},
    {"deepseek-v3|hunyuan-dense|joyai-llm|hy_v4", 0, {R_DIGITS3, R_CJK_KANA, R_DS3_MAIN}},
    {"spark2_5", 0, {R_DIGITS3, R_CJK_KANA, R_SPARK_MAIN, R_DIGIT}},
    {"youtu", TOK_PRE_IGNORE_MERGES, {R_YOUTU_CJK, R_YOUTU_MAIN}},
    {"falcon", 0, {R_FALCON_PUNCT, R_GPT2, R_THREE_DIGITS}},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b|mellum2", 0, {R_DIGIT, R_GPT2}},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|jina-v1-en|"
     "jina-v2-code|roberta-bpe|exaone4|mpt|olmo|jais|trillion|granite-docling",
     0, {R_GPT2}},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2|megrez|stablelm2|hunyuan|solar-open|grok-2", 0, {R_QWEN2}},
    {"qwen35", 0, {R_QWEN35}},
    {"poro-chat|bloom|gpt3-finnish", 0, {R_PORO}},
    {"viking", 0, {R_PORO, R_DIGIT}},
    {"tekken", TOK_PRE_IGNORE_MERGES | TOK_PRE_ADD_BOS, {R_TEKKEN}},
    {"chameleon", TOK_PRE_ADD_BOS,
     {R_CHAM_SENTINEL, R_CHAM_IMAGE, R_CHAM_SPACES, R_DIGIT, R_CHAM_PUNCT, R_GPT2}},
    {"gpt-4o|llama4|kanana2|talkie|minimax-m2", 0, {R_GPT4O}},
    {"granite-embed-multi-97m", TOK_PRE_IGNORE_MERGES, {R_GRANITE_EMB}},
    {"tiny_aya|cohere2moe", 0, {R_TINY_AYA_DIGITS, R_TINY_AYA_MAIN}},
    {"kimi-k2", 0, {R_HAN}},
    {"superbpe", 0, {R_DIGITS, R_SUPERBPE_GROUPS}},
    {"bailingmoe|bailingmoe2|llada-moe", 0, {R_BAILING}},
    {"seed-coder", 0, {R_SEED_CODER}},
    {"ufakzeka", 0, {R_UFAKZEKA}},
    {"afmoe", 0, {R_AFMOE_DIGITS, R_AFMOE_SCRIPTS, R_AFMOE_MAIN}},
    {"laguna", 0, {R_LINES, R_QWEN2}},
    {"exaone-moe", 0, {R_EXAONE_MOE}},
    {"minicpm5", TOK_PRE_IGNORE_MERGES, {R_DIGITS3, R_MINICPM5}},
};

/* Families llama.cpp runs as BPE on raw UTF-8 instead of GPT-2's byte
 * characters (Gemma 4's SentencePiece-style BPE, a whitespace splitter):
 * refused by name, with the reason. */
static const char *const k_refused = "gemma4|granite-embed-multi-311m|sarvam-moe|whitespace";

static bool in_list(const char *list, const char *name, size_t len) {
    for (const char *p = list; *p;) {
        const char *e = strchr(p, '|');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == len && memcmp(p, name, len) == 0) return true;
        p += n + (e != NULL);
    }
    return false;
}

/* ---- compiled form -------------------------------------------------------------- */

typedef enum { STEP_GPT2, STEP_LLAMA3, STEP_KIMI_K2, STEP_AFMOE_DIGITS, STEP_COLLAPSED, STEP_WIDE } step_kind;

typedef struct {
    step_kind kind;
    pcre2_code *re;         /* STEP_COLLAPSED / STEP_WIDE */
} step;

struct tok_pre {
    unsigned flags;
    int n;
    step s[MAX_STEPS];
    bool collapsed, wide;   /* which text forms the steps need */
};

unsigned tok_pre_flags(const tok_pre *p) { return p->flags; }

void tok_pre_free(tok_pre *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++)
        if (p->s[i].re) pcre2_code_free(p->s[i].re);
    free(p);
}

/* The \p{..} names llama.cpp collapses, and the byte / ASCII members each
 * stands for (its k_ucat_cpt and k_ucat_map). */
static const struct {
    const char *name;
    const char *bytes;
} k_ucat[] = {
    {"\\p{N}", "\\xD1" "0-9"},
    {"\\p{L}", "\\xD2" "A-Za-z"},
    {"\\p{P}", "\\xD3" "\\x21-\\x23\\x25-\\x2A\\x2C-\\x2F\\x3A\\x3B\\x3F\\x40\\x5B-\\x5D\\x5F\\x7B\\x7D"},
    {"\\p{M}", "\\xD4"},
    {"\\p{S}", "\\xD5" "\\x24\\x2B\\x3C-\\x3E\\x5E\\x60\\x7C"}, /* no '~': llama.cpp leaves it out */
    {"\\p{Lu}", "\\xD2" "A-Za-z"},
    {"\\p{Ll}", "\\xD2" "A-Za-z"},
    {"\\p{Lt}", "\\xD2" "A-Za-z"},
    {"\\p{Lm}", "\\xD2" "A-Za-z"},
    {"\\p{Lo}", "\\xD2" "A-Za-z"},
};

static bool uses_ucat(const char *re) {
    for (size_t k = 0; k < sizeof k_ucat / sizeof *k_ucat; k++)
        if (strstr(re, k_ucat[k].name)) return true;
    return false;
}

/* The collapsed form of a regex (malloc'd), as llama.cpp rewrites it:
 * outside brackets \p{X} becomes [..], inside it is spliced in. */
static char *collapse_regex(const char *re) {
    size_t n = strlen(re), cap = 4 * n + 64, o = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        if (o + 80 > cap) {
            char *d = realloc(out, cap *= 2);
            if (!d) {
                free(out);
                return NULL;
            }
            out = d;
        }
        if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
            out[o++] = '[';
            inside = true;
            continue;
        }
        if (inside && re[i] == ']' && re[i - 1] != '\\') {
            out[o++] = ']';
            inside = false;
            continue;
        }
        if (re[i] == '\\' && i + 3 < n && re[i + 1] == 'p' && re[i + 2] == '{') {
            const char *close = strchr(re + i + 3, '}');
            size_t len = close ? (size_t)(close - (re + i)) + 1 : 0;
            for (size_t k = 0; close && len <= 11 && k < sizeof k_ucat / sizeof *k_ucat; k++) {
                if (strlen(k_ucat[k].name) != len || memcmp(k_ucat[k].name, re + i, len) != 0) continue;
                if (!inside) out[o++] = '[';
                size_t bl = strlen(k_ucat[k].bytes);
                memcpy(out + o, k_ucat[k].bytes, bl);
                o += bl;
                if (!inside) out[o++] = ']';
                i += len - 1;
                goto next;
            }
        }
        out[o++] = re[i];
    next:;
    }
    out[o] = 0;
    return out;
}

static kvant_code compile(step *s, const char *re, bool collapsed, kvant_status *st) {
    char *pat = collapsed ? collapse_regex(re) : NULL;
    if (collapsed && !pat) return core_fail(st, KVANT_ERR_NOMEM, "out of memory for a pre-tokenizer regex");
    int err;
    PCRE2_SIZE off;
    uint32_t opts = PCRE2_DOLLAR_ENDONLY | (collapsed ? 0 : PCRE2_UTF);
    s->re = pcre2_compile((PCRE2_SPTR)(collapsed ? pat : re), PCRE2_ZERO_TERMINATED, opts, &err, &off, NULL);
    free(pat);
    if (!s->re) {
        char msg[128];
        pcre2_get_error_message(err, (PCRE2_UCHAR *)msg, sizeof msg);
        return core_fail(st, KVANT_ERR_UNSUPPORTED, "pcre2 cannot compile the pre-tokenizer regex '%.60s': %s", re,
                         msg);
    }
    pcre2_jit_compile(s->re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    s->kind = collapsed ? STEP_COLLAPSED : STEP_WIDE;
    return KVANT_OK;
}

tok_pre *tok_pre_new(const char *name, size_t len, unsigned flags, kvant_status *st) {
    const family *f = NULL;
    for (size_t i = 0; i < sizeof k_families / sizeof *k_families && !f; i++)
        if (in_list(k_families[i].names, name, len)) f = &k_families[i];
    int shown = len > 64 ? 64 : (int)len;
    if (!f) {
        bool refused = in_list(k_refused, name, len);
        core_fail(st, KVANT_ERR_UNSUPPORTED, "pre-tokenizer '%.*s' is not supported%s", shown, name,
                  refused ? " (llama.cpp runs it as BPE on raw UTF-8, which kvant does not have)" : "");
        return NULL;
    }
    tok_pre *p = calloc(1, sizeof *p);
    if (!p) {
        core_fail(st, KVANT_ERR_NOMEM, "out of memory for pre-tokenizer '%.*s'", shown, name);
        return NULL;
    }
    p->flags = f->flags;
    bool fast = !(flags & TOK_PRE_REGEX_ONLY);
    for (int i = 0; i < MAX_STEPS && f->regex[i]; i++) {
        const char *re = f->regex[i];
        step *s = &p->s[p->n++];
        if (fast && !strcmp(re, R_GPT2)) s->kind = STEP_GPT2;
        else if (fast && (!strcmp(re, R_LLAMA3) || !strcmp(re, R_LLAMA3_ICASE))) s->kind = STEP_LLAMA3;
        else if (!strcmp(re, R_HAN)) s->kind = STEP_KIMI_K2;          /* no regex form: always by hand */
        else if (!strcmp(re, R_AFMOE_DIGITS)) s->kind = STEP_AFMOE_DIGITS;
        else if (compile(s, re, uses_ucat(re), st)) {
            tok_pre_free(p);
            return NULL;
        }
        p->collapsed |= s->kind == STEP_COLLAPSED;
        p->wide |= s->kind == STEP_WIDE;
    }
    core_ok(st);
    return p;
}

/* ---- the text being split ------------------------------------------------------- */

typedef struct {
    const uint8_t *s;       /* the text */
    size_t n;               /* code points */
    uint32_t *cp;           /* (n) code points, invalid bytes as U+FFFD */
    uint8_t *fl;            /* (n) TOKU_* flags */
    uint32_t *boff;         /* (n+1) byte offset of code point i in s */
    uint8_t *coll;          /* (n) collapsed form, one byte per code point */
    uint8_t *wide;          /* UTF-8 of the code points, non-ASCII spaces as \v */
    uint32_t *woff;         /* (n+1) byte offset of code point i in wide */
} ptext;

static void ptext_free(ptext *t) {
    free(t->cp);
    free(t->fl);
    free(t->boff);
    free(t->coll);
    free(t->wide);
    free(t->woff);
}

static bool ptext_init(ptext *t, const tok_pre *p, const char *text, size_t len) {
    memset(t, 0, sizeof *t);
    t->s = (const uint8_t *)text;
    t->cp = malloc((len + 1) * sizeof *t->cp);
    t->fl = malloc(len + 1);
    t->boff = malloc((len + 1) * sizeof *t->boff);
    if (!t->cp || !t->fl || !t->boff) return false;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cl;
        uint32_t c = tok_uni_decode(t->s + i, len - i, &cl);
        t->cp[n] = c;
        t->fl[n] = tok_uni_flags(c);
        t->boff[n++] = (uint32_t)i;
        i += cl;
    }
    t->boff[n] = (uint32_t)len;
    t->n = n;
    if (p->collapsed) {
        static const struct { uint8_t flag, byte; } k_byte[] = {
            {TOKU_N, 0xD1}, {TOKU_L, 0xD2}, {TOKU_P, 0xD3}, {TOKU_M, 0xD4}, {TOKU_S, 0xD5},
        };
        if (!(t->coll = malloc(n + 1))) return false;
        for (size_t i = 0; i < n; i++) {
            uint8_t b = 0xD0;
            if (t->cp[i] < 128) b = (uint8_t)t->cp[i];
            else if (t->fl[i] & TOKU_WS) b = 0x0B;
            else
                for (size_t k = 0; k < sizeof k_byte / sizeof *k_byte; k++)
                    if (t->fl[i] & k_byte[k].flag) b = k_byte[k].byte;
            t->coll[i] = b;
        }
    }
    if (p->wide) {
        if (!(t->wide = malloc(4 * n + 1)) || !(t->woff = malloc((n + 1) * sizeof *t->woff))) return false;
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t c = t->cp[i];
            if (c > 0x7F && (t->fl[i] & TOKU_WS)) c = 0x0B;
            if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = 0xFFFD; /* PCRE2 takes valid UTF-8 only */
            t->woff[i] = (uint32_t)o;
            uint8_t *w = t->wide + o;
            if (c < 0x80) w[0] = (uint8_t)c, o += 1;
            else if (c < 0x800) w[0] = (uint8_t)(0xC0 | c >> 6), w[1] = (uint8_t)(0x80 | (c & 0x3F)), o += 2;
            else if (c < 0x10000)
                w[0] = (uint8_t)(0xE0 | c >> 12), w[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F)),
                w[2] = (uint8_t)(0x80 | (c & 0x3F)), o += 3;
            else
                w[0] = (uint8_t)(0xF0 | c >> 18), w[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F)),
                w[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F)), w[3] = (uint8_t)(0x80 | (c & 0x3F)), o += 4;
        }
        t->woff[n] = (uint32_t)o;
    }
    return true;
}

/* ---- hand-written splitters (llama.cpp's unicode_regex_split_custom_*) -------------
 * Each splits the chunk [ini, end) of code points and appends the word
 * lengths.  Outside the chunk a code point reads as OOR with no flags. */

#define OOR 0xFFFFFFFFu

typedef struct {
    const ptext *t;
    size_t ini, end, prev;  /* chunk; end of the last word emitted */
    tok_u32v *out;
} chunk;

static uint32_t cpt(const chunk *c, size_t pos) { return pos < c->end ? c->t->cp[pos] : OOR; }
static uint8_t flg(const chunk *c, size_t pos) { return pos < c->end ? c->t->fl[pos] : 0; }

/* Emits the word up to end; returns its length. */
static size_t add(chunk *c, size_t end) {
    size_t n = end - c->prev;
    if (n > 0) tok_u32v_push(c->out, (uint32_t)n);
    c->prev = end;
    return n;
}

static uint32_t lower_ascii(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d (icase: any case); the length matched or 0 */
static size_t contraction(const chunk *c, size_t pos, bool icase) {
    if (cpt(c, pos) != '\'' || pos + 1 >= c->end) return 0;
    uint32_t a = cpt(c, pos + 1);
    if (icase) a = lower_ascii(a); /* no other code point lowercases to one of these letters */
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= c->end) return 0;
    uint32_t b = cpt(c, pos + 2);
    if (icase) b = lower_ascii(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

#define NOT_WLN(f) (!((f) & (TOKU_WS | TOKU_L | TOKU_N)))

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(chunk *c) {
    for (size_t pos = c->ini; pos < c->end;) {
        const uint32_t cp = cpt(c, pos);
        const uint8_t f = flg(c, pos);
        size_t k = contraction(c, pos, false);
        if (k) {
            pos += add(c, pos + k);
            continue;
        }
        uint8_t f2 = cp == ' ' ? flg(c, pos + 1) : f;
        if (f2 & TOKU_L) {
            pos += cp == ' ';
            while (f2 & TOKU_L) f2 = flg(c, ++pos);
            add(c, pos);
            continue;
        }
        if (f2 & TOKU_N) {
            pos += cp == ' ';
            while (f2 & TOKU_N) f2 = flg(c, ++pos);
            add(c, pos);
            continue;
        }
        if (NOT_WLN(f2) && f2) {
            pos += cp == ' ';
            while (NOT_WLN(f2) && f2) f2 = flg(c, ++pos);
            add(c, pos);
            continue;
        }
        size_t nws = 0;
        while (flg(c, pos + nws) & TOKU_WS) nws++;
        if (nws > 1 && cpt(c, pos + nws) != OOR) { /* \s+(?!\S): leave the last one to the next word */
            pos += nws - 1;
            add(c, pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            add(c, pos);
            continue;
        }
        add(c, ++pos); /* no match: a word of its own */
    }
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static void split_llama3(chunk *c) {
    for (size_t pos = c->ini; pos < c->end;) {
        const uint32_t cp = cpt(c, pos);
        const uint8_t f = flg(c, pos);
        size_t k = contraction(c, pos, true);
        if (k) {
            pos += add(c, pos + k);
            continue;
        }
        if (!(cp == '\r' || cp == '\n' || (f & TOKU_N)) && ((f & TOKU_L) || (flg(c, pos + 1) & TOKU_L))) {
            pos++;
            while (flg(c, pos) & TOKU_L) pos++;
            add(c, pos);
            continue;
        }
        if (f & TOKU_N) {
            size_t ini = pos;
            while (flg(c, pos) & TOKU_N) {
                if (++pos - ini >= 3) {
                    add(c, pos);
                    ini = pos;
                }
            }
            add(c, pos);
            continue;
        }
        uint8_t f2 = cp == ' ' ? flg(c, pos + 1) : f;
        if (NOT_WLN(f2) && f) { /* llama.cpp tests f here, not f2 */
            pos += cp == ' ';
            while (NOT_WLN(f2) && f2) f2 = flg(c, ++pos);
            uint32_t c2 = cpt(c, pos);
            while (c2 == '\r' || c2 == '\n') c2 = cpt(c, ++pos);
            add(c, pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (flg(c, pos + nws) & TOKU_WS) {
            uint32_t c2 = cpt(c, pos + nws);
            if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { /* \s*[\r\n]+ */
            pos = last_rn;
            add(c, pos);
            continue;
        }
        if (nws > 1 && cpt(c, pos + nws) != OOR) {
            pos += nws - 1;
            add(c, pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            add(c, pos);
            continue;
        }
        add(c, ++pos);
    }
}

static bool han(const chunk *c, size_t pos) { return tok_uni_is_han(cpt(c, pos)); }
static bool letter_not_han(const chunk *c, size_t pos) { return (flg(c, pos) & TOKU_L) && !han(c, pos); }

/* Kimi K2 (tokenization_kimi.py): [\p{Han}]+ | letter words without Han with
 * an optional contraction | \p{N}{1,3} | the Llama 3 rest */
static void split_kimi_k2(chunk *c) {
    for (size_t pos = c->ini; pos < c->end;) {
        const uint32_t cp = cpt(c, pos);
        const uint8_t f = flg(c, pos);
        if (tok_uni_is_han(cp)) {
            while (han(c, pos)) pos++;
            add(c, pos);
            continue;
        }
        bool lead_ok = !(cp == '\r' || cp == '\n' || (f & (TOKU_L | TOKU_N)));
        if (((f & TOKU_L) && !tok_uni_is_han(cp)) || (lead_ok && letter_not_han(c, pos + 1))) {
            bool lead = false, letters = false;
            if (lead_ok) {
                lead = true;
                pos++;
            }
            while (letter_not_han(c, pos)) {
                letters = true;
                pos++;
            }
            if (letters || (!lead && letter_not_han(c, pos))) {
                if (!letters) pos++;
                while (letter_not_han(c, pos)) pos++;
                if (cpt(c, pos) == '\'' && pos + 1 < c->end) {
                    uint32_t a = lower_ascii(cpt(c, pos + 1));
                    if (a == 's' || a == 't' || a == 'm' || a == 'd') {
                        pos += 2;
                    } else if (pos + 2 < c->end) {
                        uint32_t b = lower_ascii(cpt(c, pos + 2));
                        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) pos += 3;
                    }
                }
                add(c, pos);
                continue;
            } else if (lead) {
                pos--;
            }
        }
        if (f & TOKU_N) {
            size_t ini = pos;
            while (flg(c, pos) & TOKU_N) {
                if (++pos - ini >= 3) {
                    add(c, pos);
                    ini = pos;
                }
            }
            add(c, pos);
            continue;
        }
        uint8_t f2 = cp == ' ' ? flg(c, pos + 1) : f;
        if (NOT_WLN(f2) && f2) {
            pos += cp == ' ';
            while (NOT_WLN(f2) && f2) f2 = flg(c, ++pos);
            uint32_t c2 = cpt(c, pos);
            while (c2 == '\r' || c2 == '\n') c2 = cpt(c, ++pos);
            add(c, pos);
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (flg(c, pos + nws) & TOKU_WS) {
            uint32_t c2 = cpt(c, pos + nws);
            if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) {
            pos = last_rn;
            add(c, pos);
            continue;
        }
        if (nws > 1 && cpt(c, pos + nws) != OOR) {
            pos += nws - 1;
            add(c, pos);
            continue;
        }
        if (nws > 0) {
            pos += nws;
            add(c, pos);
            continue;
        }
        add(c, ++pos);
    }
}

/* AFMoE digits: a run of n digits splits as n % 3 leading digits, then
 * threes; the text before the run goes with its first group, as in llama.cpp. */
static void split_afmoe_digits(chunk *c) {
    for (size_t pos = c->ini; pos < c->end;) {
        if (!(flg(c, pos) & TOKU_N)) {
            pos++;
            continue;
        }
        size_t first = pos, count = 0;
        while ((flg(c, pos) & TOKU_N) && pos < c->end) count++, pos++;
        size_t cur = first, rem = count % 3;
        if (rem > 0) {
            add(c, cur + rem);
            cur += rem;
        }
        while (cur < first + count) {
            add(c, cur + 3);
            cur += 3;
        }
    }
    if (c->prev < c->end) add(c, c->end);
}

/* ---- PCRE2 steps -------------------------------------------------------------------- */

static int match(const pcre2_code *re, const uint8_t *s, size_t n, size_t start, uint32_t opts,
                 pcre2_match_data *md) {
    int rc = pcre2_match(re, s, n, start, opts, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(re, s, n, start, opts | PCRE2_NO_JIT, md, NULL);
    return rc;
}

/* The code point index of byte offset b of a chunk's wide text (a character boundary). */
static size_t cp_at(const ptext *t, size_t ini, size_t end, size_t b) {
    uint32_t target = t->woff[ini] + (uint32_t)b;
    size_t lo = ini, hi = end; /* woff[lo] <= target <= woff[hi] */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->woff[mid] < target) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Splits a chunk by a regex the way std::regex_iterator walks it. */
static void split_regex(const step *st, chunk *c, pcre2_match_data *md) {
    const ptext *t = c->t;
    const bool wide = st->kind == STEP_WIDE;
    const uint8_t *s = wide ? t->wide + t->woff[c->ini] : t->coll + c->ini;
    const size_t n = wide ? t->woff[c->end] - t->woff[c->ini] : c->end - c->ini;
    size_t start = 0, prev = 0; /* bytes of s */
    uint32_t opts = 0;
    /* byte offset in s -> code point index (match ends are character boundaries) */
#define CP_AT(b) (wide ? cp_at(t, c->ini, c->end, (b)) : c->ini + (b))
    while (start <= n) {
        int rc = match(st->re, s, n, start, opts, md);
        if (rc == PCRE2_ERROR_NOMATCH && opts) { /* no non-empty match where the empty one was */
            opts = 0;
            if (start >= n) break;
            start++;
            while (wide && start < n && (s[start] & 0xC0) == 0x80) start++;
            continue;
        }
        if (rc < 0) break; /* no more matches (or a PCRE2 limit: the rest stays one word) */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms > prev) add(c, CP_AT(ms));
        add(c, CP_AT(me));
        prev = me;
        start = me;
        opts = me == ms ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
    }
    if (c->prev < c->end) add(c, c->end);
#undef CP_AT
}

/* ---- the split ---------------------------------------------------------------------- */

bool tok_pre_words(const tok_pre *p, const char *text, size_t len, tok_u32v *ends) {
    if (len == 0) return true;
    if (len >= UINT32_MAX / 4) return false; /* offsets are 32-bit */
    ptext t;
    tok_u32v cur = {0}, next = {0};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    bool ok = md && ptext_init(&t, p, text, len);
    if (ok) tok_u32v_push(&cur, (uint32_t)t.n);
    for (int k = 0; ok && k < p->n; k++) {
        const step *st = &p->s[k];
        next.n = 0;
        size_t ini = 0;
        for (size_t j = 0; j < cur.n; j++) {
            chunk c = {&t, ini, ini + cur.d[j], ini, &next};
            switch (st->kind) {
            case STEP_GPT2: split_gpt2(&c); break;
            case STEP_LLAMA3: split_llama3(&c); break;
            case STEP_KIMI_K2: split_kimi_k2(&c); break;
            case STEP_AFMOE_DIGITS: split_afmoe_digits(&c); break;
            case STEP_COLLAPSED:
            case STEP_WIDE: split_regex(st, &c, md); break;
            }
            ini = c.end;
        }
        tok_u32v tmp = cur;
        cur = next;
        next = tmp;
        ok = !cur.oom && !next.oom;
    }
    if (ok) {
        size_t cp = 0;
        for (size_t j = 0; j < cur.n; j++) {
            cp += cur.d[j];
            tok_u32v_push(ends, t.boff[cp]);
        }
        ok = !ends->oom;
    }
    if (md) ptext_free(&t);
    pcre2_match_data_free(md);
    free(cur.d);
    free(next.d);
    return ok;
}

int tok_pre_split(const tok_pre *p, const char *text, size_t len, uint32_t *ends, int max) {
    tok_u32v v = {0};
    if (!tok_pre_words(p, text, len, &v) || v.n > INT_MAX) {
        free(v.d);
        return INT_MIN;
    }
    int n = (int)v.n;
    if (n > 0 && max > 0) memcpy(ends, v.d, (size_t)(n < max ? n : max) * sizeof *ends);
    free(v.d);
    return n > max ? -n : n;
}
