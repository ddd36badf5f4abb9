/* npy.c — NumPy .npy read and write (format versions 1.0, 2.0, 3.0; C order; little-endian
 * numeric and bool dtypes). Loading is strict (the grammar and the size rules: npy.h). */
#include "npy.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct { const char *descr; kiln_dtype dt; } npy_types[] = {
    {"<f4", KILN_F32}, {"<f8", KILN_F64}, {"<f2", KILN_F16}, {"|u1", KILN_U8}, {"|i1", KILN_I8},
    {"<u2", KILN_U16}, {"<i2", KILN_I16}, {"<i4", KILN_I32}, {"<u4", KILN_U32}, {"<i8", KILN_I64},
    {"<u8", KILN_U64}, {"|b1", KILN_BOOL}, {"<u1", KILN_U8}, {"<i1", KILN_I8}, {"<b1", KILN_BOOL},
};

enum { NPY_MAX_HEADER = 1 << 20 };

/* What the prefix and the header say. */
typedef struct {
    int major;
    size_t data_off; /* bytes before the array data */
    kiln_dtype dt;
    int ndim; /* may exceed KILN_MAX_DIMS (then only the first dims are kept) */
    int64_t dims[KILN_MAX_DIMS];
    bool fortran;
} npy_header;

/* The magic, the version and the header length, from the first `have` bytes of a file
 * (or buffer) of `total` bytes; *h gets major and data_off (which is <= total). */
static kiln_status npy_prefix(kiln_context *ctx, const unsigned char *b, size_t have, uint64_t total, const char *name,
                              npy_header *h) {
    if (have < 8 || memcmp(b, "\x93NUMPY", 6) != 0)
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s' is not a .npy file (bad magic)", name);
    if (!(b[6] >= 1 && b[6] <= 3 && b[7] == 0))
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': unsupported .npy version %d.%d (kiln reads 1.0, 2.0 and 3.0)", name,
                         b[6], b[7]);
    h->major = b[6];
    size_t pre = h->major == 1 ? 10 : 12;
    if (have < pre)
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': truncated header (%llu bytes in the file)", name,
                         (unsigned long long)total);
    uint64_t hlen = (uint64_t)b[8] | (uint64_t)b[9] << 8;
    if (h->major > 1) hlen |= (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24;
    if (hlen > NPY_MAX_HEADER)
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': header of %llu bytes is too long", name, (unsigned long long)hlen);
    if (hlen > total - pre)
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': truncated header (%llu bytes declared, the file has %llu bytes)",
                         name, (unsigned long long)hlen, (unsigned long long)total);
    h->data_off = pre + (size_t)hlen;
    return KILN_OK;
}

/* A cursor over the header text; fails with messages naming the file. */
typedef struct {
    kiln_context *ctx;
    const char *name, *s, *p, *end;
    int major;
} npy_lex;

static void lex_spaces(npy_lex *L) {
    while (L->p < L->end && *L->p == ' ') L->p++;
}

/* A quoted string (single or double quotes, printable ASCII, no escapes) into out. */
static kiln_status lex_string(npy_lex *L, const char *what, char *out, size_t cap) {
    if (L->p == L->end || (*L->p != '\'' && *L->p != '"'))
        return kiln_fail(L->ctx, KILN_ERR_PARSE, "'%s': malformed header: %s at offset %d is not a quoted string",
                         L->name, what, (int)(L->p - L->s));
    char q = *L->p++;
    size_t n = 0;
    for (; L->p < L->end && *L->p != q; L->p++) {
        unsigned char c = (unsigned char)*L->p;
        if (c < 0x20 || c > 0x7e || c == '\\')
            return kiln_fail(L->ctx, KILN_ERR_PARSE, "'%s': malformed header: %s holds byte 0x%02x at offset %d",
                             L->name, what, c, (int)(L->p - L->s));
        if (n + 1 < cap) out[n++] = (char)c;
    }
    if (L->p == L->end)
        return kiln_fail(L->ctx, KILN_ERR_PARSE, "'%s': malformed header: %s is an unterminated string", L->name,
                         what);
    L->p++;
    out[n] = 0;
    return KILN_OK;
}

/* The shape's text: from its first character to the matching ')' or ']' (or to what ends
 * the value), at most 48 characters. */
