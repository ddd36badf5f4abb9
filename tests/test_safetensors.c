/* test_safetensors.c — safetensors round trips (every dtype, a scalar, an empty tensor,
 * metadata, awkward names), a hand-written file, malformed files (each must fail with a
 * message naming the problem), and crash safety: a process SIGKILLed while saving over a
 * checkpoint leaves the old one loadable and intact.
 *
 *   test_safetensors WORKDIR
 */
#include "io/safetensors.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int fails;
#include "check.h"

static char dir[1024];

static const char *tpath(const char *name) {
    static char buf[4][1200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static bool msg_has(kiln_context *ctx, const char *a) { return strstr(kiln_context_message(ctx), a) != NULL; }

static bool same_tensor(const kiln_tensor *a, const kiln_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    size_t n = kiln_tensor_nbytes(a);
    return n == 0 || memcmp(a->data, b->data, n) == 0;
}

/* ---------------------------------------------------------------- round trip */

/* Element size of the safetensors dtype named at the start of s (up to its quote). */
static size_t elem_size(const char *s) {
    static const struct { const char *name; size_t size; } t[] = {
        {"F64\"", 8}, {"I64\"", 8}, {"U64\"", 8}, {"F32\"", 4}, {"I32\"", 4}, {"U32\"", 4}, {"F16\"", 2},
        {"BF16\"", 2}, {"I16\"", 2}, {"U16\"", 2}, {"U8\"", 1}, {"I8\"", 1}, {"BOOL\"", 1}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strncmp(s, t[i].name, strlen(t[i].name)) == 0) return t[i].size;
    return 0;
}

static void test_round_trip(kiln_context *ctx) {
    const kiln_dtype dts[] = {KILN_F32, KILN_F16, KILN_BF16, KILN_F64, KILN_I64, KILN_I32, KILN_I16,
                              KILN_I8,  KILN_U8,  KILN_U16,  KILN_U32, KILN_U64, KILN_BOOL};
    enum { ND = sizeof dts / sizeof dts[0] };
    kiln_tensor *t[ND + 2];
    const char *names[ND + 2];
    char namebuf[ND][32];
    for (int i = 0; i < ND; i++) {
        /* odd sizes so that the alignment ordering matters */
        int64_t dims[3] = {2, i + 1, 3};
        t[i] = kiln_tensor_new(ctx, dts[i], i % 3 + 1, dims);
        unsigned char *p = t[i]->data;
        for (size_t k = 0; k < kiln_tensor_nbytes(t[i]); k++) p[k] = (unsigned char)(k * 131 + (size_t)i * 7 + 1);
        if (dts[i] == KILN_BOOL)
            for (size_t k = 0; k < kiln_tensor_nbytes(t[i]); k++) p[k] &= 1;
        snprintf(namebuf[i], sizeof namebuf[i], "layer%d.%s", i, kiln_dtype_name(dts[i]));
        names[i] = namebuf[i];
    }
    t[ND] = kiln_tensor_new(ctx, KILN_F32, 0, NULL); /* a scalar */
    *(float *)t[ND]->data = -2.5f;
    names[ND] = "step \"scalar\" \\ \xc3\xa9\t\x01"; /* quotes, backslash, UTF-8, control chars */
    t[ND + 1] = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){0, 3}); /* empty */
    names[ND + 1] = "empty";
    const char *keys[] = {"epoch", "format", "note"}, *vals[] = {"3", "pt", "line one\nline \"two\" \xe2\x82\xac"};

    const char *p = tpath("rt.safetensors");
    kiln_status st = kiln_safetensors_save(ctx, p, ND + 2, names, (const kiln_tensor *const *)t, 3, keys, vals);
    CHECK(st == KILN_OK, "save: %s", kiln_context_message(ctx));
    kiln_safetensors *s = NULL;
    st = kiln_safetensors_load(ctx, p, &s);
    CHECK(st == KILN_OK, "load: %s", kiln_context_message(ctx));
    if (st) return;
    CHECK(kiln_safetensors_count(s) == ND + 2, "count %d", kiln_safetensors_count(s));
    for (int i = 0; i < ND + 2; i++) {
        CHECK(kiln_safetensors_name(s, i) && strcmp(kiln_safetensors_name(s, i), names[i]) == 0, "name %d in order", i);
        CHECK(same_tensor(kiln_safetensors_tensor(s, i), t[i]), "tensor %d (%s) round trip", i, names[i]);
        CHECK(kiln_safetensors_find(s, names[i]) == kiln_safetensors_tensor(s, i), "find '%s'", names[i]);
    }
    CHECK(kiln_safetensors_tensor(s, ND)->ndim == 0 && *(float *)kiln_safetensors_tensor(s, ND)->data == -2.5f, "scalar");
    CHECK(kiln_safetensors_find(s, "nope") == NULL && kiln_safetensors_name(s, -1) == NULL &&
              kiln_safetensors_tensor(s, ND + 2) == NULL, "absent names");
    CHECK(kiln_safetensors_meta_count(s) == 3 && strcmp(kiln_safetensors_meta_key(s, 2), "note") == 0 &&
              strcmp(kiln_safetensors_meta(s, "note"), vals[2]) == 0 && strcmp(kiln_safetensors_meta(s, "epoch"), "3") == 0 &&
              kiln_safetensors_meta(s, "missing") == NULL, "metadata round trip");
    /* restore into existing tensors */
    kiln_tensor *dst = kiln_tensor_new(ctx, KILN_F64, 1, (int64_t[]){3});
    CHECK(kiln_safetensors_copy_to(s, names[3], dst) == KILN_ERR_SHAPE && msg_has(ctx, names[3]) && msg_has(ctx, "f64[3]") && msg_has(ctx, "f64[2]"),
          "copy_to with the wrong shape: %s", kiln_context_message(ctx));
    kiln_tensor_free(dst);
    dst = kiln_tensor_new(ctx, t[3]->dtype, t[3]->ndim, t[3]->dims);
    CHECK(kiln_safetensors_copy_to(s, names[3], dst) == KILN_OK && same_tensor(dst, t[3]), "copy_to");
    CHECK(kiln_safetensors_copy_to(s, "nope", dst) == KILN_ERR_INVALID_ARGUMENT && msg_has(ctx, "no tensor 'nope'"),
          "copy_to a missing name");
    kiln_tensor_free(dst);
    kiln_safetensors_free(s);

    /* the file itself: 8-aligned header, every tensor aligned to its element size */
    FILE *f = fopen(p, "rb");
    unsigned char len8[8];
    CHECK(f && fread(len8, 1, 8, f) == 8, "read back");
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
    char *h = calloc(1, hlen + 1);
    CHECK(fread(h, 1, hlen, f) == hlen && hlen % 8 == 0 && h[0] == '{', "header of %llu bytes", (unsigned long long)hlen);
    int misaligned = 0;
    for (const char *q = strstr(h, "\"data_offsets\":["); q; q = strstr(q + 1, "\"data_offsets\":[")) {
        unsigned long long b = strtoull(q + 16, NULL, 10);
        const char *dq = q;
        while (dq > h && strncmp(dq, "\"dtype\":\"", 9) != 0) dq--;
        size_t es = elem_size(dq + 9);
        misaligned += es == 0 || b % es != 0;
    }
    CHECK(misaligned == 0, "%d tensors start unaligned", misaligned);
    free(h);
    fclose(f);
    remove(p);
    for (int i = 0; i < ND + 2; i++) kiln_tensor_free(t[i]);

    /* zero tensors and no metadata is a valid file too */
    st = kiln_safetensors_save(ctx, p, 0, NULL, NULL, 0, NULL, NULL);
    CHECK(st == KILN_OK && kiln_safetensors_load(ctx, p, &s) == KILN_OK && kiln_safetensors_count(s) == 0 &&
              kiln_safetensors_meta_count(s) == 0, "empty checkpoint: %s", kiln_context_message(ctx));
    kiln_safetensors_free(s);
    remove(p);
}

