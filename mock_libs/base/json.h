/* A small strict JSON reader for the option values that carry JSON
 * (llm.MemPoolConfig, llm.HostMemPoolConfig, llm.LocalCommRes).
 *
 * RFC 8259 grammar, UTF-8 passed through unchecked, nesting limited to 64 levels.
 * The whole text must be one value with only whitespace around it. Objects keep
 * their members in order; json_member() returns the LAST member of a name, as the
 * vendor's JSON library does for repeated names.
 */
#ifndef LLDD_MOCK_JSON_H
#define LLDD_MOCK_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum json_type {
    JSON_NULL = 0,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT
} json_type;

typedef struct json_value {
    json_type type;
    int boolean;
    /* JSON_NUMBER: is_uint when the literal is a non-negative integer without
     * fraction or exponent that fits in uint64_t (then uint_value holds it). */
    int is_uint;
    uint64_t uint_value;
    /* JSON_STRING: decoded bytes, NUL-terminated (length excludes the NUL). */
    char *str;
    size_t str_len;
    /* JSON_ARRAY / JSON_OBJECT: count children; keys[i] names items[i] (objects). */
    struct json_value *items;
    char **keys;
    size_t count;
} json_value;

/* Parses text[0 .. len). Returns 0 and fills *out (release with json_free), or -1
 * with a short reason in why[0 .. why_len). */
int json_parse(const char *text, size_t len, json_value *out, char *why, size_t why_len);
void json_free(json_value *v);
/* The last member named `name` of an object, or NULL. */
const json_value *json_member(const json_value *object, const char *name);

#endif /* LLDD_MOCK_JSON_H */
