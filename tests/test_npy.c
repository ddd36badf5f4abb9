/* test_npy.c — the .npy loader against files laid out byte for byte as NumPy 2.x writes
 * them (versions 1.0, 2.0, 3.0; 0-d, 1-d, empty, several dtypes), headers NumPy reads that
 * other writers produce, and a table of malformed files: each must fail with its status
 * and a message naming the file and the problem, through the path loader
 * (kiln_tensor_load_npy), a pipe, and the buffer parser (kiln_npy_parse_buffer).
 * The files are written from C, so NumPy is not needed; the well-formed ones are left in
 * WORKDIR as npy_ok_*.npy, for comparing with what NumPy writes.
 *
 *   test_npy WORKDIR
 */
#include "io/npy.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#if defined(__SANITIZE_ADDRESS__)
/* An allocation of what a lying header declares (35.5 GB) must abort the test under ASan
 * instead of being lazily mapped. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_allocation_size_mb=4096"; }
#endif

static int fails;
#include "check.h"

static char dir[1024];

static const char *tpath(const char *name) {
    static char buf[2][1200];
    static int k;
    k = (k + 1) % 2;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* ---------------------------------------------------------------- writing files */

/* A .npy file as NumPy 2.x writes it: prefix, the dict text, spaces up to a multiple of 64
 * bytes ending in '\n'. numpy_pad adds NumPy's room for the first axis to grow (21 digits
 * minus those of dims[0], for ndim > 0). Returns the length. */
