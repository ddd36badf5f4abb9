/*
 * safetensors.c — safetensors checkpoints: atomic save, strictly validated load (see
 * safetensors.h for the format and the guarantees).
 *
 * The header is parsed by a small strict JSON parser written for exactly this subset: a
 * top-level object whose values are either tensor entries {"dtype", "shape",
 * "data_offsets"} or the "__metadata__" object of strings. Everything else valid JSON
 * could hold (other value types, unknown fields) is an error, since no valid
 * safetensors file contains it. Host byte order must be little-endian (checked).
 */
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

void (*kiln_safetensors_write_hook)(size_t done, size_t total) = NULL;

/* Header sizes above this are refused (the reference implementation's limit). */
#define MAX_HEADER ((uint64_t)100 << 20)
#define CHUNK ((size_t)1 << 20)

static const struct { const char *name; kiln_dtype dt; } st_types[] = {
    {"BOOL", KILN_BOOL}, {"U8", KILN_U8},   {"I8", KILN_I8},   {"U16", KILN_U16}, {"I16", KILN_I16},
    {"F16", KILN_F16},   {"BF16", KILN_BF16}, {"U32", KILN_U32}, {"I32", KILN_I32}, {"F32", KILN_F32},
    {"U64", KILN_U64},   {"I64", KILN_I64}, {"F64", KILN_F64},
};

static const char *st_dtype_name(kiln_dtype dt) {
    for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
        if (st_types[i].dt == dt) return st_types[i].name;
    return NULL;
}

static bool little_endian(void) {
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

/* Length of the valid UTF-8 sequence starting at s (at most n bytes), 0 when invalid
 * (overlong forms, surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

static bool utf8_valid(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len((const unsigned char *)s + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

/* Names sorted for duplicate detection and lookup. */
typedef struct named {
    const char *name;
    int idx;
} named;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* ======================================================================= save */

/* A growable text buffer; oom sticks. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t len) {
    if (b->oom) return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + len + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_int(sbuf *b, uint64_t v) {
    char t[24];
    int k = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sb_put(b, t, (size_t)k);
}

/* A JSON string literal: quotes, backslashes and control characters escaped. */
static void sb_json(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            sb_put(b, e, 6);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static bool write_all(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }

/* fsync the directory holding path, so the rename itself is durable. */
static kiln_status sync_dir(kiln_context *ctx, const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? kiln_malloc(ctx, (size_t)(slash - path) + 2, "a path") : kiln_strdup(ctx, ".");
    if (!dir) return KILN_ERR_OUT_OF_MEMORY;
    if (slash) {
        size_t k = slash == path ? 1 : (size_t)(slash - path); /* "/x" lives in "/" */
        memcpy(dir, path, k);
        dir[k] = 0;
    }
    kiln_status st = KILN_OK;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
        st = kiln_fail(ctx, KILN_ERR_IO, "saved '%s' but could not fsync its directory '%s': %s", path, dir,
                       strerror(errno));
    if (fd >= 0) close(fd);
    free(dir);
    return st;
}

/* Temporaries of saves killed midway: remove "BASE.tmp.PID" beside path (BASE: path's file
 * name, PID: digits only) when no process PID exists (kill(PID, 0) fails with ESRCH). A
 * live process's file is left alone (it may be saving to path now), and so is this
 * process's own (the save about to start overwrites it). Best effort: errors are ignored.
 * PIDs are this machine's: a directory shared with other hosts or PID namespaces could hold
 * a file of a live process elsewhere, which this would remove. */
static void remove_stale_temps(const char *path) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) : 0, blen = strlen(base);
    if (!blen) return;
    char *dir = malloc(dlen + 2);
    char *full = malloc(strlen(path) + 64);
    DIR *d = NULL;
    if (dir && full) {
        if (slash) {
            memcpy(dir, path, dlen ? dlen : 1); /* "/x" lives in "/" */
            dir[dlen ? dlen : 1] = 0;
        } else {
            strcpy(dir, ".");
        }
        d = opendir(dir);
    }
    for (struct dirent *e; d && (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, base, blen) != 0 || strncmp(n + blen, ".tmp.", 5) != 0) continue;
        const char *digits = n + blen + 5;
        size_t k = 0;
        long long pid = 0;
        for (; digits[k] >= '0' && digits[k] <= '9' && k < 10; k++) pid = pid * 10 + (digits[k] - '0');
        if (k == 0 || digits[0] == '0' || digits[k] != 0 || pid <= 0 || pid > 0x7fffffff || (pid_t)pid == getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to judge (EPERM) */
        snprintf(full, strlen(path) + 64, "%.*s%s", (int)(slash ? (size_t)(base - path) : 0), path, n);
        remove(full);
    }
    if (d) closedir(d);
    free(dir);
    free(full);
}