static kiln_status shape_error(npy_lex *L, const char *open, const char *why) {
    char close = *open == '(' ? ')' : *open == '[' ? ']' : ',';
    const char *e = open;
    while (e < L->end && e - open < 48 && *e != close && *e != '}' && *e != '\n') e++;
    int n = (int)(e - open) + (e < L->end && *e == close && close != ',');
    return kiln_fail(L->ctx, KILN_ERR_PARSE, "'%s': malformed shape %.*s in the header: %s", L->name, n, open, why);
}

/* shape: a tuple of non-negative decimal ints, as Python writes one. */
static kiln_status lex_shape(npy_lex *L, npy_header *h) {
    const char *open = L->p;
    if (L->p == L->end || *L->p != '(') {
        if (L->p < L->end && (*L->p == '[' || (*L->p >= '0' && *L->p <= '9')))
            return shape_error(L, open, "not a tuple");
        return kiln_fail(L->ctx, KILN_ERR_PARSE, "'%s': malformed header: shape at offset %d is not a tuple", L->name,
                         (int)(L->p - L->s));
    }
    L->p++;
    lex_spaces(L);
    h->ndim = 0;
    bool comma = false;
    while (L->p < L->end && *L->p != ')') {
        if (*L->p == '-') return shape_error(L, open, "a dimension is negative");
        if (!(*L->p >= '0' && *L->p <= '9')) return shape_error(L, open, "expected a dimension");
        if (*L->p == '0' && L->p + 1 < L->end && L->p[1] >= '0' && L->p[1] <= '9')
            return shape_error(L, open, "a dimension has a leading zero");
        int64_t v = 0;
        for (; L->p < L->end && *L->p >= '0' && *L->p <= '9'; L->p++) {
            if (v > (INT64_MAX - (*L->p - '0')) / 10) return shape_error(L, open, "a dimension is too large");
            v = v * 10 + (*L->p - '0');
        }
        if (L->major <= 2 && L->p < L->end && *L->p == 'L') L->p++; /* Python 2's long */
        if (h->ndim < KILN_MAX_DIMS) h->dims[h->ndim] = v;
        if (h->ndim < INT32_MAX) h->ndim++;
        lex_spaces(L);
        comma = L->p < L->end && *L->p == ',';
        if (comma) {
            L->p++;
            lex_spaces(L);
        } else if (L->p == L->end || *L->p != ')') {
            return shape_error(L, open, "expected ',' or ')' after a dimension");
        }
    }
    if (L->p == L->end) return shape_error(L, open, "no closing ')'");
    L->p++;
    if (h->ndim == 1 && !comma) return shape_error(L, open, "an int in parentheses, not a tuple (write (n,))");
    return KILN_OK;
}

