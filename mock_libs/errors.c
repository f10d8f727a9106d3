/* The thread-local last-error message shared by the ACL subset and the engine.
 *
 * Every failing call of the mock writes its message here before returning, in the
 * calling thread, so a binding reads the right text even when other threads fail
 * at the same moment (STYLE §3). A success leaves the text alone, as
 * aclGetRecentErrMsg does on a device (acl.md A-8). */
#include <stdio.h>

#include "mock_internal.h"

enum { MOCK_ERROR_CAPACITY = 1024 };

static _Thread_local char t_message[MOCK_ERROR_CAPACITY];
static _Thread_local int t_has_message;

void mock_set_error_v(const char *fmt, va_list ap)
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

const char *mock_error_or_null(void)
{
    return t_has_message ? t_message : NULL;
}

MOCK_EXPORT const char *lldd_last_error(void)
{
    return t_has_message ? t_message : "";
}
