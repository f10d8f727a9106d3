/* Umbrella header of the ACL runtime subset (include/acl/). Used by the mock;
 * the ascend shim never includes it (docs/reference/acl.md §5.1: it would clash with the
 * vendor's own ACL headers). */
#ifndef LLM_DATADIST_FFI_ACL_SUBSET_H
#define LLM_DATADIST_FFI_ACL_SUBSET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "acl/types.h"
#include "acl/api.h"

#ifdef __cplusplus
}
#endif

#endif /* LLM_DATADIST_FFI_ACL_SUBSET_H */
