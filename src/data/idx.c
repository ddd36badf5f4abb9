/*
 * idx.c — IDX files (the MNIST family's format) read through zlib, and the MNIST /
 * Fashion-MNIST directory loader.
 *
 * Contract: kiln_idx_load returns a tensor with the file's element type and dims, or a
 * status whose message names the file and the problem (bad magic, truncated header or
 * data, trailing bytes, damaged gzip stream, dims too large). Because a gzip stream does
 * not say how long it inflates to, the data buffer grows while it is read, so a header
 * that lies about its dims costs at most twice the bytes really present.
 */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* The IDX element types kiln reads, by type byte. */
static kiln_dtype idx_dtype(int code) {
    switch (code) {
    case 0x08: return KILN_U8;
    case 0x09: return KILN_I8;
    case 0x0B: return KILN_I16;
    case 0x0C: return KILN_I32;
    case 0x0D: return KILN_F32;
    case 0x0E: return KILN_F64;
    default: return KILN_DTYPE_UNDEFINED;
    }
}

/* zlib's message without the "path: " it starts with. */
static const char *zlib_msg(const char *m, const char *path) {
    size_t k = strlen(path);
    if (!m) return "unknown error";
    return strncmp(m, path, k) == 0 && m[k] == ':' && m[k + 1] == ' ' ? m + k + 2 : m;
}

/* A short read: damaged gzip data when zlib says so, otherwise a truncated file. */
static kiln_status short_read(kiln_context *ctx, gzFile f, const char *path, const char *what,
                              size_t want, size_t got) {
    int err = Z_OK;
    const char *zmsg = gzerror(f, &err);
    if (err == Z_ERRNO)
        return kiln_fail(ctx, KILN_ERR_IO, "'%s': read error in %s: %s", path, what, strerror(errno));
    if (err == Z_BUF_ERROR)
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': truncated gzip stream in %s (expected %zu bytes, got %zu)",
                         path, what, want, got);
    if (err != Z_OK && err != Z_STREAM_END)
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': damaged gzip stream (zlib: %s)", path, zlib_msg(zmsg, path));
    return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': truncated %s: expected %zu bytes, got %zu", path,
                     what, want, got);
}

static bool gz_failed(gzFile f) {
    int err = Z_OK;
    gzerror(f, &err);
    return err != Z_OK && err != Z_STREAM_END;
}

