/* arg_common.h — the shape rule and CPU kernel ArgMax and ArgMin share (arg_common.c):
 * largest true for ArgMax, false for ArgMin. */
#ifndef KILN_ARG_COMMON_H
#define KILN_ARG_COMMON_H

#include "../core/internal.h"

kiln_status kiln_arg_infer(kiln_op_ctx *c, bool largest);
kiln_status kiln_arg_forward(kiln_op_ctx *c, bool largest);

#endif
