/*
 * fuzz_npy.c — libFuzzer target for the .npy reader (src/io/npy.c): any bytes through
 * the loader. A failure must leave a message and never be KILN_ERR_INTERNAL; a loaded
 * tensor must have a valid dtype and shape, readable data, and save and load back to the
 * same bytes. See fuzz/README.md.
 */
#define _GNU_SOURCE
#include "fuzz_tensor.h"
#include "io/npy.h"
#include "kiln.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static kiln_context *ctx;
static char out_path[64] = "/tmp/kiln-fuzz-npy-XXXXXX";

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (kiln_context_create(&ctx) != KILN_OK) abort();
    int fd = mkstemp(out_path);
    if (fd < 0) abort();
    close(fd);
    return 0;
}

/* The one place that reads the bytes: the buffer parser the path loader uses too. */
static kiln_status parse(const uint8_t *data, size_t size, kiln_tensor **out) {
    return kiln_npy_parse_buffer(ctx, data, size, "fuzz input", out);
}

static void broken(const char *what, kiln_status st) {
    fprintf(stderr, "broken contract: %s: %s '%s'\n", what, kiln_status_name(st), kiln_context_message(ctx));
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_tensor *t = NULL;
    kiln_status st = parse(data, size, &t);
    if (!fuzz_check_load(ctx, st, t, 0)) return 0;
    const size_t nb = kiln_tensor_nbytes(t);
    /* save and load back: the same dtype, shape and bytes */
    kiln_tensor *u = NULL;
    st = kiln_tensor_save_npy(ctx, t, out_path);
    if (st) broken("save of a loaded tensor failed", st);
    st = kiln_tensor_load_npy(ctx, out_path, &u);
    if (st) broken("load of a saved tensor failed", st);
    if (kiln_tensor_dtype(u) != kiln_tensor_dtype(t) || kiln_tensor_ndim(u) != kiln_tensor_ndim(t) ||
        kiln_tensor_nbytes(u) != nb || (nb && memcmp(kiln_tensor_data(u), kiln_tensor_data(t), nb)))
        broken("save/load changed the tensor", st);
    for (int d = 0; d < kiln_tensor_ndim(t); d++)
        if (kiln_tensor_dim(u, d) != kiln_tensor_dim(t, d)) broken("save/load changed the shape", st);
    kiln_tensor_free(u);
    kiln_tensor_free(t);
    return 0;
}