/* Order of the data: larger elements first (stable), so each tensor starts aligned. */
typedef struct order_item {
    size_t esize;
    int idx;
} order_item;

static int cmp_order(const void *a, const void *b) {
    const order_item *x = a, *y = b;
    if (x->esize != y->esize) return x->esize > y->esize ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static kiln_status check_save_args(kiln_context *ctx, const char *path, int n, const char *const *names,
                                   const kiln_tensor *const *tensors, int n_meta, const char *const *keys,
                                   const char *const *vals) {
    if (n < 0 || n_meta < 0 || (n > 0 && (!names || !tensors)) || (n_meta > 0 && (!keys || !vals)))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "saving '%s': bad tensor or metadata arrays", path);
    if (!little_endian())
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "saving '%s': safetensors needs a little-endian host", path);
    for (int i = 0; i < n; i++) {
        const kiln_tensor *t = tensors[i];
        if (!names[i] || !utf8_valid(names[i]) || strcmp(names[i], "__metadata__") == 0)
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "saving '%s': tensor %d has a bad name (%s)", path, i,
                             names[i] ? "invalid UTF-8 or __metadata__" : "NULL");
        if (!t)
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "saving '%s': tensor '%s' is NULL", path, names[i]);
        if (!st_dtype_name(t->dtype))
            return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "saving '%s': tensor '%s' has dtype %s, which safetensors "
                             "lacks", path, names[i], kiln_dtype_name(t->dtype));
        if (!t->data && kiln_tensor_numel(t) > 0)
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "saving '%s': tensor '%s' has no data", path, names[i]);
        if (t->ndim == 4 && t->format != KILN_FORMAT_NCHW)
            return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "saving '%s': tensor '%s' is laid out NHWC; convert it "
                             "with kiln_tensor_to_format first", path, names[i]);
    }
    for (int i = 0; i < n_meta; i++)
        if (!keys[i] || !vals[i] || !utf8_valid(keys[i]) || !utf8_valid(vals[i]))
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "saving '%s': metadata pair %d is NULL or not UTF-8",
                             path, i);
    return KILN_OK;
}

/* Duplicate check over n strings; returns the duplicate or NULL. sorted has n slots. */
static const char *find_duplicate(const char *const *s, int n, named *sorted) {
    for (int i = 0; i < n; i++) sorted[i] = (named){s[i], i};
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_named);
    for (int i = 1; i < n; i++)
        if (strcmp(sorted[i - 1].name, sorted[i].name) == 0) return sorted[i].name;
    return NULL;
}