/* Read exactly n bytes (n may exceed gzread's int range), reporting how many arrived. */
static size_t read_full(gzFile f, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        size_t chunk = n - got;
        if (chunk > (1u << 30)) chunk = 1u << 30;
        int r = gzread(f, (char *)buf + got, (unsigned)chunk);
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* IDX stores multi-byte elements big-endian; kiln tensors are in host (little-endian) order. */
static void swap_to_host(void *data, size_t n, size_t esize) {
    const uint16_t one = 1;
    if (esize == 1 || *(const unsigned char *)&one == 0) return;
    unsigned char *p = data;
    for (size_t i = 0; i < n; i++, p += esize)
        for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

kiln_status kiln_idx_load(kiln_context *ctx, const char *path, kiln_tensor **out) {
    if (!ctx || !path || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return kiln_fail(ctx, KILN_ERR_IO, "cannot open '%s': %s", path,
                         errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1u << 17);
    kiln_status st = KILN_OK;
    unsigned char *data = NULL;
    kiln_tensor *t = NULL;

    unsigned char head[4 + 4 * KILN_MAX_DIMS];
    size_t got = read_full(f, head, 4);
    if (got != 4) {
        st = short_read(ctx, f, path, "IDX magic", 4, got);
        goto out;
    }
    uint32_t magic = be32(head);
    int code = head[2], nd = head[3];
    kiln_dtype dt = idx_dtype(code);
    if (head[0] != 0 || head[1] != 0 || dt == KILN_DTYPE_UNDEFINED || nd == 0) {
        st = kiln_fail(ctx, KILN_ERR_PARSE,
                       "'%s': bad IDX magic 0x%08x (expected 0x0000TTNN with element type TT in "
                       "08,09,0B,0C,0D,0E and NN >= 1 dims, e.g. 0x00000801 labels, 0x00000803 "
                       "images)", path, (unsigned)magic);
        goto out;
    }
    if (nd > KILN_MAX_DIMS) {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': IDX header declares %d dims (kiln reads at most %d)",
                       path, nd, KILN_MAX_DIMS);
        goto out;
    }
    got = read_full(f, head + 4, 4 * (size_t)nd);
    if (got != 4 * (size_t)nd) {
        st = short_read(ctx, f, path, "IDX dims", 4 * (size_t)nd, got);
        goto out;
    }
    int64_t dims[KILN_MAX_DIMS];
    size_t esize = kiln_dtype_size(dt);
    int64_t numel = 1;
    const int64_t limit = ((int64_t)1 << 50) / (int64_t)esize;
    for (int i = 0; i < nd; i++) {
        dims[i] = be32(head + 4 + 4 * i);
        if (dims[i] && numel > limit / dims[i]) {
            char ds[160];
            int k = 0;
            for (int j = 0; j < nd && k < (int)sizeof ds - 12; j++)
                k += snprintf(ds + k, sizeof ds - (size_t)k, j ? "x%u" : "%u", (unsigned)be32(head + 4 + 4 * j));
            st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': IDX dims %s overflow (more than 2^50 bytes)", path, ds);
            goto out;
        }
        numel *= dims[i];
    }
    size_t total = (size_t)numel * esize, cap = total < (1u << 24) ? total : (1u << 24), have = 0;
    data = kiln_malloc(ctx, cap, "IDX data");
    if (!data) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    while (have < total) {
        if (have == cap) {
            size_t ncap = cap * 2 < total ? cap * 2 : total;
            unsigned char *nd2 = realloc(data, ncap);
            if (!nd2) {
                st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "'%s': out of memory growing IDX data to %zu bytes",
                               path, ncap);
                goto out;
            }
            data = nd2;
            cap = ncap;
        }
        size_t r = read_full(f, data + have, cap - have);
        have += r;
        if (have < cap) break;
    }
    if (have != total) {
        st = short_read(ctx, f, path, "IDX data", total, have);
        goto out;
    }
    /* Reading past the end makes zlib check the gzip trailer (CRC and length) and catches a
     * file longer than its header says: both mean it is not the file we think. */
    unsigned char extra;
    int r = gzread(f, &extra, 1);
    if (r > 0) {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': trailing bytes after the %zu bytes of data the IDX "
                       "header declares", path, total);
        goto out;
    }
    if (r < 0 || gz_failed(f)) {
        int err = Z_OK;
        const char *zmsg = gzerror(f, &err);
        if (err == Z_ERRNO)
            st = kiln_fail(ctx, KILN_ERR_IO, "'%s': read error: %s", path, strerror(errno));
        else
            st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': damaged gzip stream at the end of the IDX data "
                           "(zlib: %s)", path, zlib_msg(zmsg, path));
        goto out;
    }
    swap_to_host(data, (size_t)numel, esize);
    t = kiln_calloc(ctx, 1, sizeof *t, "a tensor");
    if (!t) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    kiln_tensor_set_shape(t, dt, nd, dims);
    t->data = data;
    t->owns_data = true;
    t->ctx = ctx;
    data = NULL;
    *out = t;
out:
    free(data);
    gzclose(f);
    return st;
}

/* ------------------------------------------------------------------ MNIST */

void kiln_u8_normalize_lut(float mean, float std, float lut[256]) {
    for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - mean) / std;
}

/* DIR/NAME.gz, or DIR/NAME when only the plain file exists. */
static void data_path(char *buf, size_t n, const char *dir, const char *name) {
    snprintf(buf, n, "%s/%s.gz", dir, name);
    FILE *f = fopen(buf, "rb");
    if (f) {
        fclose(f);
        return;
    }
    snprintf(buf, n, "%s/%s", dir, name);
    f = fopen(buf, "rb");
    if (f)
        fclose(f);
    else
        snprintf(buf, n, "%s/%s.gz", dir, name); /* name the expected file in the error */
}