/* The header dict: exactly descr, fortran_order and shape, then spaces and '\n'. */
static kiln_status npy_parse_dict(kiln_context *ctx, const char *s, size_t len, const char *name, npy_header *h) {
    npy_lex L = {ctx, name, s, s, s + len, h->major};
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};
    bool seen[3] = {false, false, false};
    char descr[32] = "";
    lex_spaces(&L);
    if (L.p == L.end || *L.p != '{')
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': malformed header: it does not start with a dict", name);
    L.p++;
    for (;;) {
        lex_spaces(&L);
        if (L.p < L.end && *L.p == '}') break;
        char key[32];
        kiln_status st = lex_string(&L, "a key", key, sizeof key);
        if (st) return st;
        int k = 0;
        while (k < 3 && strcmp(key, keys[k]) != 0) k++;
        if (k == 3) return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': unknown key '%s' in the header", name, key);
        if (seen[k]) return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': key '%s' appears twice in the header", name, key);
        seen[k] = true;
        lex_spaces(&L);
        if (L.p == L.end || *L.p != ':')
            return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': malformed header: no ':' after '%s'", name, key);
        L.p++;
        lex_spaces(&L);
        if (k == 0) {
            if (L.p < L.end && (*L.p == '[' || *L.p == '{'))
                return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "'%s': structured dtypes are not supported", name);
            st = lex_string(&L, "descr", descr, sizeof descr);
        } else if (k == 1) {
            size_t n = (size_t)(L.end - L.p);
            if (n >= 4 && memcmp(L.p, "True", 4) == 0) {
                h->fortran = true;
                L.p += 4;
            } else if (n >= 5 && memcmp(L.p, "False", 5) == 0) {
                h->fortran = false;
                L.p += 5;
            } else {
                return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': malformed header: fortran_order is not True or False",
                                 name);
            }
        } else {
            st = lex_shape(&L, h);
        }
        if (st) return st;
        lex_spaces(&L);
        if (L.p < L.end && *L.p == ',') {
            L.p++;
        } else if (L.p == L.end || *L.p != '}') {
            return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': malformed header: expected ',' or '}' after '%s' at offset %d",
                             name, key, (int)(L.p - s));
        }
    }
    L.p++; /* the '}' */
    const char *rest = L.p;
    lex_spaces(&L);
    if (L.p != L.end - 1 || *L.p != '\n') {
        if (L.p == L.end)
            return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': malformed header: it does not end with '\\n'", name);
        char shown[24];
        int n = 0;
        for (const char *c = rest; c < L.end && n < 20; c++) shown[n++] = *c >= 0x20 && *c <= 0x7e ? *c : '?';
        while (n > 0 && shown[n - 1] == ' ') n--;
        shown[n] = 0;
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': malformed header: text after the dict: \"%s\"", name, shown);
    }
    for (int k = 0; k < 3; k++)
        if (!seen[k]) return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': the header lacks '%s'", name, keys[k]);
    if (h->fortran)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "'%s': Fortran-order arrays are not supported", name);
    h->dt = KILN_DTYPE_UNDEFINED;
    for (size_t i = 0; i < sizeof npy_types / sizeof npy_types[0]; i++)
        if (strcmp(descr, npy_types[i].descr) == 0) {
            h->dt = npy_types[i].dt;
            break;
        }
    if (h->dt == KILN_DTYPE_UNDEFINED)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "'%s': dtype '%s' is not supported", name, descr);
    if (h->ndim > KILN_MAX_DIMS)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "'%s': %d dims, more than %d", name, h->ndim, KILN_MAX_DIMS);
    return KILN_OK;
}

/* The array's byte count against the `have` bytes after the header: equal, or an error. */
static kiln_status npy_check_size(kiln_context *ctx, const npy_header *h, uint64_t have, const char *name) {
    char shape[8 * 22 + 4];
    int k = snprintf(shape, sizeof shape, "(");
    for (int i = 0; i < h->ndim; i++)
        k += snprintf(shape + k, sizeof shape - (size_t)k, i ? ", %lld" : "%lld", (long long)h->dims[i]);
    snprintf(shape + k, sizeof shape - (size_t)k, h->ndim == 1 ? ",)" : ")");
    /* numel * element size, refusing anything past 2^63 bytes (zero dims aside) */
    uint64_t big = kiln_dtype_size(h->dt), nb = big;
    for (int i = 0; i < h->ndim; i++) {
        uint64_t d = (uint64_t)h->dims[i];
        if (d > 1 && big > ((uint64_t)INT64_MAX) / d)
            return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': shape %s of %s is too large (over 2^63 bytes)", name, shape,
                             kiln_dtype_name(h->dt));
        if (d > 1) big *= d;
        nb *= d;
    }
    if (nb > have)
        return kiln_fail(ctx, KILN_ERR_PARSE,
                         "'%s': data is truncated: shape %s of %s needs %llu bytes, the file has %llu after the header",
                         name, shape, kiln_dtype_name(h->dt), (unsigned long long)nb, (unsigned long long)have);
    if (nb < have)
        return kiln_fail(ctx, KILN_ERR_PARSE,
                         "'%s': %llu bytes of trailing data: shape %s of %s is %llu bytes, the file has %llu after the "
                         "header (does the shape match the data?)",
                         name, (unsigned long long)(have - nb), shape, kiln_dtype_name(h->dt), (unsigned long long)nb,
                         (unsigned long long)have);
    return KILN_OK;
}

