/*
 * xxh.h - XXH3-64 (the frame checksum) at the CPU's best speed: where
 * libxxhash has its x86 dispatch functions (configure's HAVE_XXH_DISPATCH),
 * the XXH3 calls go to them, which pick AVX2 or AVX-512 at run time: about
 * 3x the speed of the SSE2 code that the plain symbols run.  Include this
 * instead of <xxhash.h>.
 */
#ifndef CKPT_XXH_H
#define CKPT_XXH_H

#include "config.h"   /* HAVE_XXH_DISPATCH */
#include <xxhash.h>
#ifdef HAVE_XXH_DISPATCH
#include <xxh_x86dispatch.h>   /* redefines XXH3_64bits and friends */
#endif

#endif
