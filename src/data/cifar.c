/* cifar.c — CIFAR-10's binary format (kiln_tools.h, "CIFAR-10 and image transforms"):
 * data_batch_1..5.bin and test_batch.bin, records of a label byte and the 32x32 R, G, B
 * planes (3073 bytes), read into u8 (N, 3, 32, 32) images (the planes are already NCHW)
 * and i64 labels. */
#include "data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REC 3073
#define PIX 3072

static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* DIR itself or DIR/cifar-10-batches-bin: where data_batch_1.bin is (false: neither). */
static bool base_dir(const char *dir, char *buf, size_t n) {
    char p[4096];
    snprintf(p, sizeof p, "%s/data_batch_1.bin", dir);
    if (is_file(p)) {
        snprintf(buf, n, "%s", dir);
        return true;
    }
    snprintf(p, sizeof p, "%s/cifar-10-batches-bin/data_batch_1.bin", dir);
    if (is_file(p)) {
        snprintf(buf, n, "%s/cifar-10-batches-bin", dir);
        return true;
    }
    return false;
}

bool kiln_cifar10_detect(const char *dir) {
    char b[4096];
    return dir && base_dir(dir, b, sizeof b);
}

/* The files' records appended to images / labels (grown with realloc). */
static kiln_status read_batches(kiln_context *ctx, const char *const *paths, int n_paths, kiln_tensor **images,
                                kiln_tensor **labels) {
    int64_t total = 0;
    for (int i = 0; i < n_paths; i++) {
        struct stat sb;
        if (stat(paths[i], &sb) != 0) return kiln_fail(ctx, KILN_ERR_IO, "%s: cannot be read", paths[i]);
        if (sb.st_size == 0 || sb.st_size % REC)
            return kiln_fail(ctx, KILN_ERR_PARSE, "%s: %lld bytes, not a whole number of %d-byte CIFAR-10 records",
                             paths[i], (long long)sb.st_size, REC);
        total += (int64_t)(sb.st_size / REC);
    }
    kiln_tensor *x = kiln_tensor_new(ctx, KILN_U8, 4, (int64_t[]){total, 3, 32, 32});
    kiln_tensor *y = x ? kiln_tensor_new(ctx, KILN_I64, 1, &total) : NULL;
    unsigned char *rec = malloc(REC);
    kiln_status st = x && y && rec ? KILN_OK : kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory reading CIFAR-10");
    int64_t k = 0;
    for (int i = 0; i < n_paths && !st; i++) {
        FILE *f = fopen(paths[i], "rb");
        if (!f) {
            st = kiln_fail(ctx, KILN_ERR_IO, "%s: cannot be opened", paths[i]);
            break;
        }
        for (int64_t r = 0; !st && fread(rec, 1, REC, f) == REC; r++, k++) {
            if (k >= total) {
                st = kiln_fail(ctx, KILN_ERR_IO, "%s: the file grew while being read", paths[i]);
                break;
            }
            if (rec[0] >= 10) {
                st = kiln_fail(ctx, KILN_ERR_PARSE, "%s: record %lld has label %d (CIFAR-10 labels are 0..9)", paths[i],
                               (long long)r, rec[0]);
                break;
            }
            ((int64_t *)y->data)[k] = rec[0];
            memcpy((unsigned char *)x->data + (size_t)k * PIX, rec + 1, PIX);
        }
        if (!st && ferror(f)) st = kiln_fail(ctx, KILN_ERR_IO, "%s: read error", paths[i]);
        fclose(f);
    }
    if (!st && k != total) st = kiln_fail(ctx, KILN_ERR_IO, "CIFAR-10: %lld records read of %lld", (long long)k, (long long)total);
    free(rec);
    if (st) {
        kiln_tensor_free(x);
        kiln_tensor_free(y);
        return st;
    }
    *images = x;
    *labels = y;
    return KILN_OK;
}

kiln_status kiln_cifar10_load(kiln_context *ctx, const char *dir, kiln_mnist *out) {
    if (!ctx || !dir || !out) return KILN_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    char base[4096];
    if (!base_dir(dir, base, sizeof base))
        return kiln_fail(ctx, KILN_ERR_IO, "%s: no CIFAR-10 data_batch_1.bin (nor cifar-10-batches-bin/)", dir);
    char train[5][4200], test[4200];
    const char *tp[5];
    int n = 0;
    for (int i = 1; i <= 5; i++) {
        snprintf(train[n], sizeof train[n], "%s/data_batch_%d.bin", base, i);
        if (!is_file(train[n])) break;
        tp[n] = train[n];
        n++;
    }
    snprintf(test, sizeof test, "%s/test_batch.bin", base);
    if (!is_file(test)) return kiln_fail(ctx, KILN_ERR_IO, "%s: missing (CIFAR-10's test split)", test);
    const char *te = test;
    kiln_mnist d = {0};
    kiln_status st = read_batches(ctx, tp, n, &d.train_images, &d.train_labels);
    if (!st) st = read_batches(ctx, &te, 1, &d.test_images, &d.test_labels);
    if (st) {
        kiln_mnist_free(&d);
        return st;
    }
    *out = d;
    return KILN_OK;
}
