/* Helpers shared by the translation units of the extension ABI (engine_ext*.c). */
#ifndef LLDD_MOCK_EXT_H
#define LLDD_MOCK_EXT_H

#include "engine.h"

/* "PROMPT", "DECODER", "MIX" or "an invalid role". */
const char *ext_role_name(int role);
/* The validity rule of pulls and remove_cache_key (docs/reference/python-api.md §7.5, PR-41):
 * exactly one of req_id and prefix_id is a valid id. */
lldd_status ext_check_cache_key_validity(const char *fn, const char *name, const lldd_key *k);
/* v1 reports transfer timeouts as WAIT_PROC_TIMEOUT (docs/reference/semantics.md §13). */
lldd_status ext_gen_status(const engine *e, lldd_status st);

#endif /* LLDD_MOCK_EXT_H */
