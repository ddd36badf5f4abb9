/* npy.c — NumPy .npy read and write (format versions 1.0, 2.0, 3.0; C order; little-endian
 * numeric and bool dtypes). Every header field is checked: a malformed file is an error. */
#include "../core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct { const char *descr; kiln_dtype dt; } npy_types[] = {
    {"<f4", KILN_F32}, {"<f8", KILN_F64}, {"<f2", KILN_F16}, {"|u1", KILN_U8}, {"|i1", KILN_I8},
    {"<u2", KILN_U16}, {"<i2", KILN_I16}, {"<i4", KILN_I32}, {"<u4", KILN_U32}, {"<i8", KILN_I64},
    {"<u8", KILN_U64}, {"|b1", KILN_BOOL}, {"<u1", KILN_U8}, {"<i1", KILN_I8}, {"<b1", KILN_BOOL},
};

/* Find 'key': in the header dict and return a pointer just past the colon. */
static const char *dict_value(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

kiln_status kiln_tensor_load_npy(kiln_context *ctx, const char *path, kiln_tensor **out) {
    if (!ctx || !path || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_fail(ctx, KILN_ERR_IO, "cannot open '%s'", path);
    kiln_status st = KILN_OK;
    char *hdr = NULL;
    kiln_tensor *t = NULL;
    unsigned char pre[12];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s' is not a .npy file (bad magic)", path);
        goto out;
    }
    size_t hlen;
    if (pre[6] == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': truncated header", path);
            goto out;
        }
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': unsupported .npy version %d", path, pre[6]);
        goto out;
    }
    if (hlen > (1u << 20)) {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': header of %zu bytes is too long", path, hlen);
        goto out;
    }
    hdr = kiln_malloc(ctx, hlen + 1, "npy header");
    if (!hdr) { st = KILN_ERR_OUT_OF_MEMORY; goto out; }
    if (fread(hdr, 1, hlen, f) != hlen) {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': truncated header", path);
        goto out;
    }
    hdr[hlen] = 0;
    const char *d = dict_value(hdr, "descr"), *fo = dict_value(hdr, "fortran_order"),
               *sh = dict_value(hdr, "shape");
    if (!d || !fo || !sh) {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': header lacks descr, fortran_order or shape", path);
        goto out;
    }
    if (strncmp(fo, "False", 5) != 0) {
        st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "'%s': Fortran-order arrays are not supported", path);
        goto out;
    }
    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++) {
        size_t L = strlen(npy_types[i].descr);
        if (d[0] == '\'' && strncmp(d + 1, npy_types[i].descr, L) == 0 && d[1 + L] == '\'') {
            dt = npy_types[i].dt;
            break;
        }
    }
    if (dt == KILN_DTYPE_UNDEFINED) {
        char got[16] = {0};
        for (int i = 0; i < 15 && d[i] && d[i] != ','; i++) got[i] = d[i];
        st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "'%s': dtype %s is not supported", path, got);
        goto out;
    }
    if (*sh != '(') {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': malformed shape", path);
        goto out;
    }
    int64_t dims[KILN_MAX_DIMS];
    int nd = 0;
    const char *p = sh + 1;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0) {
            st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': malformed shape", path);
            goto out;
        }
        if (nd == KILN_MAX_DIMS) {
            st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "'%s': more than %d dims", path, KILN_MAX_DIMS);
            goto out;
        }
        dims[nd++] = v;
        p = end;
        while (*p == 'L') p++;
    }
    st = kiln_tensor_create(ctx, dt, nd, dims, &t);
    if (st) {
        kiln_msg_prefix(ctx, "'%s': ", path);
        goto out;
    }
    size_t nb = kiln_tensor_nbytes(t);
    if (fread(t->data, 1, nb, f) != nb) {
        st = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': data is truncated (expected %zu bytes)", path, nb);
        goto out;
    }
    *out = t;
    t = NULL;
out:
    kiln_tensor_free(t);
    free(hdr);
    fclose(f);
    return st;
}

kiln_status kiln_tensor_save_npy(kiln_context *ctx, const kiln_tensor *t, const char *path) {
    if (!ctx || !t || !path) return KILN_ERR_INVALID_ARGUMENT;
    const char *descr = NULL;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (npy_types[i].dt == t->dtype) {
            descr = npy_types[i].descr;
            break;
        }
    if (!descr)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "cannot write dtype %s to .npy", kiln_dtype_name(t->dtype));
    char shape[256] = "";
    int sk = 0;
    for (int i = 0; i < t->ndim; i++)
        sk += snprintf(shape + sk, sizeof shape - (size_t)sk, i ? ", %lld" : "%lld", (long long)t->dims[i]);
    if (t->ndim == 1) snprintf(shape + sk, sizeof shape - (size_t)sk, ","); /* a 1-tuple keeps its comma */
    char hdr[512];
    int k = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shape);
    /* Pad with spaces so data starts at a multiple of 64, ending the header with '\n'. */
    int total = 10 + k + 1;
    int pad = (64 - total % 64) % 64;
    char pre[10] = {(char)0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
    int hlen = k + pad + 1;
    pre[8] = (char)(hlen & 0xff);
    pre[9] = (char)(hlen >> 8);
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return kiln_fail(ctx, KILN_ERR_IO, "cannot write '%s'", path);
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)k, f) == (size_t)k;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    size_t nb = kiln_tensor_nbytes(t);
    ok = ok && (nb == 0 || fwrite(t->data, 1, nb, f) == nb);
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return kiln_fail(ctx, KILN_ERR_IO, "writing '%s' failed", path);
    }
    return KILN_OK;
}
