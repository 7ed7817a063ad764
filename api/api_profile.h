/* A memra-tune profile applied at runtime create (MEMRA_PP_PROFILE / memra_runtime_params.profile). */
#ifndef API_PROFILE_H
#define API_PROFILE_H

#include "device/err.h"
#include "memra/memra.h"

/* When a profile is set (the MEMRA_PP_PROFILE door with apply_env, else p->profile; NULL = none), read it (JSON,
 * parsed by cJSON), check it was made for this model (file size, arch, n_layer, n_embd, n_vocab; a synthetic shape's
 * name, weight type, n_head, n_head_kv and n_ff, and a file's profile never fits a synthetic shape nor the
 * reverse), this stage count and this device set (the ones p or its doors ask for, when they ask) and this backend,
 * and write its setting into *p: stages, cuts, devices, slots, overlap, graph (absent = 0), micro_batches,
 * max_rows. Returns 0 (also when no profile
 * is set), or MEMRA_E_INVAL / MEMRA_E_IO / MEMRA_E_UNSUPPORTED (a build without cJSON) with err naming the file,
 * the key and what differs; *p is unchanged on failure. Reads the environment: the creating thread only. */
int api_profile_apply(const memra_model *model, memra_runtime_params *p, dev_err *err);

#endif
