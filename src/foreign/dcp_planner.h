/*
 * dcp_planner.h - the planner data of a PyTorch DCP .metadata (2.x's
 * flattening mapping: flattened name -> the nested keys it came from) as
 * the JSON that ckptfs keeps under the metadata key "dcp.planner_data",
 * so that readers (the Python StorageReader) and `ckpt import` keep it.
 */
#ifndef CKPT_FOREIGN_DCP_PLANNER_H
#define CKPT_FOREIGN_DCP_PLANNER_H

#include "ckptfs.h"
#include "foreign/pickle.h"

#define CKPT_DCP_PLANNER_DATA_KEY "dcp.planner_data"

/* *out (malloc'd, the caller frees) is `pd` as JSON,
 * {"name": ["key", 0, ...], ...}, when pd is a dict of string keys whose
 * values are tuples or lists of strings and integers (what DCP's default
 * planner writes); NULL when pd is absent, None or of any other shape (a
 * custom planner's data, which ckptfs does not interpret).  Returns 0, or
 * -ENOMEM. */
int ckpt_dcp_planner_json(const pk_val *pd, char **out, ckpt_error *err);

#endif