static size_t make_npy(unsigned char *out, size_t cap, int major, const char *dict, int numpy_growth_digits,
                       bool align, const void *data, size_t nb) {
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t hlen = dl + (size_t)numpy_growth_digits + 1;
    if (align) hlen += (64 - (pre + hlen) % 64) % 64;
    if (pre + hlen + nb > cap) return 0;
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (unsigned char)major;
    out[7] = 0;
    for (size_t i = 0; i < pre - 8; i++) out[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(out + pre, dict, dl);
    memset(out + pre + dl, ' ', hlen - dl - 1);
    out[pre + hlen - 1] = '\n';
    if (nb) memcpy(out + pre + hlen, data, nb);
    return pre + hlen + nb;
}

static bool write_file(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(b, 1, n, f) == n;
    return (fclose(f) == 0) && ok;
}

/* The bytes of element i of a test array (a pattern; 0/1 for bool). */
static void fill(unsigned char *p, size_t nb, kiln_dtype dt) {
    for (size_t k = 0; k < nb; k++) p[k] = dt == KILN_BOOL ? (unsigned char)(k % 3 == 0) : (unsigned char)(k * 7 + 3);
}

/* Load the bytes b through the three ways in: a file, a pipe (a FIFO: not a regular
 * file), a buffer. Each must give the same status; *msg gets the file's message. */
static kiln_status load3(kiln_context *ctx, const char *name, const unsigned char *b, size_t n, kiln_tensor **out,
                         char *msg, size_t msgcap) {
    const char *path = tpath(name);
    *out = NULL;
    CHECK(write_file(path, b, n), "write %s", path);
    kiln_status st = kiln_tensor_load_npy(ctx, path, out);
    snprintf(msg, msgcap, "%s", st ? kiln_context_message(ctx) : "");
    remove(path);

    kiln_tensor *u = NULL;
    kiln_status sb = kiln_npy_parse_buffer(ctx, b, n, path, &u);
    CHECK(sb == st, "%s: the buffer parser gives %s, the file loader %s (%s)", name, kiln_status_name(sb),
          kiln_status_name(st), kiln_context_message(ctx));
    CHECK(sb != KILN_OK || (*out && u && u->ndim == (*out)->ndim && u->dtype == (*out)->dtype &&
                            memcmp(u->data, (*out)->data, kiln_tensor_nbytes(u)) == 0),
          "%s: buffer and file give the same tensor", name);
    CHECK(sb == KILN_OK || (!u && strstr(kiln_context_message(ctx), name)), "%s: buffer error names it: %s", name,
          kiln_context_message(ctx));
    kiln_tensor_free(u);

    /* the pipe */
    pid_t pid = -1;
    if (mkfifo(path, 0600) == 0 && (pid = fork()) >= 0) {
        if (pid == 0) {
            FILE *f = fopen(path, "wb");
            size_t w = f ? fwrite(b, 1, n, f) : 0;
            if (f) fclose(f);
            _exit(w == n ? 0 : 1);
        }
        u = NULL;
        kiln_status sp = kiln_tensor_load_npy(ctx, path, &u);
        int ws = 0;
        waitpid(pid, &ws, 0);
        CHECK(sp == st, "%s: through a pipe %s, from a file %s (%s)", name, kiln_status_name(sp),
              kiln_status_name(st), kiln_context_message(ctx));
        CHECK(sp != KILN_OK || (u && *out && u->ndim == (*out)->ndim &&
                                memcmp(u->data, (*out)->data, kiln_tensor_nbytes(u)) == 0),
              "%s: pipe and file give the same tensor", name);
        kiln_tensor_free(u);
    } else {
        CHECK(0, "mkfifo and fork for %s", path);
    }
    remove(path);
    return st;
}

/* ---------------------------------------------------------------- well-formed files */

typedef struct {
    const char *name;
    int major;
    const char *descr;
    kiln_dtype dt;
    int ndim;
    int64_t dims[4];
} good_case;

/* What NumPy 2.x's np.save / np.lib.format.write_array(version=...) write. */
static const good_case numpy_cases[] = {
    {"f32_0d_v1", 1, "<f4", KILN_F32, 0, {0}},
    {"i32_5_v1", 1, "<i4", KILN_I32, 1, {5}},
    {"f64_0x3_v1", 1, "<f8", KILN_F64, 2, {0, 3}},
    {"u8_2x3_v1", 1, "|u1", KILN_U8, 2, {2, 3}},
    {"bool_7_v1", 1, "|b1", KILN_BOOL, 1, {7}},
    {"i16_2x3_v2", 2, "<i2", KILN_I16, 2, {2, 3}},
    {"f16_1x2x3_v3", 3, "<f2", KILN_F16, 3, {1, 2, 3}},
    {"i64_4_v1", 1, "<i8", KILN_I64, 1, {4}},
    {"f32_2x4_v1", 1, "<f4", KILN_F32, 2, {2, 4}},
    {"i8_3x1x2x2_v1", 1, "|i1", KILN_I8, 4, {3, 1, 2, 2}},
    {"u16_10_v1", 1, "<u2", KILN_U16, 1, {10}},
    {"u32_123456_v1", 1, "<u4", KILN_U32, 1, {123456}},
    {"u64_2x2_v2", 2, "<u8", KILN_U64, 2, {2, 2}},
    {"f32_0_v1", 1, "<f4", KILN_F32, 1, {0}},
};

static void check_loaded(const kiln_tensor *t, const char *name, kiln_dtype dt, int ndim, const int64_t *dims,
                         const unsigned char *data, size_t nb) {
    CHECK(t && t->dtype == dt && t->ndim == ndim, "%s: dtype %s rank %d", name, t ? kiln_dtype_name(t->dtype) : "-",
          t ? t->ndim : -1);
    if (!t || t->ndim != ndim) return;
    for (int i = 0; i < ndim; i++) CHECK(t->dims[i] == dims[i], "%s: dim %d is %lld", name, i, (long long)t->dims[i]);
    CHECK(kiln_tensor_nbytes(t) == nb && (nb == 0 || memcmp(t->data, data, nb) == 0), "%s: data", name);
}

static void shape_text(char *s, size_t cap, int ndim, const int64_t *dims) {
    int k = snprintf(s, cap, "(");
    for (int i = 0; i < ndim; i++) k += snprintf(s + k, cap - (size_t)k, i ? ", %lld" : "%lld", (long long)dims[i]);
    snprintf(s + k, cap - (size_t)k, ndim == 1 ? ",)" : ")");
}

static void test_numpy_files(kiln_context *ctx) {
    static unsigned char file[1 << 20], data[1 << 20];
    char msg[1024];
    for (size_t c = 0; c < sizeof numpy_cases / sizeof numpy_cases[0]; c++) {
        const good_case *g = &numpy_cases[c];
        char shape[128], dict[256];
        shape_text(shape, sizeof shape, g->ndim, g->dims);
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", g->descr, shape);
        size_t nb = kiln_dtype_size(g->dt);
        for (int i = 0; i < g->ndim; i++) nb *= (size_t)g->dims[i];
        fill(data, nb, g->dt);
        int growth = 0;
        if (g->ndim > 0) {
            char d0[24];
            growth = 21 - snprintf(d0, sizeof d0, "%lld", (long long)g->dims[0]);
        }
        size_t n = make_npy(file, sizeof file, g->major, dict, growth, true, data, nb);
        char name[64];
        snprintf(name, sizeof name, "npy_ok_%s.npy", g->name);
        kiln_tensor *t = NULL;
        kiln_status st = load3(ctx, name, file, n, &t, msg, sizeof msg);
        CHECK(st == KILN_OK, "%s: %s", name, msg);
        check_loaded(t, name, g->dt, g->ndim, g->dims, data, nb);
        kiln_tensor_free(t);
        CHECK(write_file(tpath(name), file, n), "keep %s", name); /* for comparing with NumPy's */
    }
}

/* Headers NumPy reads that other writers (cnpy, npy-rs, older NumPy, by hand) produce. */
static void test_other_writers(kiln_context *ctx) {
    static const struct {
        const char *name;
        int major;
        const char *dict;
        bool align;
    } cases[] = {
        {"double quotes", 1, "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 4)}", true},
        {"keys in another order", 1, "{'shape': (2, 4), 'fortran_order': False, 'descr': '<f4'}", true},
        {"no spaces, trailing comma in tuple", 1, "{'descr':'<f4','fortran_order':False,'shape':(2,4,),}", true},
        {"spaces around everything", 1, "  { 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 2 , 4 ) }", true},
        {"not aligned", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }", false},
        {"python 2 longs", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 4L), }", true},
        {"python 2 longs v2", 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 4L), }", true},
    };
    unsigned char file[512], data[32];
    char msg[1024];
    fill(data, sizeof data, KILN_F32);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = make_npy(file, sizeof file, cases[c].major, cases[c].dict, 0, cases[c].align, data, sizeof data);
        kiln_tensor *t = NULL;
        kiln_status st = load3(ctx, "npy_other.npy", file, n, &t, msg, sizeof msg);
        CHECK(st == KILN_OK, "%s: %s", cases[c].name, msg);
        check_loaded(t, cases[c].name, KILN_F32, 2, (const int64_t[]){2, 4}, data, sizeof data);
        kiln_tensor_free(t);
    }
}