kiln_status kiln_safetensors_save(kiln_context *ctx, const char *path, int n, const char *const *names,
                                  const kiln_tensor *const *tensors, int n_meta, const char *const *meta_keys,
                                  const char *const *meta_values) {
    if (!ctx || !path) return KILN_ERR_INVALID_ARGUMENT;
    kiln_status st = check_save_args(ctx, path, n, names, tensors, n_meta, meta_keys, meta_values);
    if (st) return st;
    int most = n > n_meta ? n : n_meta;
    named *sorted = kiln_calloc(ctx, (size_t)most, sizeof *sorted, "safetensors names");
    order_item *order = kiln_calloc(ctx, (size_t)n, sizeof *order, "safetensors order");
    uint64_t *begin = kiln_calloc(ctx, (size_t)n, sizeof *begin, "safetensors offsets");
    char *tmp = kiln_malloc(ctx, strlen(path) + 32, "a path");
    sbuf h = {0};
    FILE *f = NULL;
    if (!sorted || !order || !begin || !tmp) {
        st = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    const char *dup = find_duplicate(names, n, sorted);
    if (!dup) dup = find_duplicate(meta_keys, n_meta, sorted);
    if (dup) {
        st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "saving '%s': name '%s' appears twice", path, dup);
        goto out;
    }

    for (int i = 0; i < n; i++) order[i] = (order_item){kiln_dtype_size(tensors[i]->dtype), i};
    qsort(order, (size_t)n, sizeof *order, cmp_order);
    uint64_t total = 0;
    for (int k = 0; k < n; k++) {
        begin[order[k].idx] = total;
        total += kiln_tensor_nbytes(tensors[order[k].idx]);
    }

    sb_str(&h, "{");
    if (n_meta > 0) {
        sb_str(&h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_str(&h, ",");
            sb_json(&h, meta_keys[i]);
            sb_str(&h, ":");
            sb_json(&h, meta_values[i]);
        }
        sb_str(&h, "}");
    }
    for (int i = 0; i < n; i++) {
        const kiln_tensor *t = tensors[i];
        if (i || n_meta > 0) sb_str(&h, ",");
        sb_json(&h, names[i]);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, st_dtype_name(t->dtype));
        sb_str(&h, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) sb_str(&h, ",");
            sb_int(&h, (uint64_t)t->dims[d]);
        }
        sb_str(&h, "],\"data_offsets\":[");
        sb_int(&h, begin[i]);
        sb_str(&h, ",");
        sb_int(&h, begin[i] + kiln_tensor_nbytes(t));
        sb_str(&h, "]}");
    }
    sb_str(&h, "}");
    while (!h.oom && h.n % 8) sb_str(&h, " "); /* data starts 8-aligned in the file */
    if (h.oom) {
        st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "saving '%s': out of memory building the header", path);
        goto out;
    }
    if (h.n > MAX_HEADER) {
        st = kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "saving '%s': header of %zu bytes exceeds the format's limit",
                       path, h.n);
        goto out;
    }

    remove_stale_temps(path);
    snprintf(tmp, strlen(path) + 32, "%s.tmp.%ld", path, (long)getpid());
    f = fopen(tmp, "wb");
    if (!f) {
        st = kiln_fail(ctx, KILN_ERR_IO, "saving '%s': cannot create '%s': %s", path, tmp, strerror(errno));
        goto out;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    bool ok = write_all(f, len8, 8) && write_all(f, h.p, h.n);
    uint64_t done = 0;
    for (int k = 0; ok && k < n; k++) {
        const kiln_tensor *t = tensors[order[k].idx];
        const char *p = t->data;
        size_t nb = kiln_tensor_nbytes(t);
        for (size_t off = 0; ok && off < nb; off += CHUNK) {
            size_t c = nb - off < CHUNK ? nb - off : CHUNK;
            ok = write_all(f, p + off, c);
            done += c;
            if (ok && kiln_safetensors_write_hook) kiln_safetensors_write_hook((size_t)done, (size_t)total);
        }
    }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    ok = fclose(f) == 0 && ok;
    f = NULL;
    if (!ok) {
        remove(tmp);
        st = kiln_fail(ctx, KILN_ERR_IO, "saving '%s': writing '%s' failed: %s", path, tmp, strerror(err));
        goto out;
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        remove(tmp);
        st = kiln_fail(ctx, KILN_ERR_IO, "saving '%s': cannot rename '%s' over it: %s", path, tmp, strerror(err));
        goto out;
    }
    st = sync_dir(ctx, path);
out:
    free(h.p);
    free(tmp);
    free(begin);
    free(order);
    free(sorted);
    return st;
}

/* ======================================================================= load */

typedef struct entry {
    char *name;
    kiln_tensor *t;      /* shape-only while parsing; data read afterwards */
    uint64_t begin, end; /* byte range in the data section */
} entry;

struct kiln_safetensors {
    kiln_context *ctx;
    char *path;
    int n, cap;
    entry *e;          /* header order */
    named *by_name;    /* (n) sorted */
    int n_meta, cap_meta;
    char **keys, **vals;
};

/* The JSON cursor. */
typedef struct jp {
    kiln_context *ctx;
    const char *path;
    const char *s, *p, *end;
} jp;

static kiln_status jfail(jp *j, kiln_status st, const char *fmt, ...) KILN_PRINTF(3, 4);
static kiln_status jfail(jp *j, kiln_status st, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln_fail(j->ctx, st, "'%s': bad safetensors header at byte %zu: %s", j->path,
                     (size_t)(j->p - j->s) + 8, msg);
}