/* ---------------------------------------------------------- malformed files */

/* Write an 8-byte length (hlen, or the header's length when hlen is -1), the header text,
 * then ndata bytes of data. */
static void write_raw(const char *path, long long hlen, const char *header, size_t ndata) {
    FILE *f = fopen(path, "wb");
    uint64_t n = hlen < 0 ? strlen(header) : (uint64_t)hlen;
    for (int i = 0; i < 8; i++) fputc((int)(n >> (8 * i) & 0xff), f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < ndata; i++) fputc((int)(i & 0xff), f);
    fclose(f);
}

static void test_hand_written(kiln_context *ctx) {
    /* written by hand, not by kiln: spaces, escapes, metadata after the tensors */
    const char *p = tpath("hand.safetensors");
    FILE *f = fopen(p, "wb");
    const char *h = "{ \"caf\\u00e9\" : {\"dtype\":\"F32\", \"shape\":[2], \"data_offsets\":[0,8]},\n"
                    "  \"\\ud83d\\ude00\": {\"data_offsets\":[8,9], \"shape\":[], \"dtype\":\"U8\"},"
                    " \"__metadata__\": {\"k\": \"v\\/w\"} }   ";
    uint64_t n = strlen(h);
    for (int i = 0; i < 8; i++) fputc((int)(n >> (8 * i) & 0xff), f);
    fwrite(h, 1, n, f);
    const float v[2] = {1.0f, -3.0f};
    fwrite(v, sizeof v, 1, f);
    fputc(7, f);
    fclose(f);
    kiln_safetensors *s = NULL;
    kiln_status st = kiln_safetensors_load(ctx, p, &s);
    CHECK(st == KILN_OK, "hand-written file: %s", kiln_context_message(ctx));
    if (!st) {
        const kiln_tensor *a = kiln_safetensors_find(s, "caf\xc3\xa9");
        const kiln_tensor *b = kiln_safetensors_find(s, "\xf0\x9f\x98\x80");
        CHECK(a && a->dtype == KILN_F32 && a->ndim == 1 && ((float *)a->data)[1] == -3.0f, "escaped name, f32 data");
        CHECK(b && b->dtype == KILN_U8 && b->ndim == 0 && *(uint8_t *)b->data == 7, "surrogate-pair name, u8 scalar");
        CHECK(kiln_safetensors_meta(s, "k") && strcmp(kiln_safetensors_meta(s, "k"), "v/w") == 0, "metadata escape");
    }
    kiln_safetensors_free(s);
    remove(p);
}

