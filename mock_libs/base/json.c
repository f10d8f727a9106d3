/* Strict JSON reader (see json.h). Recursive descent over a bounded depth; every
 * allocation is released by json_free, also on a parse error half way. */
#include "base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { JSON_MAX_DEPTH = 64 };

typedef struct parser {
    const char *p;
    const char *end;
    char *why;
    size_t why_len;
    int failed;
} parser;

static int fail(parser *ps, const char *what)
{
    if (!ps->failed) {
        ps->failed = 1;
        if (ps->why != NULL && ps->why_len > 0)
            snprintf(ps->why, ps->why_len, "%s", what);
    }
    return -1;
}

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int literal(parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return fail(ps, "invalid literal");
    ps->p += n;
    return 0;
}

static int hex4(parser *ps, unsigned *out)
{
    if (ps->end - ps->p < 4)
        return fail(ps, "truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = ps->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return fail(ps, "invalid \\u escape");
    }
    ps->p += 4;
    *out = v;
    return 0;
}

static size_t put_utf8(char *dst, unsigned cp)
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string literal at ps->p (which is '"'); the decoded text is never longer
 * than the literal, so one allocation of the literal's size suffices. */
static int parse_string(parser *ps, char **out, size_t *out_len)
{
    ps->p++; /* opening quote */
    const char *start = ps->p;
    const char *q = start;
    while (q < ps->end && *q != '"') {
        if (*q == '\\')
            q++;
        q++;
    }
    if (q >= ps->end)
        return fail(ps, "unterminated string");
    char *buf = malloc((size_t)(q - start) + 1);
    if (buf == NULL)
        return fail(ps, "out of memory");
    size_t n = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) {
            free(buf);
            return fail(ps, "control character in string");
        }
        if (c != '\\') {
            buf[n++] = (char)c;
            ps->p++;
            continue;
        }
        ps->p++;
        if (ps->p >= ps->end) {
            free(buf);
            return fail(ps, "truncated escape");
        }
        char e = *ps->p++;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(ps, &cp) != 0) {
                free(buf);
                return -1;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (ps->end - ps->p < 2 || ps->p[0] != '\\' || ps->p[1] != 'u') {
                    free(buf);
                    return fail(ps, "unpaired surrogate");
                }
                ps->p += 2;
                if (hex4(ps, &lo) != 0) {
                    free(buf);
                    return -1;
                }
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    free(buf);
                    return fail(ps, "unpaired surrogate");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(buf);
                return fail(ps, "unpaired surrogate");
            }
            n += put_utf8(buf + n, cp);
            break;
        }
        default:
            free(buf);
            return fail(ps, "invalid escape");
        }
    }
    ps->p++; /* closing quote */
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return 0;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int parse_number(parser *ps, json_value *v)
{
    const char *s = ps->p;
    int negative = 0, integral = 1;
    if (ps->p < ps->end && *ps->p == '-') {
        negative = 1;
        ps->p++;
    }
    if (ps->p >= ps->end || !is_digit(*ps->p))
        return fail(ps, "invalid number");
    if (*ps->p == '0') {
        ps->p++;
        if (ps->p < ps->end && is_digit(*ps->p))
            return fail(ps, "leading zero in number");
    } else {
        while (ps->p < ps->end && is_digit(*ps->p))
            ps->p++;
    }
    const char *int_end = ps->p;
    if (ps->p < ps->end && *ps->p == '.') {
        integral = 0;
        ps->p++;
        if (ps->p >= ps->end || !is_digit(*ps->p))
            return fail(ps, "invalid fraction");
        while (ps->p < ps->end && is_digit(*ps->p))
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        integral = 0;
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (ps->p >= ps->end || !is_digit(*ps->p))
            return fail(ps, "invalid exponent");
        while (ps->p < ps->end && is_digit(*ps->p))
            ps->p++;
    }
    v->type = JSON_NUMBER;
    if (!negative && integral) {
        uint64_t acc = 0;
        int fits = 1;
        for (const char *d = s; d < int_end; d++) {
            if (__builtin_mul_overflow(acc, 10u, &acc) || __builtin_add_overflow(acc, (uint64_t)(*d - '0'), &acc)) {
                fits = 0;
                break;
            }
        }
        v->is_uint = fits;
        v->uint_value = fits ? acc : 0;
    }
    return 0;
}

static int parse_value(parser *ps, json_value *v, int depth);

static int grow(json_value *v, size_t *cap, int with_keys)
{
    if (v->count < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 4;
    json_value *items = realloc(v->items, ncap * sizeof *items);
    if (items == NULL)
        return -1;
    v->items = items;
    if (with_keys) {
        char **keys = realloc(v->keys, ncap * sizeof *keys);
        if (keys == NULL)
            return -1;
        v->keys = keys;
    }
    *cap = ncap;
    return 0;
}

static int parse_container(parser *ps, json_value *v, int depth, int object)
{
    char close = object ? '}' : ']';
    size_t cap = 0;
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        if (grow(v, &cap, object) != 0)
            return fail(ps, "out of memory");
        json_value *item = &v->items[v->count];
        memset(item, 0, sizeof *item);
        if (object) {
            char *key;
            size_t key_len;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != '"')
                return fail(ps, "expected a member name");
            if (parse_string(ps, &key, &key_len) != 0)
                return -1;
            v->keys[v->count] = key;
            v->count++; /* owned from here, so json_free releases the key on error */
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':')
                return fail(ps, "expected ':'");
            ps->p++;
            if (parse_value(ps, item, depth + 1) != 0)
                return -1;
        } else {
            v->count++;
            if (parse_value(ps, item, depth + 1) != 0)
                return -1;
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 0;
        }
        return fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(parser *ps, json_value *v, int depth)
{
    if (depth > JSON_MAX_DEPTH)
        return fail(ps, "nesting too deep");
    skip_ws(ps);
    if (ps->p >= ps->end)
        return fail(ps, "unexpected end of text");
    switch (*ps->p) {
    case '{':
        return parse_container(ps, v, depth, 1);
    case '[':
        return parse_container(ps, v, depth, 0);
    case '"':
        v->type = JSON_STRING;
        return parse_string(ps, &v->str, &v->str_len);
    case 't':
        v->type = JSON_BOOL;
        v->boolean = 1;
        return literal(ps, "true");
    case 'f':
        v->type = JSON_BOOL;
        return literal(ps, "false");
    case 'n':
        v->type = JSON_NULL;
        return literal(ps, "null");
    default:
        return parse_number(ps, v);
    }
}

int json_parse(const char *text, size_t len, json_value *out, char *why, size_t why_len)
{
    parser ps = {text, text + len, why, why_len, 0};
    memset(out, 0, sizeof *out);
    if (text == NULL)
        return fail(&ps, "no text");
    if (parse_value(&ps, out, 0) != 0) {
        json_free(out);
        return -1;
    }
    skip_ws(&ps);
    if (ps.p != ps.end) {
        json_free(out);
        return fail(&ps, "text after the value");
    }
    return 0;
}

void json_free(json_value *v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; i < v->count; i++) {
        json_free(&v->items[i]);
        if (v->keys != NULL)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    memset(v, 0, sizeof *v);
}

const json_value *json_member(const json_value *object, const char *name)
{
    if (object == NULL || object->type != JSON_OBJECT)
        return NULL;
    for (size_t i = object->count; i-- > 0;)
        if (strcmp(object->keys[i], name) == 0)
            return &object->items[i];
    return NULL;
}