/* ---------------------------------------------------------------- malformed files */

typedef struct {
    const char *name;
    int major;
    const char *dict; /* the header text, padded as NumPy pads */
    size_t data_bytes;
    kiln_status want;
    const char *says, *says2; /* the message contains these (says2 may be NULL) */
} bad_case;

#define STD(shape) "{'descr': '<f4', 'fortran_order': False, 'shape': " shape ", }"

static const bad_case bad_cases[] = {
    /* the cases (accepted before: exit 0) */
    {"fewer rows claimed than the file holds", 1, STD("(2, 4)"), 4 * 4 * 4, KILN_ERR_PARSE, "32 bytes of trailing data",
     "(2, 4)"},
    {"(2 4)", 1, STD("(2 4)"), 32, KILN_ERR_PARSE, "malformed shape (2 4)", "expected ',' or ')'"},
    {"(2,,,4)", 1, STD("(2,,,4)"), 32, KILN_ERR_PARSE, "malformed shape (2,,,4)", "expected a dimension"},
    {"text after the dict", 1, STD("(2,)") " garbage", 8, KILN_ERR_PARSE, "text after the dict", "garbage"},
    /* more shapes NumPy refuses */
    {"(,)", 1, STD("(,)"), 4, KILN_ERR_PARSE, "malformed shape (,)", NULL},
    {"(2) is an int", 1, STD("(2)"), 8, KILN_ERR_PARSE, "malformed shape (2)", "not a tuple"},
    {"[2] is a list", 1, STD("[2]"), 8, KILN_ERR_PARSE, "malformed shape [2]", "not a tuple"},
    {"shape a string", 1, STD("'2'"), 8, KILN_ERR_PARSE, "shape at offset", "not a tuple"},
    {"negative dim", 1, STD("(-2,)"), 8, KILN_ERR_PARSE, "negative", NULL},
    {"leading zero", 1, STD("(02,)"), 8, KILN_ERR_PARSE, "leading zero", NULL},
    {"2L in a 3.0 file", 3, STD("(2L,)"), 8, KILN_ERR_PARSE, "malformed shape (2L,)", NULL},
    {"dim over 2^63", 1, STD("(99999999999999999999,)"), 8, KILN_ERR_PARSE, "too large", NULL},
    {"size over 2^63 bytes", 1, STD("(4294967296, 4294967296)"), 8, KILN_ERR_PARSE, "too large", "2^63"},
    {"unclosed tuple", 1, STD("(2, 4"), 32, KILN_ERR_PARSE, "malformed shape (2, 4", NULL},
    /* kiln is stricter than ast.literal_eval here: no writer produces these */
    {"hex dim", 1, STD("(0x2,)"), 8, KILN_ERR_PARSE, "malformed shape (0x2,)", NULL},
    {"nested tuple", 1, STD("((2,))"), 8, KILN_ERR_PARSE, "malformed shape ((2,)", NULL},
    {"tab in the dict", 1, "{'descr':\t'<f4', 'fortran_order': False, 'shape': (2,), }", 8, KILN_ERR_PARSE,
     "not a quoted string", NULL},
    {"duplicate key", 1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8,
     KILN_ERR_PARSE, "'descr' appears twice", NULL},
    {"comment after the dict", 1, STD("(2,)") " # hi", 8, KILN_ERR_PARSE, "text after the dict", NULL},
    /* the dict */
    {"unknown key", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, KILN_ERR_PARSE,
     "unknown key 'x'", NULL},
    {"no fortran_order", 1, "{'descr': '<f4', 'shape': (2,), }", 8, KILN_ERR_PARSE, "lacks 'fortran_order'", NULL},
    {"no shape", 1, "{'descr': '<f4', 'fortran_order': False}", 8, KILN_ERR_PARSE, "lacks 'shape'", NULL},
    {"empty dict", 1, "{}", 0, KILN_ERR_PARSE, "lacks 'descr'", NULL},
    {"not a dict", 1, "[1]", 0, KILN_ERR_PARSE, "does not start with a dict", NULL},
    {"empty header", 1, "", 0, KILN_ERR_PARSE, "does not start with a dict", NULL},
    {"fortran_order 0", 1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", 8, KILN_ERR_PARSE,
     "fortran_order is not True or False", NULL},
    {"fortran_order Falsey", 1, "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}", 8, KILN_ERR_PARSE,
     "expected ',' or '}' after 'fortran_order'", NULL},
    {"descr unquoted", 1, "{'descr': <f4, 'fortran_order': False, 'shape': (2,)}", 8, KILN_ERR_PARSE,
     "descr at offset 10 is not a quoted string", NULL},
    {"mismatched quotes", 1, "{'descr': '<f4\", 'fortran_order': False, 'shape': (2,)}", 8, KILN_ERR_PARSE,
     "expected ',' or '}' after 'descr'", NULL},
    {"escape in a string", 1, "{'descr': '\\x3cf4', 'fortran_order': False, 'shape': (2,)}", 8, KILN_ERR_PARSE,
     "holds byte 0x5c", NULL},
    {"comma after the dict", 1, STD("(2,)") ",", 8, KILN_ERR_PARSE, "text after the dict", NULL},
    {"two commas in the dict", 1, "{'descr': '<f4',, 'fortran_order': False, 'shape': (2,)}", 8, KILN_ERR_PARSE,
     "a key at offset 16 is not a quoted string", NULL},
    {"leading comma", 1, "{, 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8, KILN_ERR_PARSE,
     "a key at offset 1", NULL},
    {"no colon", 1, "{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", 8, KILN_ERR_PARSE,
     "no ':' after 'descr'", NULL},
    {"NUL after the dict", 1, STD("(2,)") "\x01", 8, KILN_ERR_PARSE, "text after the dict", NULL},
    /* unsupported, valid files */
    {"fortran order", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, KILN_ERR_UNSUPPORTED,
     "Fortran-order arrays are not supported", NULL},
    {"big-endian", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, KILN_ERR_UNSUPPORTED,
     "dtype '>f4' is not supported", NULL},
    {"complex", 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 8, KILN_ERR_UNSUPPORTED,
     "dtype '<c8' is not supported", NULL},
    {"structured", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, KILN_ERR_UNSUPPORTED,
     "structured dtypes", NULL},
    {"empty, a dim over 2^50", 1, STD("(1125899906842625, 0)"), 0, KILN_ERR_UNSUPPORTED, "is too large", NULL},
    {"9 dims", 1, STD("(1, 1, 1, 1, 1, 1, 1, 1, 1)"), 4, KILN_ERR_UNSUPPORTED, "9 dims, more than 8", NULL},
    /* data sizes */
    {"truncated data", 1, STD("(4, 4)"), 32, KILN_ERR_PARSE, "data is truncated", "needs 64 bytes, the file has 32"},
    {"0-d without data", 1, STD("()"), 0, KILN_ERR_PARSE, "needs 4 bytes, the file has 0", NULL},
    {"empty array with data", 1, STD("(0, 3)"), 8, KILN_ERR_PARSE, "8 bytes of trailing data", NULL},
    {"one byte too many", 2, STD("(3,)"), 13, KILN_ERR_PARSE, "1 bytes of trailing data", "is 12 bytes"},
};