static void test_malformed(kiln_context *ctx) {
    static const struct {
        const char *header;
        long long hlen;   /* -1: the header's length */
        size_t data;      /* data bytes after the header */
        kiln_status want;
        const char *msg;  /* must appear in the message */
    } cases[] = {
        {"", 4, 0, KILN_ERR_PARSE, "impossible"},                     /* length past the end */
        {"{}", (long long)1 << 62, 0, KILN_ERR_PARSE, "impossible"},
        {"{}", 1, 0, KILN_ERR_PARSE, "impossible"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 4, KILN_ERR_PARSE, "beyond"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 12, KILN_ERR_PARSE, "belong to no tensor"},
        {"{\"a\" {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8, KILN_ERR_PARSE, "expected ':'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", -1, 8, KILN_ERR_PARSE, "expected a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", -1, 8, KILN_ERR_PARSE, "expected ',' or '}'"},
        {"{\"a", -1, 0, KILN_ERR_PARSE, "unterminated"},
        {"{\"a\tb\":{}}", -1, 0, KILN_ERR_PARSE, "control character"},
        {"{\"a\xff\":{}}", -1, 0, KILN_ERR_PARSE, "UTF-8"},
        {"{\"a\xc0\xaf\":{}}", -1, 0, KILN_ERR_PARSE, "UTF-8"}, /* overlong '/' */
        {"{\"a\\x\":{}}", -1, 0, KILN_ERR_PARSE, "bad escape"},
        {"{\"a\\ud800\":{}}", -1, 0, KILN_ERR_PARSE, "surrogate"},
        {"{\"a\\u0000\":{}}", -1, 0, KILN_ERR_PARSE, "\\u0000"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", -1, 8, KILN_ERR_PARSE, "leading zero"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", -1, 8, KILN_ERR_PARSE, "negative"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", -1, 8, KILN_ERR_PARSE, "integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}", -1, 8, KILN_ERR_PARSE, "integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", -1, 8, KILN_ERR_PARSE, "too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1048576,1048576,1048576],\"data_offsets\":[0,4]}}", -1, 4, KILN_ERR_PARSE, "too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", -1, 8, KILN_ERR_PARSE, "after the header"},
        {"[]", -1, 0, KILN_ERR_PARSE, "expected '{'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"foo\":1}}", -1, 8, KILN_ERR_PARSE, "unknown field 'foo'"},
        {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8, KILN_ERR_PARSE, "lacks dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8, KILN_ERR_PARSE, "repeated field"},
        {"{\"a\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8, KILN_ERR_PARSE, "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", -1, 2, KILN_ERR_UNSUPPORTED, "F8_E4M3"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", -1, 1, KILN_ERR_UNSUPPORTED, "dims"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8, KILN_ERR_PARSE, "needs 12 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", -1, 8, KILN_ERR_PARSE, "end before"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, 12, KILN_ERR_PARSE, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", -1, 12, KILN_ERR_PARSE, "belong to no tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8, KILN_ERR_PARSE, "appears twice"},
        {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", -1, 0, KILN_ERR_PARSE, "appears twice"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", -1, 0, KILN_ERR_PARSE, "appears twice"},
        {"{\"__metadata__\":{\"k\":1}}", -1, 0, KILN_ERR_PARSE, "not a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,16]}}", -1, 16, KILN_ERR_PARSE, "expected ']'"},
    };
    const char *p = tpath("bad.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw(p, cases[i].hlen, cases[i].header, cases[i].data);
        kiln_safetensors *s = NULL;
        kiln_status st = kiln_safetensors_load(ctx, p, &s);
        CHECK(st == cases[i].want && !s && msg_has(ctx, cases[i].msg) && msg_has(ctx, p),
              "case %zu (%s): got %s: %s", i, cases[i].header, kiln_status_name(st), kiln_context_message(ctx));
        kiln_safetensors_free(s);
    }
    /* shorter than the length field */
    FILE *f = fopen(p, "wb");
    fwrite("\x02\0\0", 1, 3, f);
    fclose(f);
    kiln_safetensors *s = NULL;
    CHECK(kiln_safetensors_load(ctx, p, &s) == KILN_ERR_PARSE && msg_has(ctx, "too short"), "3-byte file: %s",
          kiln_context_message(ctx));
    remove(p);
    CHECK(kiln_safetensors_load(ctx, p, &s) == KILN_ERR_IO && msg_has(ctx, "cannot open"), "missing file");

    /* bad saves leave nothing behind */
    kiln_tensor *t = kiln_tensor_new(ctx, KILN_F32, 1, (int64_t[]){2});
    const kiln_tensor *tt[2] = {t, t};
    const char *dup[2] = {"w", "w"}, *meta[1] = {"__metadata__"};
    CHECK(kiln_safetensors_save(ctx, p, 2, dup, tt, 0, NULL, NULL) == KILN_ERR_INVALID_ARGUMENT &&
              msg_has(ctx, "'w' appears twice"), "duplicate names on save");
    CHECK(kiln_safetensors_save(ctx, p, 1, meta, tt, 0, NULL, NULL) == KILN_ERR_INVALID_ARGUMENT, "__metadata__ as a name");
    const char *mk[2] = {"k", "k"}, *mv[2] = {"1", "2"};
    CHECK(kiln_safetensors_save(ctx, p, 1, dup, tt, 2, mk, mv) == KILN_ERR_INVALID_ARGUMENT, "duplicate metadata keys");
    const char *bad_utf8[1] = {"w\xff"};
    CHECK(kiln_safetensors_save(ctx, p, 1, bad_utf8, tt, 0, NULL, NULL) == KILN_ERR_INVALID_ARGUMENT, "invalid UTF-8 name");
    kiln_tensor *nhwc = kiln_tensor_new(ctx, KILN_F32, 4, (int64_t[]){1, 2, 1, 1});
    kiln_tensor_set_format(nhwc, KILN_FORMAT_NHWC);
    const kiln_tensor *tn[1] = {nhwc};
    CHECK(kiln_safetensors_save(ctx, p, 1, dup, tn, 0, NULL, NULL) == KILN_ERR_UNSUPPORTED && msg_has(ctx, "NHWC"), "NHWC");
    CHECK(access(p, F_OK) != 0, "no file after failed saves");
    CHECK(kiln_safetensors_save(ctx, tpath("no-such-dir/x.safetensors"), 1, dup, tt, 0, NULL, NULL) == KILN_ERR_IO &&
              msg_has(ctx, "no-such-dir"), "unwritable path: %s", kiln_context_message(ctx));
    kiln_tensor_free(nhwc);
    kiln_tensor_free(t);
}

