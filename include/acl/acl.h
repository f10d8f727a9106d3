/* The ACL runtime subset under the vendor's include path, for C and C++ programs built
 * against the SDK (docs/cpp.md): `#include "acl/acl.h"` as the vendor's samples write
 * it. It declares what include/acl_subset.h declares (the fragments acl/types.h and
 * acl/api.h, with the vendor's names and values) and nothing of the vendor's headers
 * beyond that; the SDK's libacl_rt.so and libascendcl.so define these functions over
 * the mock. Never include it together with the vendor's own ACL headers. */
#ifndef LLM_DATADIST_FFI_ACL_ACL_H
#define LLM_DATADIST_FFI_ACL_ACL_H

#include "acl_subset.h"

#endif /* LLM_DATADIST_FFI_ACL_ACL_H */