/* Files broken before the header: the bytes as they are. */
#define RAW(s) s, sizeof(s) - 1
static const struct {
    const char *name, *bytes;
    size_t len;
    const char *says, *says2;
} raw_cases[] = {
    {"bad magic", RAW("\x93NUMPZ\x01\x00\x10\x00{}"), "bad magic", NULL},
    {"empty file", RAW(""), "bad magic", NULL},
    {"version 1.1", RAW("\x93NUMPY\x01\x01\x02\x00{}"), "version 1.1", NULL},
    {"version 4.0", RAW("\x93NUMPY\x04\x00\x02\x00{}"), "version 4.0", NULL},
    {"header past the end", RAW("\x93NUMPY\x01\x00\xff\x00{'descr'"), "truncated header", "255 bytes declared"},
    {"2.0 prefix cut short", RAW("\x93NUMPY\x02\x00\x10\x00"), "truncated header", NULL},
    {"header over 1 MiB", RAW("\x93NUMPY\x02\x00\x00\x00\x20\x00{}"), "too long", NULL},
};

static void test_malformed(kiln_context *ctx) {
    unsigned char file[4096], data[256];
    char msg[1024];
    fill(data, sizeof data, KILN_U8);
    size_t nb = sizeof bad_cases / sizeof bad_cases[0], nr = sizeof raw_cases / sizeof raw_cases[0];
    for (size_t c = 0; c < nb + nr; c++) {
        const bad_case *b = c < nb ? &bad_cases[c] : NULL;
        const char *name = b ? b->name : raw_cases[c - nb].name;
        const char *says = b ? b->says : raw_cases[c - nb].says, *says2 = b ? b->says2 : raw_cases[c - nb].says2;
        kiln_status want = b ? b->want : KILN_ERR_PARSE;
        size_t n;
        if (b) {
            n = make_npy(file, sizeof file, b->major, b->dict, 0, true, data, b->data_bytes);
            /* '\x01' in a dict stands for a NUL byte */
            const char *z = strchr(b->dict, '\x01');
            if (z) file[(b->major == 1 ? 10 : 12) + (size_t)(z - b->dict)] = 0;
        } else {
            n = raw_cases[c - nb].len;
            memcpy(file, raw_cases[c - nb].bytes, n);
        }
        kiln_tensor *t = NULL;
        kiln_status st = load3(ctx, "npy_bad.npy", file, n, &t, msg, sizeof msg);
        if (getenv("KILN_TEST_VERBOSE")) { /* the message, and the file kept for trying it with NumPy */
            char keep[64];
            snprintf(keep, sizeof keep, "npy_bad_%02zu.npy", c);
            write_file(tpath(keep), file, n);
            printf("%s %-40s %s\n", keep, name, msg);
        }
        CHECK(st == want && !t, "%s: %s, want %s (%s)", name, kiln_status_name(st), kiln_status_name(want), msg);
        CHECK(strstr(msg, "npy_bad.npy") && strstr(msg, says) && (!says2 || strstr(msg, says2)),
              "%s: message \"%s\" lacks \"%s\"%s%s", name, msg, says, says2 ? " or " : "", says2 ? says2 : "");
        kiln_tensor_free(t);
    }
}