/* ------------------------------------------------------------- crash safety */

static int hook_fd = -1;

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* In the child: once half the data is written, tell the parent and wait to be killed. */
static void pause_midway(size_t done, size_t total) {
    if (hook_fd >= 0 && done >= total / 2) {
        char c = 'w';
        if (write(hook_fd, &c, 1) != 1) _exit(3);
        for (;;) pause();
    }
}

static kiln_tensor *pattern(kiln_context *ctx, int64_t n, float scale) {
    kiln_tensor *t = kiln_tensor_new(ctx, KILN_F32, 1, &n);
    float *v = t->data;
    for (int64_t i = 0; i < n; i++) v[i] = (float)(i % 100003) * scale;
    return t;
}

/* p must hold the small checkpoint (step "1") or, when big_ok, the big one (step "2"). */
static int check_ckpt(kiln_context *ctx, const char *p, const kiln_tensor *small, const kiln_tensor *big, bool big_ok) {
    kiln_safetensors *s = NULL;
    if (kiln_safetensors_load(ctx, p, &s) != KILN_OK) {
        printf("checkpoint does not load: %s\n", kiln_context_message(ctx));
        return 0;
    }
    const char *step = kiln_safetensors_meta(s, "step");
    const kiln_tensor *w = kiln_safetensors_find(s, "w");
    int ok = step && strcmp(step, "1") == 0 && same_tensor(w, small) ? 1
             : big_ok && step && strcmp(step, "2") == 0 && same_tensor(w, big) ? 2 : 0;
    kiln_safetensors_free(s);
    return ok;
}

