/* The thread-local last-error message shared by the ACL subset and the engine.
 *
 * Every failing call of the mock writes its message here before returning, in the
 * calling thread, so a binding reads the right text even when other threads fail
 * at the same moment (docs/design.md). A success leaves the text alone, as
 * aclGetRecentErrMsg does on a device (docs/reference/acl.md A-8). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/mock_internal.h"

enum { MOCK_ERROR_CAPACITY = 1024 };

static _Thread_local char t_message[MOCK_ERROR_CAPACITY];
static _Thread_local int t_has_message;

static void mock_set_error_v(const char *fmt, va_list ap)
{
    int n = vsnprintf(t_message, sizeof t_message, fmt, ap);
    if (n < 0)
        snprintf(t_message, sizeof t_message, "(unformattable error message)");
    t_has_message = 1;
}

void mock_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mock_set_error_v(fmt, ap);
    va_end(ap);
}

lldd_status mock_refuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    mock_set_error_v(fmt, ap);
    va_end(ap);
    return LLM_PARAM_INVALID;
}

const char *mock_error_or_null(void)
{
    return t_has_message ? t_message : NULL;
}

MOCK_EXPORT const char *lldd_last_error(void)
{
    return t_has_message ? t_message : "";
}

/* ---- lint record ------------------------------------------------------------------------- */

enum { MOCK_LINT_SLOTS = 8, MOCK_LINT_CAPACITY = 512 };

static _Thread_local uint32_t t_lint_count;
static _Thread_local uint32_t t_lint_rule[MOCK_LINT_SLOTS];
static _Thread_local char t_lint_text[MOCK_LINT_SLOTS][MOCK_LINT_CAPACITY];

/* The true spellings of llm_datadist_ffi.lint.strict(): 1, true, yes, on, in any case,
 * spaces around; anything else is off here (the Python layer refuses a value that is
 * neither true nor false before the engine sees a call). */
int mock_strict(void)
{
    static const char *const on[] = {"1", "true", "yes", "on"};
    const char *v = getenv("LLM_DATADIST_FFI_STRICT");
    size_t n = 0;
    if (v == NULL)
        return 0;
    while (isspace((unsigned char)*v))
        v++;
    while (v[n] != '\0' && !isspace((unsigned char)v[n]))
        n++;
    for (const char *rest = v + n; *rest != '\0'; rest++)
        if (!isspace((unsigned char)*rest))
            return 0;
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
        if (strlen(on[i]) == n && strncasecmp(v, on[i], n) == 0)
            return 1;
    return 0;
}

int mock_lint(uint32_t rule, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (mock_strict()) {
        mock_set_error_v(fmt, ap);
        va_end(ap);
        return 1;
    }
    if (t_lint_count < MOCK_LINT_SLOTS) {
        char *out = t_lint_text[t_lint_count];
        if (vsnprintf(out, MOCK_LINT_CAPACITY, fmt, ap) < 0)
            snprintf(out, MOCK_LINT_CAPACITY, "(unformattable lint message)");
        t_lint_rule[t_lint_count] = rule;
    }
    va_end(ap);
    if (t_lint_count < UINT32_MAX)
        t_lint_count++;
    return 0;
}

MOCK_EXPORT uint32_t lldd_mock_lint_count(void)
{
    return t_lint_count;
}

MOCK_EXPORT uint32_t lldd_mock_lint_rule(uint32_t index)
{
    return index < t_lint_count && index < MOCK_LINT_SLOTS ? t_lint_rule[index] : 0;
}

MOCK_EXPORT const char *lldd_mock_lint_text(uint32_t index)
{
    return index < t_lint_count && index < MOCK_LINT_SLOTS ? t_lint_text[index] : "";
}

MOCK_EXPORT void lldd_mock_lint_clear(void)
{
    t_lint_count = 0;
}

/* ---- per-cluster reasons of the last link/unlink call ----------------------------------- */

enum { MOCK_LINK_REASONS = 64, MOCK_LINK_REASON_CAPACITY = 256 };

static _Thread_local uint32_t t_link_reason_count;
static _Thread_local char t_link_reason[MOCK_LINK_REASONS][MOCK_LINK_REASON_CAPACITY];

void mock_link_reasons_begin(size_t count)
{
    t_link_reason_count = count > UINT32_MAX ? UINT32_MAX : (uint32_t)count;
    for (size_t i = 0; i < MOCK_LINK_REASONS && i < count; i++)
        t_link_reason[i][0] = '\0';
}

void mock_link_reason_set(size_t index, const char *text)
{
    if (index < MOCK_LINK_REASONS && index < t_link_reason_count)
        snprintf(t_link_reason[index], MOCK_LINK_REASON_CAPACITY, "%s", text);
}

MOCK_EXPORT uint32_t lldd_mock_link_reason_count(void)
{
    return t_link_reason_count;
}

MOCK_EXPORT const char *lldd_mock_link_reason(uint32_t index)
{
    return index < MOCK_LINK_REASONS && index < t_link_reason_count ? t_link_reason[index] : "";
}

/* ---- the bytes the calling thread's calls moved (include/lldd/mock.h) ------------------- */

static _Thread_local uint64_t t_bytes_moved;

void mock_bytes_moved_add(uint64_t bytes)
{
    t_bytes_moved += bytes;
}

MOCK_EXPORT uint64_t lldd_mock_bytes_moved(void)
{
    return t_bytes_moved;
}