/* The 128-byte file whose header declares a 35.5 GB array: refused from the
 * sizes alone, before anything is allocated. Address space is capped at 4 GiB around the
 * load (ASan builds: allocations over 4 GiB abort), so allocating first fails this test. */
static void test_huge_header(kiln_context *ctx) {
    unsigned char file[128];
    size_t n = make_npy(file, sizeof file, 1, STD("(100000, 95367)"), 0, true, NULL, 0);
    CHECK(n == 128, "a 128-byte file (%zu)", n);
    const char *path = tpath("npy_huge.npy");
    CHECK(write_file(path, file, n), "write %s", path);
    struct rlimit old;
    bool capped = false;
    if (!SANITIZED && getrlimit(RLIMIT_AS, &old) == 0) {
        struct rlimit cap = old;
        cap.rlim_cur = (rlim_t)4 << 30;
        if (old.rlim_max == RLIM_INFINITY || old.rlim_max > cap.rlim_cur) capped = setrlimit(RLIMIT_AS, &cap) == 0;
    }
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_load_npy(ctx, path, &t);
    kiln_status sb = kiln_npy_parse_buffer(ctx, file, n, path, &t);
    if (capped) setrlimit(RLIMIT_AS, &old);
    const char *m = kiln_context_message(ctx);
    CHECK(st == KILN_ERR_PARSE && sb == KILN_ERR_PARSE && !t, "35.5 GB header in a 128-byte file: %s / %s (%s)",
          kiln_status_name(st), kiln_status_name(sb), m);
    CHECK(strstr(m, "npy_huge.npy") && strstr(m, "truncated") && strstr(m, "needs 38146800000 bytes") &&
              strstr(m, "the file has 0"),
          "the message names the file, the bytes needed and those there: %s", m);
    remove(path);
}

int main(int argc, char **argv) {
    snprintf(dir, sizeof dir, "%s", argc > 1 ? argv[1] : ".");
    signal(SIGPIPE, SIG_IGN); /* a loader that stops reading a pipe early is not a crash */
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    test_numpy_files(ctx);
    test_other_writers(ctx);
    test_malformed(ctx);
    test_huge_header(ctx);
    kiln_context_free(ctx);
    if (fails) printf("%d check(s) failed\n", fails);
    else printf("npy: all checks passed\n");
    return fails ? 1 : 0;
}
