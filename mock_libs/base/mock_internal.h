/* Internal interface shared by the translation units of the mock library.
 * Not installed, not read by cffi. */
#ifndef LLDD_MOCK_INTERNAL_H
#define LLDD_MOCK_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "acl_subset.h"
#include "llm_datadist_ffi_mock.h"

#define MOCK_EXPORT __attribute__((visibility("default")))
#define MOCK_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* ---- errors.c: the thread-local last-error message (docs/design.md, "Errors"; docs/reference/acl.md A-8) ----
 * One buffer per thread, shared by the ACL subset and the engine: lldd_last_error()
 * and aclGetRecentErrMsg() read the same text. Set on every failure, never cleared
 * by a success. */
void mock_set_error(const char *fmt, ...) MOCK_PRINTF(1, 2);
/* NULL when this thread has had no failure yet. */
const char *mock_error_or_null(void);
/* mock_set_error, then LLM_PARAM_INVALID: a refused argument answered in one statement. */
lldd_status mock_refuse(const char *fmt, ...) MOCK_PRINTF(1, 2);

/* ---- errors.c: lint (docs/semantics.md §0, include/lldd/mock.h) ----
 * A call that the device accepts with a surprising result calls mock_lint() at the
 * rule's check. In strict mode (LLM_DATADIST_FFI_STRICT=1) it sets the last-error text
 * and returns 1: the caller refuses with the rule's code. Otherwise it appends the
 * message to the calling thread's lint record and returns 0: the call goes on. */
enum { MOCK_LINT_UNKNOWN_OPTION = 1001 };
int mock_lint(uint32_t rule, const char *fmt, ...) MOCK_PRINTF(2, 3);
/* 1 when LLM_DATADIST_FFI_STRICT is a true value: 1, true, yes or on, any case (read at each call). */
int mock_strict(void);

/* ---- errors.c: the per-cluster reasons of the calling thread's last link/unlink call ---- */
void mock_link_reasons_begin(size_t count);
void mock_link_reason_set(size_t index, const char *text);

/* ---- errors.c: the calling thread's running total of bytes moved (lldd_mock_bytes_moved) ----
 * Every transfer and local copy adds what it moved, once the bytes are in place. */
void mock_bytes_moved_add(uint64_t bytes);

/* ---- faults.c: fault injection (lldd_mock_inject_fault) ----
 * Every exported function of the fault table calls this with its own name before
 * anything else (the ACL functions through FAULT_CHECK in acl_mock.c, the engine's
 * directly or through an entry helper such as engine_call_enter); when a fault is
 * armed for that name it returns non-zero and stores the injected code in *code. */
int mock_fault_take(const char *function_name, uint32_t *code);

/* ---- acl_mock.c: the allocation table of the mock ACL ---- */
enum { MOCK_MEM_DEVICE = 0, MOCK_MEM_HOST = 1 };

typedef struct mock_alloc_info {
    uintptr_t base;
    size_t size;       /* the requested size (A-4: no rounding, no padding) */
    int live;          /* 0 for a freed allocation the table still remembers */
    int kind;          /* MOCK_MEM_DEVICE (aclrtMalloc) or MOCK_MEM_HOST (aclrtMallocHost) */
    int32_t device;
} mock_alloc_info;

/* 1 and *out filled if addr lies inside a tracked allocation (live or recently
 * freed), else 0. */
int mock_acl_lookup(uintptr_t addr, mock_alloc_info *out);
/* 1 if 0 <= device < device count. */
int mock_acl_device_valid(int32_t device);
/* Allocation on behalf of an engine (memory pools): tracked and counted against the
 * device's capacity like aclrtMalloc, without needing a current device in the
 * calling thread. Returns an ACL code. */
aclError mock_acl_alloc_device(int32_t device, size_t size, void **out);
aclError mock_acl_free_device(void *ptr);

/* ---- acl_mock.c: the shared arenas (docs/security.md §2.7) ----
 * Chunks are numbered from 0 in the order they were made and live as long as the
 * process; mock_arena_chunks copies the descriptors of the shareable chunks among from,
 * from + 1, ... (at most max), returns how many it copied and sets *next to the number
 * to continue from. The fds stay the arena's. */
typedef struct mock_arena_chunk {
    uintptr_t base;
    size_t size;
    int fd;
} mock_arena_chunk;
size_t mock_arena_chunks(size_t from, mock_arena_chunk *out, size_t max, size_t *next);
/* How many chunks the arena has made so far (a chunk's number never changes). */
size_t mock_arena_chunk_count(void);

/* Grows an array of *cap items of item_size bytes to twice as many (`first` when it has
 * none): the moved array with *cap updated, or NULL with the array and *cap as they were. */
static inline void *mock_grow(void *items, size_t *cap, size_t item_size, size_t first)
{
    size_t grown = *cap ? *cap * 2 : first;
    void *moved = realloc(items, grown * item_size);
    if (moved != NULL)
        *cap = grown;
    return moved;
}

#endif /* LLDD_MOCK_INTERNAL_H */