static void jws(jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static bool jpeek(jp *j, char c) {
    jws(j);
    return j->p < j->end && *j->p == c;
}

static kiln_status jexpect(jp *j, char c) {
    if (!jpeek(j, c))
        return jfail(j, KILN_ERR_PARSE, j->p < j->end ? "expected '%c'" : "expected '%c', found the end", c);
    j->p++;
    return KILN_OK;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static bool hex4(const char *p, const char *end, unsigned *v) {
    if (end - p < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return false;
        *v = *v << 4 | (unsigned)h;
    }
    return true;
}

/* A JSON string into a new NUL-terminated UTF-8 string. */
static kiln_status jstring(jp *j, char **out) {
    *out = NULL;
    jws(j);
    if (j->p >= j->end || *j->p != '"') return jfail(j, KILN_ERR_PARSE, "expected a string");
    const char *q = ++j->p;
    while (q < j->end && *q != '"') q += *q == '\\' ? 2 : 1;
    if (q >= j->end) return jfail(j, KILN_ERR_PARSE, "unterminated string");
    char *s = kiln_malloc(j->ctx, (size_t)(q - j->p) + 1, "a header string"), *w = s;
    if (!s) return KILN_ERR_OUT_OF_MEMORY;
    while (j->p < q) {
        unsigned char c = (unsigned char)*j->p;
        if (c < 0x20) {
            free(s);
            return jfail(j, KILN_ERR_PARSE, "control character 0x%02x in a string", c);
        }
        if (c >= 0x80) {
            size_t k = utf8_len((const unsigned char *)j->p, (size_t)(q - j->p));
            if (!k) {
                free(s);
                return jfail(j, KILN_ERR_PARSE, "invalid UTF-8 in a string");
            }
            memcpy(w, j->p, k);
            w += k;
            j->p += k;
            continue;
        }
        if (c != '\\') {
            *w++ = (char)c;
            j->p++;
            continue;
        }
        char e = j->p[1];
        j->p += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            *w++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        unsigned cp;
        if (e != 'u' || !hex4(j->p, q, &cp)) {
            j->p -= 2;
            free(s);
            return jfail(j, KILN_ERR_PARSE, "bad escape in a string");
        }
        j->p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (q - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || !hex4(j->p + 2, q, &lo) || lo < 0xDC00 ||
                lo > 0xDFFF) {
                free(s);
                return jfail(j, KILN_ERR_PARSE, "unpaired UTF-16 surrogate in a string");
            }
            j->p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            free(s);
            return jfail(j, KILN_ERR_PARSE, "unpaired UTF-16 surrogate in a string");
        }
        if (cp == 0) {
            free(s);
            return jfail(j, KILN_ERR_PARSE, "\\u0000 in a string");
        }
        if (cp < 0x80) {
            *w++ = (char)cp;
        } else if (cp < 0x800) {
            *w++ = (char)(0xC0 | cp >> 6);
            *w++ = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            *w++ = (char)(0xE0 | cp >> 12);
            *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
            *w++ = (char)(0x80 | (cp & 0x3F));
        } else {
            *w++ = (char)(0xF0 | cp >> 18);
            *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
            *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
            *w++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    *w = 0;
    j->p = q + 1;
    *out = s;
    return KILN_OK;
}

/* A JSON number that must be a non-negative integer below 2^63. */
static kiln_status juint(jp *j, uint64_t *out, const char *what) {
    jws(j);
    if (j->p < j->end && *j->p == '-') return jfail(j, KILN_ERR_PARSE, "%s must not be negative", what);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jfail(j, KILN_ERR_PARSE, "expected an integer for %s", what);
    if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
        return jfail(j, KILN_ERR_PARSE, "number with a leading zero in %s", what);
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        unsigned d = (unsigned)(*j->p - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) return jfail(j, KILN_ERR_PARSE, "%s is too large", what);
        v = v * 10 + d;
        j->p++;
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return jfail(j, KILN_ERR_PARSE, "%s must be an integer", what);
    *out = v;
    return KILN_OK;
}

/* After a member: ',' (returns true: another follows) or the closing bracket. */
static kiln_status jnext(jp *j, char close, bool *more) {
    jws(j);
    if (j->p < j->end && *j->p == ',') {
        j->p++;
        *more = true;
        return KILN_OK;
    }
    if (j->p < j->end && *j->p == close) {
        j->p++;
        *more = false;
        return KILN_OK;
    }
    return jfail(j, KILN_ERR_PARSE, "expected ',' or '%c'", close);
}

/* {"dtype": "F32", "shape": [..], "data_offsets": [b, e]} into e (name already set). */
static kiln_status jtensor(jp *j, entry *e) {
    kiln_status st = jexpect(j, '{');
    if (st) return st;
    bool have_dt = false, have_shape = false, have_off = false;
    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    int ndim = 0;
    int64_t dims[KILN_MAX_DIMS] = {0};
    bool more = !jpeek(j, '}');
    if (!more) j->p++;
    while (more) {
        char *key = NULL, *val = NULL;
        if ((st = jstring(j, &key)) || (st = jexpect(j, ':'))) {
            free(key);
            return st;
        }
        if (strcmp(key, "dtype") == 0 && !have_dt) {
            have_dt = true;
            if ((st = jstring(j, &val))) {
                free(key);
                return st;
            }
            for (size_t i = 0; i < sizeof st_types / sizeof st_types[0]; i++)
                if (strcmp(val, st_types[i].name) == 0) dt = st_types[i].dt;
            if (dt == KILN_DTYPE_UNDEFINED) {
                bool known = strncmp(val, "F8_", 3) == 0 || strncmp(val, "F6_", 3) == 0 || strcmp(val, "F4") == 0 ||
                             strcmp(val, "C64") == 0;
                st = jfail(j, known ? KILN_ERR_UNSUPPORTED : KILN_ERR_PARSE, "tensor '%s' has %s dtype '%.40s'",
                           e->name, known ? "unsupported" : "unknown", val);
            }
            free(val);
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            have_shape = true;
            if (!(st = jexpect(j, '['))) {
                bool dmore = !jpeek(j, ']');
                if (!dmore) j->p++;
                while (!st && dmore) {
                    uint64_t d;
                    if (ndim == KILN_MAX_DIMS)
                        st = jfail(j, KILN_ERR_UNSUPPORTED, "tensor '%s' has more than %d dims", e->name, KILN_MAX_DIMS);
                    else if (!(st = juint(j, &d, "a dim")))
                        dims[ndim++] = (int64_t)d;
                    if (!st) st = jnext(j, ']', &dmore);
                }
            }
        } else if (strcmp(key, "data_offsets") == 0 && !have_off) {
            have_off = true;
            if (!(st = jexpect(j, '[')) && !(st = juint(j, &e->begin, "data_offsets")) &&
                !(st = jexpect(j, ',')) && !(st = juint(j, &e->end, "data_offsets")))
                st = jexpect(j, ']');
        } else {
            bool twice = strcmp(key, "dtype") == 0 || strcmp(key, "shape") == 0 || strcmp(key, "data_offsets") == 0;
            st = jfail(j, KILN_ERR_PARSE, "%s field '%.40s' in tensor '%s'", twice ? "repeated" : "unknown", key,
                       e->name);
        }
        free(key);
        if (st || (st = jnext(j, '}', &more))) return st;
    }
    if (!have_dt || !have_shape || !have_off)
        return jfail(j, KILN_ERR_PARSE, "tensor '%s' lacks %s", e->name,
                     !have_dt ? "dtype" : !have_shape ? "shape" : "data_offsets");
    /* Bounded numel: dims multiply without overflow and the tensor fits kiln's limit. */
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] && numel > (((int64_t)1 << 50) / (int64_t)kiln_dtype_size(dt)) / dims[i])
            return jfail(j, KILN_ERR_PARSE, "tensor '%s' has a shape too large", e->name);
        numel *= dims[i];
    }
    if (e->begin > e->end)
        return jfail(j, KILN_ERR_PARSE, "tensor '%s' has data_offsets [%llu, %llu] that end before they begin",
                     e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
    if ((uint64_t)numel * kiln_dtype_size(dt) != e->end - e->begin)
        return jfail(j, KILN_ERR_PARSE, "tensor '%s' of %lld elements of %s needs %llu bytes but data_offsets span %llu",
                     e->name, (long long)numel, kiln_dtype_name(dt),
                     (unsigned long long)numel * kiln_dtype_size(dt), (unsigned long long)(e->end - e->begin));
    e->t = kiln_calloc(j->ctx, 1, sizeof *e->t, "a tensor");
    if (!e->t) return KILN_ERR_OUT_OF_MEMORY;
    kiln_tensor_set_shape(e->t, dt, ndim, dims);
    e->t->ctx = j->ctx;
    return KILN_OK;
}

static kiln_status jmeta(jp *j, kiln_safetensors *st) {
    kiln_status s = jexpect(j, '{');
    if (s) return s;
    bool more = !jpeek(j, '}');
    if (!more) j->p++;
    while (more) {
        char *key = NULL, *val = NULL;
        if ((s = jstring(j, &key)) || (s = jexpect(j, ':'))) {
            free(key);
            return s;
        }
        if (!jpeek(j, '"')) {
            s = jfail(j, KILN_ERR_PARSE, "metadata value of '%.40s' is not a string", key);
            free(key);
            return s;
        }
        if ((s = jstring(j, &val))) {
            free(key);
            return s;
        }
        if (st->n_meta == st->cap_meta) {
            int cap = st->cap_meta ? st->cap_meta * 2 : 8;
            char **k2 = realloc(st->keys, (size_t)cap * sizeof *k2);
            if (k2) st->keys = k2;
            char **v2 = k2 ? realloc(st->vals, (size_t)cap * sizeof *v2) : NULL;
            if (v2) st->vals = v2;
            if (!k2 || !v2) {
                free(key);
                free(val);
                return kiln_fail(j->ctx, KILN_ERR_OUT_OF_MEMORY, "'%s': out of memory reading metadata", j->path);
            }
            st->cap_meta = cap;
        }
        st->keys[st->n_meta] = key;
        st->vals[st->n_meta++] = val;
        if ((s = jnext(j, '}', &more))) return s;
    }
    return KILN_OK;
}

static kiln_status parse_header(jp *j, kiln_safetensors *st) {
    kiln_status s = jexpect(j, '{');
    if (s) return s;
    bool seen_meta = false;
    bool more = !jpeek(j, '}');
    if (!more) j->p++;
    while (more) {
        char *key = NULL;
        if ((s = jstring(j, &key)) || (s = jexpect(j, ':'))) {
            free(key);
            return s;
        }
        if (strcmp(key, "__metadata__") == 0) {
            free(key);
            if (seen_meta) return jfail(j, KILN_ERR_PARSE, "__metadata__ appears twice");
            seen_meta = true;
            if ((s = jmeta(j, st))) return s;
        } else {
            if (st->n == st->cap) {
                int cap = st->cap ? st->cap * 2 : 16;
                entry *e2 = realloc(st->e, (size_t)cap * sizeof *e2);
                if (!e2) {
                    free(key);
                    return kiln_fail(j->ctx, KILN_ERR_OUT_OF_MEMORY, "'%s': out of memory reading the header", j->path);
                }
                st->e = e2;
                st->cap = cap;
            }
            entry *e = &st->e[st->n++];
            memset(e, 0, sizeof *e);
            e->name = key;
            if ((s = jtensor(j, e))) return s;
        }
        if ((s = jnext(j, '}', &more))) return s;
    }
    jws(j);
    if (j->p != j->end) return jfail(j, KILN_ERR_PARSE, "text after the header's closing brace");
    return KILN_OK;
}

typedef struct span {
    uint64_t begin, end;
    int idx;
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Names distinct; spans tile [0, data_size) exactly. On success `order` is the data order. */
static kiln_status check_layout(kiln_safetensors *st, uint64_t data_size, span *order) {
    kiln_context *ctx = st->ctx;
    for (int i = 0; i < st->n; i++) st->by_name[i] = (named){st->e[i].name, i};
    qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, cmp_named);
    for (int i = 1; i < st->n; i++)
        if (strcmp(st->by_name[i - 1].name, st->by_name[i].name) == 0)
            return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': tensor '%s' appears twice in the header", st->path,
                             st->by_name[i].name);
    if (st->n_meta > 1) {
        named *m = kiln_calloc(ctx, (size_t)st->n_meta, sizeof *m, "metadata keys");
        if (!m) return KILN_ERR_OUT_OF_MEMORY;
        const char *dup = find_duplicate((const char *const *)st->keys, st->n_meta, m);
        kiln_status s = dup ? kiln_fail(ctx, KILN_ERR_PARSE, "'%s': metadata key '%s' appears twice", st->path, dup)
                            : KILN_OK;
        free(m);
        if (s) return s;
    }
    for (int i = 0; i < st->n; i++) order[i] = (span){st->e[i].begin, st->e[i].end, i};
    qsort(order, (size_t)st->n, sizeof *order, cmp_span);
    uint64_t at = 0;
    for (int k = 0; k < st->n; k++) {
        const span *s = &order[k];
        if (s->end > data_size)
            return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': tensor '%s' has data_offsets [%llu, %llu] beyond the %llu "
                             "bytes of data in the file", st->path, st->e[s->idx].name, (unsigned long long)s->begin,
                             (unsigned long long)s->end, (unsigned long long)data_size);
        if (s->begin < at)
            return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': tensor '%s' [%llu, %llu] overlaps tensor '%s'", st->path,
                             st->e[s->idx].name, (unsigned long long)s->begin, (unsigned long long)s->end,
                             st->e[order[k - 1].idx].name);
        if (s->begin > at)
            return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': %llu bytes of data before tensor '%s' belong to no tensor",
                             st->path, (unsigned long long)(s->begin - at), st->e[s->idx].name);
        at = s->end;
    }
    if (at != data_size)
        return kiln_fail(ctx, KILN_ERR_PARSE, "'%s': the last %llu bytes of data belong to no tensor (truncated "
                         "header or trailing garbage)", st->path, (unsigned long long)(data_size - at));
    return KILN_OK;
}