static void test_crash(kiln_context *ctx) {
    const char *p = tpath("ckpt.safetensors");
    const char *names[1] = {"w"}, *key[1] = {"step"}, *one[1] = {"1"}, *two[1] = {"2"};
    kiln_tensor *small = pattern(ctx, 1 << 18, 0.5f);   /* 1 MiB */
    kiln_tensor *big = pattern(ctx, 16 << 20, -0.25f);  /* 64 MiB */
    CHECK(kiln_safetensors_save(ctx, p, 1, names, (const kiln_tensor *const *)&small, 1, key, one) == KILN_OK,
          "save the first checkpoint: %s", kiln_context_message(ctx));

    /* deterministic: the child stops halfway through the data and is killed there */
    int fds[2];
    if (pipe(fds) != 0) {
        CHECK(0, "pipe: %s", strerror(errno));
        return;
    }
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        hook_fd = fds[1];
        kiln_safetensors_write_hook = pause_midway;
        kiln_safetensors_save(ctx, p, 1, names, (const kiln_tensor *const *)&big, 1, key, two);
        _exit(2); /* the hook never returns: reaching here is a failure */
    }
    close(fds[1]);
    char c = 0;
    struct pollfd pf = {fds[0], POLLIN, 0};
    bool midway = poll(&pf, 1, 60000) == 1 && read(fds[0], &c, 1) == 1 && c == 'w';
    close(fds[0]);
    CHECK(midway, "the child reached the middle of its save");
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)child);
    struct stat sb;
    CHECK(stat(tmp, &sb) == 0 && sb.st_size > 8 && sb.st_size < (off_t)(64 << 20),
          "a partial temporary file exists (%lld bytes)", (long long)sb.st_size);
    kill(child, SIGKILL);
    int wst = 0;
    waitpid(child, &wst, 0);
    CHECK(WIFSIGNALED(wst) && WTERMSIG(wst) == SIGKILL, "the child died of SIGKILL");
    CHECK(check_ckpt(ctx, p, small, big, false) == 1, "the old checkpoint is intact after the crash");
    /* the partial file is not a loadable checkpoint (its header promises data that is not there) */
    kiln_safetensors *s = NULL;
    CHECK(kiln_safetensors_load(ctx, tmp, &s) == KILN_ERR_PARSE && msg_has(ctx, "beyond"), "partial file refused: %s",
          kiln_context_message(ctx));
    /* the next save to p removes the killed save's temporary (its process is gone) */
    CHECK(kiln_safetensors_save(ctx, p, 1, names, (const kiln_tensor *const *)&small, 1, key, one) == KILN_OK,
          "save after the crash: %s", kiln_context_message(ctx));
    CHECK(!exists(tmp), "the killed save's temporary %s is removed by the next save", tmp);
    remove(tmp);

    /* timing-based: kill a saving child at arbitrary moments (maybe before, during or after
     * the rename); PATH always holds one complete checkpoint */
    for (int rep = 0; rep < 3; rep++) {
        fflush(stdout);
        child = fork();
        if (child == 0) {
            kiln_safetensors_save(ctx, p, 1, names, (const kiln_tensor *const *)&big, 1, key, two);
            _exit(0);
        }
        struct timespec ts = {0, (long)(rep * 15 + 2) * 1000000L};
        nanosleep(&ts, NULL);
        kill(child, SIGKILL);
        waitpid(child, &wst, 0);
        int which = check_ckpt(ctx, p, small, big, true);
        CHECK(which != 0, "after a kill at %d ms the checkpoint is neither the old nor the new one", rep * 15 + 2);
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)child);
        remove(tmp);
        if (which == 2) /* start from the old checkpoint again */
            kiln_safetensors_save(ctx, p, 1, names, (const kiln_tensor *const *)&small, 1, key, one);
    }
    remove(p);
    kiln_tensor_free(small);
    kiln_tensor_free(big);
}

