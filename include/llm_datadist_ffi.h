/* Umbrella header of the llm_datadist_ffi C ABI.
 *
 * The declarations live in directive-free fragments under include/lldd/ so that
 * cffi's cdef reads exactly the text the C and C++ compilers read (docs/design.md).
 * This file only adds what cffi cannot parse: guards, standard headers and
 * extern "C".
 */
#ifndef LLM_DATADIST_FFI_H
#define LLM_DATADIST_FFI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "lldd/status.h"
#include "lldd/types.h"
#include "lldd/api.h"
#include "lldd/ext.h"

#ifdef __cplusplus
}
#endif

#endif /* LLM_DATADIST_FFI_H */
