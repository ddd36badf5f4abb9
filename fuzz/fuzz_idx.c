/*
 * fuzz_idx.c — libFuzzer target for the IDX reader (src/data/idx.c, MNIST's format, plain
 * or gzipped): any bytes through kiln_idx_load. A failure must leave a message and never
 * be KILN_ERR_INTERNAL; a loaded tensor must have a valid dtype and shape and readable
 * data. See fuzz/README.md.
 */
#define _GNU_SOURCE
#include "data/data.h"
#include "fuzz_file.h"
#include "fuzz_tensor.h"
#include "kiln.h"


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
    const kiln_status st = kiln_idx_load(ctx, fuzz_file(data, size), &t);
    if (fuzz_check_load(ctx, st, t, 1)) kiln_tensor_free(t);
    return 0;
}