/* ------------------------------------------------------------ stale temporaries */

static void touch(const char *path) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs("partial", f);
        fclose(f);
    }
}

/* A save to PATH removes "PATH.tmp.PID" left by saves killed midway (PID no live process),
 * and nothing else: not a live process's temporary (it may be saving now), nor any file
 * whose name is not exactly PATH's name + ".tmp." + a PID. */
static void test_stale_temps(kiln_context *ctx) {
    char p[1250]; /* tpath's buffers are reused below */
    snprintf(p, sizeof p, "%s", tpath("st.safetensors"));
    /* a dead PID: a child that has exited and been reaped */
    fflush(stdout);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    /* a live one: a child that waits to be killed */
    pid_t live = fork();
    if (live == 0) {
        for (;;) pause();
    }
    char stale[1300], alive[1300], own[1300], zero[1300], other[1300], prefix[1300];
    snprintf(stale, sizeof stale, "%s.tmp.%ld", p, (long)dead);
    snprintf(alive, sizeof alive, "%s.tmp.%ld", p, (long)live);
    snprintf(own, sizeof own, "%s.tmp.%ld", p, (long)getpid());
    snprintf(zero, sizeof zero, "%s.tmp.0%ld", p, (long)dead);
    snprintf(other, sizeof other, "%s/other.safetensors.tmp.%ld", dir, (long)dead);
    snprintf(prefix, sizeof prefix, "%s/xst.safetensors.tmp.%ld", dir, (long)dead);
    const char *kept[] = {alive, zero, other, prefix, tpath("st.safetensors.tmp.12ab"), tpath("st.safetensors.tmp."),
                          tpath("st.safetensors.tmp.99999999999"), tpath("st.safetensors.old")};
    const size_t n_kept = sizeof kept / sizeof kept[0];
    touch(stale);
    touch(own); /* this process's: the save below writes over it and renames it */
    for (size_t i = 0; i < n_kept; i++) touch(kept[i]);
    const char *names[1] = {"w"}, *key[1] = {"step"}, *one[1] = {"1"};
    kiln_tensor *w = pattern(ctx, 1000, 0.5f);
    CHECK(kiln_safetensors_save(ctx, p, 1, names, (const kiln_tensor *const *)&w, 1, key, one) == KILN_OK,
          "save beside stale temporaries: %s", kiln_context_message(ctx));
    CHECK(!exists(stale), "the temporary of dead process %ld is removed", (long)dead);
    CHECK(!exists(own), "this process's temporary became the checkpoint");
    CHECK(check_ckpt(ctx, p, w, NULL, false) == 1, "the checkpoint saved over this process's temporary loads");
    for (size_t i = 0; i < n_kept; i++) CHECK(exists(kept[i]), "%s is kept", kept[i]);
    kill(live, SIGKILL);
    waitpid(live, NULL, 0);
    for (size_t i = 0; i < n_kept; i++) remove(kept[i]);
    remove(stale);
    remove(p);
    kiln_tensor_free(w);
}

int main(int argc, char **argv) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    snprintf(dir, sizeof dir, "%s/test_safetensors.%ld", argc > 1 ? argv[1] : ".", (long)getpid());
    mkdir(dir, 0755);
    test_round_trip(ctx);
    test_hand_written(ctx);
    test_malformed(ctx);
    test_crash(ctx);
    test_stale_temps(ctx);
    kiln_context_free(ctx);
    rmdir(dir);
    printf("%s (%d failures)\n", fails ? "FAILED" : "OK", fails);
    return fails ? 1 : 0;
}
