/*
 * fuzz_safetensors.c — libFuzzer target for the safetensors reader (src/io/safetensors.c,
 * kiln's checkpoint format): any bytes through kiln_safetensors_load, then every lookup
 * (names, tensors, find, copy_to, metadata). A failure must leave a message and never be
 * KILN_ERR_INTERNAL; a loaded file's tensors must have valid dtypes and shapes and
 * readable data, each found by its name. See fuzz/README.md.
 */
#define _GNU_SOURCE
#include "fuzz_file.h"
#include "io/safetensors.h"
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

static void broken(const char *what, kiln_status st) {
    fprintf(stderr, "broken contract: %s: %s '%s'\n", what, kiln_status_name(st), kiln_context_message(ctx));
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_safetensors *st = NULL;
    kiln_status s = kiln_safetensors_load(ctx, fuzz_file(data, size), &st);
    if (s != KILN_OK) {
        if (s == KILN_ERR_INTERNAL || !kiln_context_message(ctx)[0] || st) broken("load failed", s);
        return 0;
    }
    const int n = kiln_safetensors_count(st);
    if (n < 0 || kiln_safetensors_name(st, n) || kiln_safetensors_tensor(st, n) || kiln_safetensors_name(st, -1))
        broken("count / range", KILN_OK);
    for (int i = 0; i < n; i++) {
        const char *name = kiln_safetensors_name(st, i);
        const kiln_tensor *t = kiln_safetensors_tensor(st, i);
        if (!name || !t) broken("a tensor without a name", KILN_OK);
        if (kiln_safetensors_find(st, name) != t) broken("find does not give the tensor", KILN_OK);
        size_t nb = kiln_tensor_nbytes(t);
        if (!kiln_dtype_size(kiln_tensor_dtype(t)) || kiln_tensor_ndim(t) < 0 || (nb && !kiln_tensor_data(t)))
            broken("bad tensor", KILN_OK);
        /* copy_to into a tensor of the same dtype and shape: the checkpoint restore path */
        int64_t dims[KILN_MAX_DIMS];
        for (int d = 0; d < kiln_tensor_ndim(t); d++) dims[d] = kiln_tensor_dim(t, d);
        kiln_tensor *dst = NULL;
        if (kiln_tensor_create(ctx, kiln_tensor_dtype(t), kiln_tensor_ndim(t), dims, &dst) != KILN_OK) abort();
        s = kiln_safetensors_copy_to(st, name, dst);
        if (s) broken("copy_to of a loaded tensor failed", s);
        if (nb && memcmp(kiln_tensor_data(dst), kiln_tensor_data(t), nb)) broken("copy_to changed bytes", KILN_OK);
        kiln_tensor_free(dst);
    }
    if (kiln_safetensors_find(st, "__metadata__")) broken("__metadata__ is a tensor", KILN_OK);
    const int nm = kiln_safetensors_meta_count(st);
    for (int i = 0; i < nm; i++) {
        const char *k = kiln_safetensors_meta_key(st, i);
        if (!k || !kiln_safetensors_meta(st, k)) broken("metadata key without value", KILN_OK);
    }
    kiln_safetensors_free(st);
    return 0;
}
