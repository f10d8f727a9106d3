/* The GE header that llm_datadist/llm_datadist.h includes
 * (docs/reference/cpp-api.md §1, §2). It brings in ge::Status, ge::AscendString and
 * ge::DataType; the metadef headers are found relative to include/external/, as
 * with the toolkit's own headers. Nothing else of the real header is reproduced:
 * the shim uses no GE name beyond these three (docs/reference/cpp-api.md §7). */
#ifndef LLDD_SDK_GE_COMMON_API_ERROR_CODES_H
#define LLDD_SDK_GE_COMMON_API_ERROR_CODES_H

#include <cstdint>

#include "graph/ascend_string.h"
#include "graph/types.h"

namespace ge {
using Status = uint32_t;
}  // namespace ge

#endif  // LLDD_SDK_GE_COMMON_API_ERROR_CODES_H