kiln_status kiln_safetensors_load(kiln_context *ctx, const char *path, kiln_safetensors **out) {
    if (!ctx || !path || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!little_endian())
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "'%s': safetensors needs a little-endian host", path);
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_fail(ctx, KILN_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    kiln_status s = KILN_OK;
    char *hdr = NULL;
    span *order = NULL;
    kiln_safetensors *st = kiln_calloc(ctx, 1, sizeof *st, "a checkpoint");
    if (!st || !(st->path = kiln_strdup(ctx, path))) {
        s = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    st->ctx = ctx;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        s = kiln_fail(ctx, KILN_ERR_IO, "cannot stat '%s': %s", path, strerror(errno));
        goto out;
    }
    uint64_t fsize = (uint64_t)sb.st_size;
    unsigned char len8[8];
    if (fsize < 8 || fread(len8, 1, 8, f) != 8) {
        s = kiln_fail(ctx, KILN_ERR_PARSE, "'%s' is too short for a safetensors file (%llu bytes)", path,
                      (unsigned long long)fsize);
        goto out;
    }
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
    if (hlen < 2 || hlen > MAX_HEADER || hlen > fsize - 8) {
        s = kiln_fail(ctx, KILN_ERR_PARSE, "'%s': header length %llu is impossible for a file of %llu bytes%s", path,
                      (unsigned long long)hlen, (unsigned long long)fsize,
                      hlen > MAX_HEADER ? " (limit 100 MiB)" : "");
        goto out;
    }
    hdr = kiln_malloc(ctx, (size_t)hlen, "a safetensors header");
    if (!hdr) {
        s = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    if (fread(hdr, 1, (size_t)hlen, f) != hlen) {
        s = kiln_fail(ctx, KILN_ERR_IO, "'%s': cannot read the %llu-byte header", path, (unsigned long long)hlen);
        goto out;
    }
    jp j = {ctx, path, hdr, hdr, hdr + hlen};
    if ((s = parse_header(&j, st))) goto out;
    st->by_name = kiln_calloc(ctx, (size_t)st->n, sizeof *st->by_name, "checkpoint names");
    order = kiln_calloc(ctx, (size_t)st->n, sizeof *order, "checkpoint order");
    if (!st->by_name || !order) {
        s = KILN_ERR_OUT_OF_MEMORY;
        goto out;
    }
    if ((s = check_layout(st, fsize - 8 - hlen, order))) goto out;
    /* The spans tile the data in order, so the tensors are read front to back. */
    for (int k = 0; k < st->n; k++) {
        kiln_tensor *t = st->e[order[k].idx].t;
        size_t nb = kiln_tensor_nbytes(t);
        t->data = kiln_malloc(ctx, nb, "checkpoint tensor data");
        if (!t->data) {
            s = KILN_ERR_OUT_OF_MEMORY;
            goto out;
        }
        t->owns_data = true;
        if (nb && fread(t->data, 1, nb, f) != nb) {
            s = kiln_fail(ctx, KILN_ERR_IO, "'%s': cannot read tensor '%s' (file truncated while reading?)", path,
                          st->e[order[k].idx].name);
            goto out;
        }
    }
    *out = st;
    st = NULL;
out:
    free(order);
    free(hdr);
    kiln_safetensors_free(st);
    fclose(f);
    return s;
}

void kiln_safetensors_free(kiln_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) {
        free(st->e[i].name);
        kiln_tensor_free(st->e[i].t);
    }
    for (int i = 0; i < st->n_meta; i++) {
        free(st->keys[i]);
        free(st->vals[i]);
    }
    free(st->e);
    free(st->by_name);
    free(st->keys);
    free(st->vals);
    free(st->path);
    free(st);
}

