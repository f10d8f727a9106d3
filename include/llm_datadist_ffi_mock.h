/* Umbrella header of the mock backend's control interface (include/lldd/mock.h).
 * Only the mock library exports these functions. */
#ifndef LLM_DATADIST_FFI_MOCK_H
#define LLM_DATADIST_FFI_MOCK_H

#include "llm_datadist_ffi.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "lldd/mock.h"

#ifdef __cplusplus
}
#endif

#endif /* LLM_DATADIST_FFI_MOCK_H */
