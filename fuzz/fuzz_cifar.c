/*
 * fuzz_cifar.c — libFuzzer target for the CIFAR-10 binary reader (src/data/cifar.c): the
 * bytes as both data_batch_1.bin and test_batch.bin of a folder (symbolic links to the
 * in-memory file of fuzz_file.h), through kiln_cifar10_detect and kiln_cifar10_load. A
 * failure must leave a message, never be KILN_ERR_INTERNAL and leave the struct zeroed;
 * a load must give u8 (N, 3, 32, 32) images and i64 labels below 10, N the records of
 * each file. See fuzz/README.md.
 */
#define _GNU_SOURCE
#include "data/data.h"
#include "fuzz_file.h"
#include "kiln.h"
#include "kiln_tools.h"

#include <string.h>

static kiln_context *ctx;
static char dir[64];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void broken(const char *what, kiln_status st) {
    fprintf(stderr, "broken contract: %s: %s '%s'\n", what, kiln_status_name(st), kiln_context_message(ctx));
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (kiln_context_create(&ctx) != KILN_OK) abort();
    snprintf(dir, sizeof dir, "/tmp/kiln-fuzz-cifar-XXXXXX");
    if (!mkdtemp(dir)) abort();
    const char *file = fuzz_file((const uint8_t *)"", 0);
    char link[128];
    snprintf(link, sizeof link, "%s/data_batch_1.bin", dir);
    if (symlink(file, link) != 0) abort();
    snprintf(link, sizeof link, "%s/test_batch.bin", dir);
    if (symlink(file, link) != 0) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_file(data, size);
    if (!kiln_cifar10_detect(dir)) broken("the folder is not detected", KILN_OK);
    kiln_mnist d;
    memset(&d, 0x5A, sizeof d);
    const kiln_status st = kiln_cifar10_load(ctx, dir, &d);
    if (st) {
        if (st == KILN_ERR_INTERNAL || !kiln_context_message(ctx)[0]) broken("load failed", st);
        if (d.train_images || d.train_labels || d.test_images || d.test_labels) broken("a failed load left tensors", st);
        return 0;
    }
    const int64_t n = (int64_t)(size / 3073);
    const kiln_tensor *im[2] = {d.train_images, d.test_images}, *lab[2] = {d.train_labels, d.test_labels};
    for (int k = 0; k < 2; k++) {
        if (kiln_tensor_dtype(im[k]) != KILN_U8 || kiln_tensor_ndim(im[k]) != 4 || kiln_tensor_dim(im[k], 0) != n ||
            kiln_tensor_dim(im[k], 1) != 3 || kiln_tensor_dim(im[k], 2) != 32 || kiln_tensor_dim(im[k], 3) != 32 ||
            kiln_tensor_dtype(lab[k]) != KILN_I64 || kiln_tensor_ndim(lab[k]) != 1 || kiln_tensor_dim(lab[k], 0) != n ||
            size % 3073)
            broken("loaded tensors' shapes", st);
        const int64_t *y = kiln_tensor_data(lab[k]);
        const uint8_t *x = kiln_tensor_data(im[k]);
        for (int64_t i = 0; i < n; i++) {
            if (y[i] < 0 || y[i] >= 10 || y[i] != data[i * 3073]) broken("a label", st);
            if (memcmp(x + i * 3072, data + i * 3073 + 1, 3072)) broken("an image's pixels", st);
        }
    }
    kiln_mnist_free(&d);
    return 0;
}
