/*
 * fuzz_onnx_pb.c — libFuzzer target for the ONNX TensorProto reader (the .pb files of
 * ONNX's test data; kiln_tensor_load_onnx_pb): any bytes through it. A failure must leave
 * a message and never be KILN_ERR_INTERNAL; a loaded tensor must have a valid dtype and
 * shape and readable data. See fuzz/README.md.
 */
#define _GNU_SOURCE
#include "fuzz_file.h"
#include "kiln.h"

#include <string.h>

static kiln_context *ctx;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (kiln_context_create(&ctx) != KILN_OK) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_load_onnx_pb(ctx, fuzz_file(data, size), &t);
    if (st != KILN_OK) {
        if (st == KILN_ERR_INTERNAL || !kiln_context_message(ctx)[0] || t) {
            fprintf(stderr, "broken contract: %s '%s'\n", kiln_status_name(st), kiln_context_message(ctx));
            __builtin_trap();
        }
        return 0;
    }
    size_t nb = kiln_tensor_nbytes(t);
    if (!kiln_dtype_size(kiln_tensor_dtype(t)) || kiln_tensor_ndim(t) < 0 || (nb && !kiln_tensor_data(t)))
        __builtin_trap();
    volatile unsigned char sum = 0;
    const unsigned char *p = kiln_tensor_data(t);
    for (size_t i = 0; i < nb; i++) sum ^= p[i]; /* ASan: every byte readable */
    (void)sum;
    kiln_tensor_free(t);
    return 0;
}
