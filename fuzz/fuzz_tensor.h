/*
 * fuzz_tensor.h — the checks every parser harness makes on what a load returned: a
 * failure leaves a message, is never KILN_ERR_INTERNAL and returns no tensor; a loaded
 * tensor has a valid dtype, at least min_ndim dims and readable data (ASan checks each
 * byte). A broken contract traps, which libFuzzer reports as a crash.
 */
#ifndef KILN_FUZZ_TENSOR_H
#define KILN_FUZZ_TENSOR_H

#include "kiln.h"

#include <stdio.h>

/* 1 when t loaded (the caller frees it), 0 when the load failed as it should */
static int fuzz_check_load(kiln_context *ctx, kiln_status st, const kiln_tensor *t, int min_ndim) {
    if (st != KILN_OK) {
        if (st == KILN_ERR_INTERNAL || !kiln_context_message(ctx)[0] || t) {
            fprintf(stderr, "broken contract: %s '%s'\n", kiln_status_name(st), kiln_context_message(ctx));
            __builtin_trap();
        }
        return 0;
    }
    const size_t nb = kiln_tensor_nbytes(t);
    if (!kiln_dtype_size(kiln_tensor_dtype(t)) || kiln_tensor_ndim(t) < min_ndim || (nb && !kiln_tensor_data(t)))
        __builtin_trap();
    volatile unsigned char sum = 0;
    const unsigned char *p = kiln_tensor_data(t);
    for (size_t i = 0; i < nb; i++) sum ^= p[i];
    (void)sum;
    return 1;
}

#endif