/* One split: images (N,H,W) u8 -> (N,1,H,W) f32 or u8; labels (N) u8 -> i64. */
static kiln_status load_split(kiln_context *ctx, const char *dir, const char *split, kiln_dtype image_dtype,
                              float mean, float std, kiln_tensor **images, kiln_tensor **labels) {
    char ip[4096], lp[4096], name[64];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", split);
    data_path(ip, sizeof ip, dir, name);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", split);
    data_path(lp, sizeof lp, dir, name);
    kiln_tensor *im = NULL, *lb = NULL, *x = NULL, *y = NULL;
    kiln_status st = kiln_idx_load(ctx, ip, &im);
    if (st) goto out;
    if (im->dtype != KILN_U8 || im->ndim != 3) {
        char s[64];
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': expected u8 images (N,H,W), got %s", ip,
                       kiln_shape_str(im, s, sizeof s));
        goto out;
    }
    st = kiln_idx_load(ctx, lp, &lb);
    if (st) goto out;
    if (lb->dtype != KILN_U8 || lb->ndim != 1) {
        char s[64];
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': expected u8 labels (N), got %s", lp, kiln_shape_str(lb, s, sizeof s));
        goto out;
    }
    int64_t n = im->dims[0];
    if (lb->dims[0] != n) {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s' has %lld images but '%s' has %lld labels", ip, (long long)n, lp,
                       (long long)lb->dims[0]);
        goto out;
    }
    const uint8_t *lv = lb->data;
    for (int64_t i = 0; i < n; i++)
        if (lv[i] >= 10) {
            st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': label %lld is %d (expected 0..9)", lp, (long long)i, lv[i]);
            goto out;
        }
    int64_t dims[4] = {n, 1, im->dims[1], im->dims[2]};
    if (image_dtype == KILN_U8) {
        kiln_tensor_set_shape(im, KILN_U8, 4, dims); /* same bytes, with the channel dim */
        x = im;
        im = NULL;
    } else {
        x = kiln_tensor_new(ctx, KILN_F32, 4, dims);
        if (!x) {
            st = KILN_ERR_OUT_OF_MEMORY;
            goto out;
        }
        float lut[256];
        kiln_u8_normalize_lut(mean, std, lut);
        const uint8_t *src = im->data;
        float *dst = x->data;
        int64_t total = kiln_tensor_numel(x);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < total; i++) dst[i] = lut[src[i]];
    }
    y = kiln_tensor_new(ctx, KILN_I64, 1, &n);
    if (!y) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    int64_t *yv = y->data;
    for (int64_t i = 0; i < n; i++) yv[i] = lv[i];
    *images = x;
    *labels = y;
    x = y = NULL;
out:
    kiln_tensor_free(im);
    kiln_tensor_free(lb);
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    return st;
}

kiln_status kiln_mnist_load(kiln_context *ctx, const char *dir, kiln_dtype image_dtype, float mean, float std,
                            kiln_mnist *out) {
    if (!ctx || !dir || !out) return KILN_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    if (image_dtype != KILN_F32 && image_dtype != KILN_U8)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_mnist_load: image dtype must be f32 or u8, not %s",
                         kiln_dtype_name(image_dtype));
    if (image_dtype == KILN_F32 && !(std > 0.0f))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_mnist_load: std must be > 0, got %g", (double)std);
    kiln_mnist d = {0};
    kiln_status st = load_split(ctx, dir, "train", image_dtype, mean, std, &d.train_images, &d.train_labels);
    if (!st) st = load_split(ctx, dir, "t10k", image_dtype, mean, std, &d.test_images, &d.test_labels);
    if (st) {
        kiln_mnist_free(&d);
        return st;
    }
    *out = d;
    return KILN_OK;
}

void kiln_mnist_free(kiln_mnist *d) {
    if (!d) return;
    kiln_tensor_free(d->train_images);
    kiln_tensor_free(d->train_labels);
    kiln_tensor_free(d->test_images);
    kiln_tensor_free(d->test_labels);
    memset(d, 0, sizeof *d);
}
