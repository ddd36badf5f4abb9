/* cast.h — the element conversion of Cast, shared with CastLike. */
#ifndef KILN_OPS_CAST_H
#define KILN_OPS_CAST_H

#include "../core/internal.h"

/* y = x converted to y's dtype (same shape), with Cast's rules (cast.c's opening
 * comment): floats round to nearest even, floats to integers truncate and saturate,
 * integers to integers wrap. */
void kiln_cast_convert(const kiln_tensor *x, kiln_tensor *y);

#endif