static kiln_status npy_new_tensor(kiln_context *ctx, const npy_header *h, const char *name, kiln_tensor **t) {
    kiln_status st = kiln_tensor_create(ctx, h->dt, h->ndim, h->dims, t);
    if (st) kiln_msg_prefix(ctx, "'%s': ", name);
    /* a valid file kiln cannot hold (an empty array with a dim over kiln's 2^50 elements) */
    return st == KILN_ERR_INVALID_ARGUMENT ? KILN_ERR_UNSUPPORTED : st;
}

kiln_status kiln_npy_parse_buffer(kiln_context *ctx, const void *buf, size_t len, const char *name,
                                  kiln_tensor **out) {
    if (!ctx || (!buf && len) || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!name) name = "(buffer)";
    const unsigned char *b = buf;
    npy_header h = {0};
    size_t pre = len >= 12 ? 12 : len;
    kiln_status st = npy_prefix(ctx, b, pre, len, name, &h);
    if (!st) {
        size_t hstart = h.major == 1 ? 10 : 12;
        st = npy_parse_dict(ctx, (const char *)b + hstart, h.data_off - hstart, name, &h);
    }
    if (!st) st = npy_check_size(ctx, &h, len - h.data_off, name);
    kiln_tensor *t = NULL;
    if (!st) st = npy_new_tensor(ctx, &h, name, &t);
    if (st) return st;
    size_t nb = kiln_tensor_nbytes(t);
    if (nb) memcpy(t->data, b + h.data_off, nb);
    *out = t;
    return KILN_OK;
}

/* A stream that is not a regular file (a pipe): its size is known only at its end. */
static kiln_status npy_load_stream(kiln_context *ctx, FILE *f, const char *path, kiln_tensor **out) {
    size_t n = 0, cap = 1 << 16;
    unsigned char *buf = kiln_malloc(ctx, cap, "a .npy stream");
    if (!buf) return KILN_ERR_OUT_OF_MEMORY;
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        unsigned char *nbuf = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
        if (!nbuf) {
            free(buf);
            return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "'%s': out of memory reading %zu bytes", path, cap * 2);
        }
        buf = nbuf;
        cap *= 2;
    }
    kiln_status st = ferror(f) ? kiln_fail(ctx, KILN_ERR_IO, "reading '%s' failed", path)
                               : kiln_npy_parse_buffer(ctx, buf, n, path, out);
    free(buf);
    return st;
}

kiln_status kiln_tensor_load_npy(kiln_context *ctx, const char *path, kiln_tensor **out) {
    if (!ctx || !path || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_fail(ctx, KILN_ERR_IO, "cannot open '%s'", path);
    kiln_status st = KILN_OK;
    char *hdr = NULL;
    kiln_tensor *t = NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        st = kiln_fail(ctx, KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = npy_load_stream(ctx, f, path, out);
        goto out;
    }
    /* The header, then its sizes against the file's: nothing the header declares is
     * allocated before the file is known to hold it. */
    uint64_t total = (uint64_t)sb.st_size;
    unsigned char pre[12];
    size_t npre = fread(pre, 1, total < 12 ? (size_t)total : 12, f);
    npy_header h = {0};
    st = npy_prefix(ctx, pre, npre, total, path, &h);
    if (st) goto out;
    size_t hstart = h.major == 1 ? 10 : 12, hlen = h.data_off - hstart;
    hdr = kiln_malloc(ctx, hlen + 1, "npy header");
    if (!hdr) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    size_t got = npre - hstart < hlen ? npre - hstart : hlen;
    memcpy(hdr, pre + hstart, got);
    if (got < hlen && fread(hdr + got, 1, hlen - got, f) != hlen - got) {
        st = kiln_fail(ctx, KILN_ERR_IO, "'%s': reading the header failed", path);
        goto out;
    }
    st = npy_parse_dict(ctx, hdr, hlen, path, &h);
    if (!st) st = npy_check_size(ctx, &h, total - h.data_off, path);
    if (!st) st = npy_new_tensor(ctx, &h, path, &t);
    if (st) goto out;
    size_t nb = kiln_tensor_nbytes(t);
    if (fseek(f, (long)h.data_off, SEEK_SET) != 0 || fread(t->data, 1, nb, f) != nb) {
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
    if (kiln_require_host(ctx, t, "kiln_tensor_save_npy")) return KILN_ERR_UNSUPPORTED;
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