int kiln_safetensors_count(const kiln_safetensors *st) { return st ? st->n : 0; }

const char *kiln_safetensors_name(const kiln_safetensors *st, int i) {
    return st && i >= 0 && i < st->n ? st->e[i].name : NULL;
}

const kiln_tensor *kiln_safetensors_tensor(const kiln_safetensors *st, int i) {
    return st && i >= 0 && i < st->n ? st->e[i].t : NULL;
}

const kiln_tensor *kiln_safetensors_find(const kiln_safetensors *st, const char *name) {
    if (!st || !name || st->n == 0) return NULL;
    named key = {name, 0};
    const named *hit = bsearch(&key, st->by_name, (size_t)st->n, sizeof key, cmp_named);
    return hit ? st->e[hit->idx].t : NULL;
}

kiln_status kiln_safetensors_copy_to(const kiln_safetensors *st, const char *name, kiln_tensor *dst) {
    if (!st || !name || !dst) return KILN_ERR_INVALID_ARGUMENT;
    const kiln_tensor *t = kiln_safetensors_find(st, name);
    if (!t) return kiln_fail(st->ctx, KILN_ERR_INVALID_ARGUMENT, "'%s' has no tensor '%s'", st->path, name);
    bool same = t->dtype == dst->dtype && t->ndim == dst->ndim;
    for (int i = 0; same && i < t->ndim; i++) same = t->dims[i] == dst->dims[i];
    if (!same) {
        char a[96], b[96];
        return kiln_fail(st->ctx, KILN_ERR_SHAPE, "'%s': tensor '%s' is %s but the destination is %s", st->path, name,
                         kiln_shape_str(t, a, sizeof a), kiln_shape_str(dst, b, sizeof b));
    }
    if (dst->ndim == 4 && dst->format != KILN_FORMAT_NCHW)
        return kiln_fail(st->ctx, KILN_ERR_UNSUPPORTED, "'%s': cannot restore '%s' into an NHWC tensor", st->path, name);
    size_t nb = kiln_tensor_nbytes(t);
    if (nb && !dst->data)
        return kiln_fail(st->ctx, KILN_ERR_INVALID_ARGUMENT, "restoring '%s': the destination has no data", name);
    if (nb) memcpy(dst->data, t->data, nb);
    return KILN_OK;
}

int kiln_safetensors_meta_count(const kiln_safetensors *st) { return st ? st->n_meta : 0; }

const char *kiln_safetensors_meta_key(const kiln_safetensors *st, int i) {
    return st && i >= 0 && i < st->n_meta ? st->keys[i] : NULL;
}

const char *kiln_safetensors_meta(const kiln_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->keys[i], key) == 0) return st->vals[i];
    return NULL;
}

kiln_status kiln_model_load_weights(kiln_model *m, const char *path, int *loaded) {
    if (loaded) *loaded = 0;
    if (!m || !path) return KILN_ERR_INVALID_ARGUMENT;
    kiln_safetensors *w = NULL;
    kiln_status st = kiln_safetensors_load(m->ctx, path, &w);
    int n = 0;
    for (int v = 0; !st && v < m->n_values; v++) {
        if (!m->values[v].init || !kiln_safetensors_find(w, m->values[v].name)) continue;
        st = kiln_safetensors_copy_to(w, m->values[v].name, m->values[v].init);
        if (!st) n++;
    }
    kiln_safetensors_free(w);
    if (loaded) *loaded = n;
    return st;
}
