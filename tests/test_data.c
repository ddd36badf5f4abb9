/* test_data.c — IDX reading (good, damaged and hostile files), the MNIST directory loader
 * and the batch loader (coverage of every sample, reproducibility, worker-count
 * independence, resume, misuse, shutdown mid-epoch).
 *
 *   test_data WORKDIR                     synthetic files written under WORKDIR
 *   test_data --fashion-mnist DIR         the real Fashion-MNIST files (exit 77 if absent)
 */
#include "data/data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

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

static void write_file(const char *path, const void *p, size_t n, bool gz) {
    if (gz) {
        gzFile f = gzopen(path, "wb");
        if (!f || (n && gzwrite(f, p, (unsigned)n) != (int)n)) printf("cannot write %s\n", path);
        if (f) gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        if (!f || (n && fwrite(p, 1, n, f) != n)) printf("cannot write %s\n", path);
        if (f) fclose(f);
    }
}

static unsigned char *read_file(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)sz + 1);
    *n = fread(p, 1, (size_t)sz, f);
    fclose(f);
    return p;
}

/* An IDX image: magic (type, nd), dims, then data bytes as given. Returns its length. */
static size_t idx_bytes(unsigned char *out, int type, int nd, const uint32_t *dims, const void *data, size_t nbytes) {
    size_t k = 0;
    out[k++] = 0;
    out[k++] = 0;
    out[k++] = (unsigned char)type;
    out[k++] = (unsigned char)nd;
    for (int i = 0; i < nd; i++) {
        out[k++] = (unsigned char)(dims[i] >> 24);
        out[k++] = (unsigned char)(dims[i] >> 16);
        out[k++] = (unsigned char)(dims[i] >> 8);
        out[k++] = (unsigned char)dims[i];
    }
    memcpy(out + k, data, nbytes);
    return k + nbytes;
}

static bool msg_has(kiln_context *ctx, const char *a, const char *b) {
    const char *m = kiln_context_message(ctx);
    return strstr(m, a) && (!b || strstr(m, b));
}

/* ---------------------------------------------------------------------- IDX */

static void test_idx(kiln_context *ctx) {
    unsigned char buf[1 << 16];
    kiln_tensor *t = NULL;
    kiln_status st;

    /* labels, gzipped and plain */
    const uint8_t lab[5] = {3, 1, 4, 1, 5};
    size_t n = idx_bytes(buf, 0x08, 1, (uint32_t[]){5}, lab, 5);
    for (int gz = 0; gz < 2; gz++) {
        const char *p = tpath(gz ? "lab.gz" : "lab");
        write_file(p, buf, n, gz);
        st = kiln_idx_load(ctx, p, &t);
        CHECK(st == KILN_OK && t && t->dtype == KILN_U8 && t->ndim == 1 && t->dims[0] == 5 &&
                  memcmp(t->data, lab, 5) == 0, "labels (gz %d): %s", gz, kiln_context_message(ctx));
        kiln_tensor_free(t);
        t = NULL;
    }
    /* images (3,2,2) */
    uint8_t img[12];
    for (int i = 0; i < 12; i++) img[i] = (uint8_t)(i * 20);
    n = idx_bytes(buf, 0x08, 3, (uint32_t[]){3, 2, 2}, img, 12);
    write_file(tpath("img.gz"), buf, n, true);
    st = kiln_idx_load(ctx, tpath("img.gz"), &t);
    CHECK(st == KILN_OK && t->ndim == 3 && t->dims[0] == 3 && t->dims[1] == 2 && t->dims[2] == 2 &&
              ((uint8_t *)t->data)[11] == 220, "images: %s", kiln_context_message(ctx));
    kiln_tensor_free(t);
    t = NULL;
    /* big-endian i16 and f32 elements become host order */
    const unsigned char i16[6] = {0x00, 0x01, 0xFF, 0xFE, 0x01, 0x2C}; /* 1, -2, 300 */
    n = idx_bytes(buf, 0x0B, 1, (uint32_t[]){3}, i16, 6);
    write_file(tpath("i16"), buf, n, false);
    st = kiln_idx_load(ctx, tpath("i16"), &t);
    CHECK(st == KILN_OK && t->dtype == KILN_I16 && ((int16_t *)t->data)[0] == 1 && ((int16_t *)t->data)[1] == -2 &&
              ((int16_t *)t->data)[2] == 300, "i16 elements");
    kiln_tensor_free(t);
    t = NULL;
    const unsigned char f32[4] = {0x3F, 0xC0, 0x00, 0x00}; /* 1.5 */
    n = idx_bytes(buf, 0x0D, 1, (uint32_t[]){1}, f32, 4);
    write_file(tpath("f32.gz"), buf, n, true);
    st = kiln_idx_load(ctx, tpath("f32.gz"), &t);
    CHECK(st == KILN_OK && t->dtype == KILN_F32 && ((float *)t->data)[0] == 1.5f, "f32 element");
    kiln_tensor_free(t);
    t = NULL;

    /* wrong magic: a zip file's */
    static const char zip[] = "PK\x03\x04 not an idx file";
    write_file(tpath("zip"), zip, sizeof zip - 1, false);
    st = kiln_idx_load(ctx, tpath("zip"), &t);
    CHECK(st == KILN_ERR_PARSE && !t && msg_has(ctx, "magic", tpath("zip")), "wrong magic: %s", kiln_context_message(ctx));
    /* zero dims */
    write_file(tpath("nd0"), "\0\0\x08\0", 4, false);
    st = kiln_idx_load(ctx, tpath("nd0"), &t);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "magic", NULL), "zero dims: %s", kiln_context_message(ctx));
    /* empty file, missing file */
    write_file(tpath("empty"), "", 0, false);
    st = kiln_idx_load(ctx, tpath("empty"), &t);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "truncated", "empty"), "empty file: %s", kiln_context_message(ctx));
    st = kiln_idx_load(ctx, tpath("no-such-file.gz"), &t);
    CHECK(st == KILN_ERR_IO && msg_has(ctx, "no-such-file.gz", NULL), "missing file: %s", kiln_context_message(ctx));
    /* truncated dims and data, plain and gzipped */
    n = idx_bytes(buf, 0x08, 3, (uint32_t[]){3, 2, 2}, img, 12);
    write_file(tpath("cutdims"), buf, 9, false);
    st = kiln_idx_load(ctx, tpath("cutdims"), &t);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "truncated IDX dims", NULL), "truncated dims: %s", kiln_context_message(ctx));
    write_file(tpath("cutdata.gz"), buf, n - 5, true);
    st = kiln_idx_load(ctx, tpath("cutdata.gz"), &t);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "truncated IDX data", "expected 12 bytes, got 7"), "truncated data: %s",
          kiln_context_message(ctx));
    /* trailing bytes */
    write_file(tpath("long"), buf, n + 1, false);
    st = kiln_idx_load(ctx, tpath("long"), &t);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "trailing", NULL), "trailing bytes: %s", kiln_context_message(ctx));
    /* dims whose product overflows; dims that do not overflow but promise a terabyte that is
     * not there (must fail as truncated without trying to allocate it) */
    n = idx_bytes(buf, 0x08, 3, (uint32_t[]){0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, img, 12);
    write_file(tpath("overflow.gz"), buf, n, true);
    st = kiln_idx_load(ctx, tpath("overflow.gz"), &t);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "overflow", "4294967295x4294967295"), "dims overflow: %s",
          kiln_context_message(ctx));
    n = idx_bytes(buf, 0x08, 3, (uint32_t[]){0xFFFF, 0xFFFF, 0xFF}, img, 12);
    write_file(tpath("huge.gz"), buf, n, true);
    st = kiln_idx_load(ctx, tpath("huge.gz"), &t);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "truncated", NULL), "huge dims: %s", kiln_context_message(ctx));

    /* damaged gzip: random-ish payload so the deflate stream is long */
    static uint8_t big[40000];
    uint32_t r = 12345;
    for (size_t i = 0; i < sizeof big; i++) {
        r = r * 1103515245u + 12345u;
        big[i] = (uint8_t)((r >> 16) % 7); /* compressible but not trivially */
    }
    static unsigned char file[sizeof big + 64];
    n = idx_bytes(file, 0x08, 3, (uint32_t[]){50, 40, 20}, big, sizeof big);
    write_file(tpath("good.gz"), file, n, true);
    st = kiln_idx_load(ctx, tpath("good.gz"), &t);
    CHECK(st == KILN_OK && memcmp(t->data, big, sizeof big) == 0, "good gz: %s", kiln_context_message(ctx));
    kiln_tensor_free(t);
    t = NULL;
    size_t gzn;
    unsigned char *gzb = read_file(tpath("good.gz"), &gzn);
    CHECK(gzb && gzn > 100, "read back good.gz");
    if (!gzb || gzn <= 100) return;
    /* cut in half */
    write_file(tpath("half.gz"), gzb, gzn / 2, false);
    st = kiln_idx_load(ctx, tpath("half.gz"), &t);
    CHECK(st == KILN_ERR_PARSE && !t && msg_has(ctx, "gzip", tpath("half.gz")), "half gz: %s", kiln_context_message(ctx));
    /* a byte flipped inside the deflate data, at several places */
    int caught = 0;
    for (int k = 1; k <= 8; k++) {
        unsigned char *c = malloc(gzn);
        memcpy(c, gzb, gzn);
        c[gzn * (size_t)k / 10] ^= 0x5A;
        write_file(tpath("flip.gz"), c, gzn, false);
        free(c);
        st = kiln_idx_load(ctx, tpath("flip.gz"), &t);
        caught += st == KILN_ERR_PARSE && !t;
        kiln_tensor_free(t);
        t = NULL;
    }
    CHECK(caught == 8, "flipped bytes in the deflate stream: %d of 8 caught", caught);
    /* CRC of the gzip trailer (the last 8 bytes are CRC32 and length) */
    gzb[gzn - 6] ^= 0x01;
    write_file(tpath("crc.gz"), gzb, gzn, false);
    st = kiln_idx_load(ctx, tpath("crc.gz"), &t);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "damaged gzip", NULL), "bad CRC: %s", kiln_context_message(ctx));
    /* the trailer cut off */
    gzb[gzn - 6] ^= 0x01;
    write_file(tpath("notrailer.gz"), gzb, gzn - 8, false);
    st = kiln_idx_load(ctx, tpath("notrailer.gz"), &t);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "gzip", NULL), "missing trailer: %s", kiln_context_message(ctx));
    free(gzb);
}

/* -------------------------------------------------------------------- MNIST */

static void write_split(const char *split, int n, int n_labels, int bad_label_at) {
    static unsigned char buf[1 << 14];
    uint8_t px[64 * 6], lab[64];
    for (int i = 0; i < n * 6; i++) px[i] = (uint8_t)(i * 37 % 256);
    for (int i = 0; i < n_labels; i++) lab[i] = (uint8_t)(i == bad_label_at ? 10 : (i * 3) % 10);
    char name[64];
    snprintf(name, sizeof name, "mn/%s-images-idx3-ubyte.gz", split);
    size_t k = idx_bytes(buf, 0x08, 3, (uint32_t[]){(uint32_t)n, 2, 3}, px, (size_t)n * 6);
    write_file(tpath(name), buf, k, true);
    snprintf(name, sizeof name, "mn/%s-labels-idx1-ubyte.gz", split);
    k = idx_bytes(buf, 0x08, 1, (uint32_t[]){(uint32_t)n_labels}, lab, (size_t)n_labels);
    write_file(tpath(name), buf, k, true);
}

static void test_mnist(kiln_context *ctx) {
    mkdir(tpath("mn"), 0755);
    write_split("train", 7, 7, -1);
    write_split("t10k", 3, 3, -1);
    kiln_mnist d;
    kiln_status st = kiln_mnist_load(ctx, tpath("mn"), KILN_F32, KILN_FASHION_MNIST_MEAN, KILN_FASHION_MNIST_STD, &d);
    CHECK(st == KILN_OK, "mnist load: %s", kiln_context_message(ctx));
    if (st) return;
    const kiln_tensor *x = d.train_images;
    CHECK(x->dtype == KILN_F32 && x->ndim == 4 && x->dims[0] == 7 && x->dims[1] == 1 && x->dims[2] == 2 &&
              x->dims[3] == 3, "train images shape");
    double maxerr = 0;
    for (int i = 0; i < 7 * 6; i++) {
        double want = ((i * 37 % 256) / 255.0 - 0.2860) / 0.3530;
        maxerr = fmax(maxerr, fabs(((float *)x->data)[i] - want));
    }
    CHECK(maxerr < 1e-6, "normalized pixels off by %g", maxerr);
    CHECK(d.test_labels->dtype == KILN_I64 && d.test_labels->dims[0] == 3 && ((int64_t *)d.test_labels->data)[2] == 6,
          "test labels");
    kiln_mnist_free(&d);
    kiln_mnist_free(&d); /* a zeroed struct is fine */
    st = kiln_mnist_load(ctx, tpath("mn"), KILN_U8, 0, 0, &d);
    CHECK(st == KILN_OK && d.train_images->dtype == KILN_U8 && d.train_images->ndim == 4 &&
              ((uint8_t *)d.train_images->data)[5] == 185, "u8 images: %s", kiln_context_message(ctx));
    kiln_mnist_free(&d);

    write_split("t10k", 3, 4, -1);
    st = kiln_mnist_load(ctx, tpath("mn"), KILN_F32, 0.5f, 0.5f, &d);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "3 images", "4 labels") && !d.train_images, "count mismatch: %s",
          kiln_context_message(ctx));
    write_split("t10k", 3, 3, 1);
    st = kiln_mnist_load(ctx, tpath("mn"), KILN_F32, 0.5f, 0.5f, &d);
    CHECK(st == KILN_ERR_PARSE && msg_has(ctx, "label 1 is 10", "t10k-labels"), "bad label: %s", kiln_context_message(ctx));
    remove(tpath("mn/t10k-labels-idx1-ubyte.gz"));
    st = kiln_mnist_load(ctx, tpath("mn"), KILN_F32, 0.5f, 0.5f, &d);
    CHECK(st == KILN_ERR_IO && msg_has(ctx, "t10k-labels-idx1-ubyte.gz", NULL), "missing file: %s",
          kiln_context_message(ctx));
    remove(tpath("mn/t10k-images-idx3-ubyte.gz"));
    remove(tpath("mn/train-images-idx3-ubyte.gz"));
    remove(tpath("mn/train-labels-idx1-ubyte.gz"));
    rmdir(tpath("mn"));
}

/* ------------------------------------------------------------------- loader */

#define N 103
#define M 5 /* elements per sample */

static float images[N * M];
static uint8_t images8[N * M];
static int64_t labels[N];

/* Every batch of `epochs` epochs: indices (epochs, steps*B) and image bytes. */
typedef struct record {
    int64_t idx[4][N];
    float img[4][N * M];
    int64_t lab[4][N];
    int64_t sizes[4][16];
} record;

static bool run_epochs(kiln_context *ctx, const kiln_tensor *x, const kiln_tensor *y, kiln_loader_options o, int epochs,
                       record *r) {
    kiln_loader *l = NULL;
    if (kiln_loader_create(ctx, x, y, &o, &l) != KILN_OK) {
        printf("loader: %s\n", kiln_context_message(ctx));
        return false;
    }
    memset(r, 0xff, sizeof *r);
    int64_t steps = kiln_loader_steps_per_epoch(l);
    bool ok = true;
    for (int e = 0; e < epochs; e++) {
        int64_t at = 0;
        for (int64_t s = 0; s < steps; s++) {
            const kiln_batch *b = NULL;
            if (kiln_loader_next(l, &b) != KILN_OK || b->epoch != e || b->step != s) {
                ok = false;
                break;
            }
            memcpy(r->idx[e] + at, b->indices, (size_t)b->size * sizeof(int64_t));
            memcpy(r->img[e] + at * M, b->images, (size_t)(b->size * M) * sizeof(float));
            memcpy(r->lab[e] + at, b->labels, (size_t)b->size * sizeof(int64_t));
            r->sizes[e][s] = b->size;
            ok = ok && b->x->dims[0] == b->size && b->y->dims[0] == b->size && b->x->data == b->images;
            at += b->size;
            kiln_loader_release(l, b);
        }
    }
    kiln_loader_free(l);
    return ok;
}

static void test_loader(kiln_context *ctx) {
    for (int i = 0; i < N; i++) {
        labels[i] = i % 10;
        for (int k = 0; k < M; k++) {
            images[i * M + k] = (float)(i * 10 + k);
            images8[i * M + k] = (uint8_t)((i * 7 + k * 31) % 256);
        }
    }
    kiln_tensor *x = NULL, *y = NULL, *x8 = NULL;
    kiln_tensor_wrap(ctx, KILN_F32, 2, (int64_t[]){N, M}, images, &x);
    kiln_tensor_wrap(ctx, KILN_I64, 1, (int64_t[]){N}, labels, &y);
    kiln_tensor_wrap(ctx, KILN_U8, 2, (int64_t[]){N, M}, images8, &x8);
    static record a, b;

    /* every sample exactly once per epoch; last batch partial; data follows the index */
    kiln_loader_options o = kiln_loader_options_default();
    o.batch_size = 10;
    o.seed = 42;
    CHECK(run_epochs(ctx, x, y, o, 3, &a), "3 epochs with 2 workers");
    for (int e = 0; e < 3; e++) {
        int seen[N] = {0}, bad = 0;
        for (int i = 0; i < N; i++) {
            int64_t j = a.idx[e][i];
            if (j < 0 || j >= N) {
                bad++;
                continue;
            }
            seen[j]++;
            bad += a.img[e][i * M + 3] != (float)(j * 10 + 3) || a.lab[e][i] != j % 10;
        }
        int once = 0;
        for (int i = 0; i < N; i++) once += seen[i] == 1;
        CHECK(once == N && bad == 0, "epoch %d: %d of %d samples seen once, %d bad", e, once, N, bad);
        CHECK(a.sizes[e][9] == 10 && a.sizes[e][10] == 3, "epoch %d: last batch holds %lld", e, (long long)a.sizes[e][10]);
    }
    CHECK(memcmp(a.idx[0], a.idx[1], sizeof a.idx[0]) != 0 && memcmp(a.idx[1], a.idx[2], sizeof a.idx[0]) != 0,
          "epochs differ in order");
    int64_t ident = 0;
    for (int i = 0; i < N; i++) ident += a.idx[0][i] == i;
    CHECK(ident < N / 4, "epoch 0 is shuffled (%lld fixed points)", (long long)ident);

    /* same seed: same order, with 0, 1 and 5 workers and any ring size */
    int configs[][2] = {{0, 1}, {1, 1}, {5, 3}, {3, 40}};
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        kiln_loader_options o2 = o;
        o2.workers = configs[c][0];
        o2.slots = configs[c][1];
        CHECK(run_epochs(ctx, x, y, o2, 3, &b), "workers %d slots %d", o2.workers, o2.slots);
        CHECK(memcmp(a.idx, b.idx, sizeof a.idx) == 0 && memcmp(a.img, b.img, sizeof a.img) == 0 &&
                  memcmp(a.lab, b.lab, sizeof a.lab) == 0,
              "workers %d slots %d give other batches than 2 workers", o2.workers, o2.slots);
    }
    /* another seed: another order */
    kiln_loader_options o3 = o;
    o3.seed = 43;
    run_epochs(ctx, x, y, o3, 1, &b);
    CHECK(memcmp(a.idx[0], b.idx[0], sizeof a.idx[0]) != 0, "seed 43 gives seed 42's order");

    /* no shuffle: in order; drop_last */
    o3 = o;
    o3.shuffle = false;
    o3.drop_last = true;
    run_epochs(ctx, x, y, o3, 2, &b);
    ident = 0;
    for (int i = 0; i < 100; i++) ident += b.idx[1][i] == i;
    CHECK(ident == 100 && b.idx[1][100] == -1 && b.sizes[1][9] == 10 && b.sizes[1][10] == -1,
          "no shuffle, drop_last: %lld in place", (long long)ident);

    /* u8 images normalized on the fly, identical with 0 and 2 workers */
    o3 = o;
    o3.mean = 0.25f;
    o3.std = 0.5f;
    o3.workers = 0;
    run_epochs(ctx, x8, y, o3, 2, &a);
    o3.workers = 2;
    run_epochs(ctx, x8, y, o3, 2, &b);
    CHECK(memcmp(a.img, b.img, sizeof a.img) == 0, "u8 batches differ with 0 and 2 workers");
    double maxerr = 0;
    for (int i = 0; i < N; i++) {
        int64_t j = a.idx[1][i];
        for (int k = 0; k < M; k++)
            maxerr = fmax(maxerr, fabs(a.img[1][i * M + k] - (images8[j * M + k] / 255.0 - 0.25) / 0.5));
    }
    CHECK(maxerr < 1e-6, "u8 normalization off by %g", maxerr);

    /* PyTorch's count: 60000 samples in batches of 64 are 938 batches, the last of 32 */
    {
        kiln_tensor *bx = NULL, *by = NULL;
        kiln_tensor_create(ctx, KILN_U8, 2, (int64_t[]){60000, 1}, &bx);
        kiln_tensor_create(ctx, KILN_U8, 1, (int64_t[]){60000}, &by);
        kiln_loader *l = NULL;
        kiln_loader_options o4 = kiln_loader_options_default();
        CHECK(kiln_loader_create(ctx, bx, by, &o4, &l) == KILN_OK, "60000 samples");
        CHECK(kiln_loader_steps_per_epoch(l) == 938, "938 steps, got %lld", (long long)kiln_loader_steps_per_epoch(l));
        kiln_loader_seek(l, 0, 937);
        const kiln_batch *bt = NULL;
        CHECK(kiln_loader_next(l, &bt) == KILN_OK && bt->size == 32 && bt->step == 937, "last batch of 32");
        kiln_loader_release(l, bt);
        CHECK(kiln_loader_next(l, &bt) == KILN_OK && bt->size == 64 && bt->epoch == 1 && bt->step == 0, "then epoch 1");
        kiln_loader_release(l, bt);
        kiln_loader_free(l);
        o4.drop_last = true;
        CHECK(kiln_loader_create(ctx, bx, by, &o4, &l) == KILN_OK && kiln_loader_steps_per_epoch(l) == 937,
              "drop_last: 937 steps");
        kiln_loader_free(l);
        kiln_tensor_free(bx);
        kiln_tensor_free(by);
    }

    /* resume: a loader that seeks to (1, 4) continues exactly as an uninterrupted one */
    run_epochs(ctx, x, y, o, 3, &a);
    {
        kiln_loader *l = NULL;
        kiln_loader_create(ctx, x, y, &o, &l);
        const kiln_batch *bt = NULL;
        kiln_loader_next(l, &bt); /* let the workers run ahead, then jump */
        kiln_loader_release(l, bt);
        CHECK(kiln_loader_seek(l, 1, 4) == KILN_OK, "seek: %s", kiln_context_message(ctx));
        int64_t e, s;
        kiln_loader_position(l, &e, &s);
        CHECK(e == 1 && s == 4, "position after seek");
        int64_t at = 40, mism = 0;
        for (int k = 0; k < 12; k++) {
            kiln_loader_next(l, &bt);
            int ep = (int)bt->epoch;
            if (bt->step == 0) at = 0;
            for (int64_t i = 0; i < bt->size; i++) mism += bt->indices[i] != a.idx[ep][at + i];
            at += bt->size;
            kiln_loader_release(l, bt);
        }
        CHECK(mism == 0, "resumed stream differs in %lld samples", (long long)mism);
        CHECK(kiln_loader_seek(l, 0, 11) == KILN_ERR_INVALID_ARGUMENT && kiln_loader_seek(l, -1, 0) != KILN_OK,
              "seek out of range");

        /* misuse: holding every slot, releasing twice, seeking while holding */
        kiln_loader_free(l);
        kiln_loader_options o5 = o;
        o5.slots = 2;
        kiln_loader_create(ctx, x, y, &o5, &l);
        const kiln_batch *b1 = NULL, *b2 = NULL, *b3 = NULL;
        CHECK(kiln_loader_next(l, &b1) == KILN_OK && kiln_loader_next(l, &b2) == KILN_OK, "two held batches");
        CHECK(kiln_loader_next(l, &b3) == KILN_ERR_INVALID_ARGUMENT && !b3 && msg_has(ctx, "held", NULL),
              "a third with 2 slots: %s", kiln_context_message(ctx));
        CHECK(kiln_loader_seek(l, 0, 0) == KILN_ERR_INVALID_ARGUMENT, "seek while holding");
        CHECK(kiln_loader_release(l, b2) == KILN_OK && kiln_loader_release(l, b2) == KILN_ERR_INVALID_ARGUMENT,
              "double release");
        /* slot of b1 is still held: the next batch (step 2) needs it */
        CHECK(kiln_loader_next(l, &b3) == KILN_ERR_INVALID_ARGUMENT, "next needs a held slot");
        kiln_loader_release(l, b1);
        CHECK(kiln_loader_next(l, &b3) == KILN_OK && b3->step == 2, "then it goes on");
        kiln_loader_release(l, b3);
        kiln_loader_free(l);
    }

    /* holding several batches across epoch boundaries (one step per epoch): the workers
     * must keep running ahead as the consumer enters new epochs, without releases */
    {
        kiln_loader *l = NULL;
        kiln_loader_options o9 = o;
        o9.batch_size = N;
        o9.slots = 8;
        kiln_loader_create(ctx, x, y, &o9, &l);
        const kiln_batch *held[7];
        int got = 0;
        for (int k = 0; k < 7; k++) {
            nanosleep(&(struct timespec){0, 5000000}, NULL); /* let the workers get ahead and wait */
            got += kiln_loader_next(l, &held[k]) == KILN_OK && held[k]->epoch == k;
        }
        CHECK(got == 7, "7 epochs held at once: %d", got);
        for (int k = 0; k < got; k++) kiln_loader_release(l, held[k]);
        kiln_loader_free(l);
    }

    /* caller-provided ring memory (what pinned buffers will use) */
    {
        static float s_img[3][10 * M];
        static int64_t s_lab[3][10];
        float *pi[3] = {s_img[0], s_img[1], s_img[2]};
        int64_t *pl[3] = {s_lab[0], s_lab[1], s_lab[2]};
        kiln_loader_options o6 = o;
        o6.slots = 3;
        o6.slot_images = pi;
        o6.slot_labels = pl;
        kiln_loader *l = NULL;
        CHECK(kiln_loader_create(ctx, x, y, &o6, &l) == KILN_OK, "caller slots");
        int inside = 0;
        for (int k = 0; k < 7; k++) {
            const kiln_batch *bt = NULL;
            kiln_loader_next(l, &bt);
            inside += bt->images == pi[bt->slot] && bt->labels == pl[bt->slot] &&
                      bt->labels[0] == (int64_t)bt->images[0] / 10 % 10;
            kiln_loader_release(l, bt);
        }
        CHECK(inside == 7, "batches live in the caller's buffers (%d of 7)", inside);
        kiln_loader_free(l);
    }

    /* bad arguments */
    {
        kiln_loader *l = NULL;
        kiln_loader_options o7 = o;
        o7.batch_size = 0;
        CHECK(kiln_loader_create(ctx, x, y, &o7, &l) == KILN_ERR_INVALID_ARGUMENT && !l, "batch 0");
        o7 = o;
        o7.batch_size = 200;
        o7.drop_last = true;
        CHECK(kiln_loader_create(ctx, x, y, &o7, &l) == KILN_ERR_INVALID_ARGUMENT && msg_has(ctx, "no batch", NULL),
              "no full batch: %s", kiln_context_message(ctx));
        /* a batch over the data set: refused naming both, before its slots are sized by it */
        o7 = o;
        o7.batch_size = 10000000;
        char want[64];
        snprintf(want, sizeof want, "%lld samples", (long long)N);
        CHECK(kiln_loader_create(ctx, x, y, &o7, &l) == KILN_ERR_INVALID_ARGUMENT && !l &&
                  msg_has(ctx, "batch of 10000000 exceeds", want),
              "batch over the data set: %s", kiln_context_message(ctx));
        o7.batch_size = N + 1;
        CHECK(kiln_loader_create(ctx, x, y, &o7, &l) == KILN_ERR_INVALID_ARGUMENT && !l, "batch N + 1: %s",
              kiln_context_message(ctx));
        o7.batch_size = N;
        CHECK(kiln_loader_create(ctx, x, y, &o7, &l) == KILN_OK && l, "batch N: %s", kiln_context_message(ctx));
        kiln_loader_free(l);
        l = NULL;
        kiln_tensor *short_y = NULL;
        kiln_tensor_wrap(ctx, KILN_I64, 1, (int64_t[]){N - 1}, labels, &short_y);
        CHECK(kiln_loader_create(ctx, x, short_y, &o, &l) == KILN_ERR_SHAPE, "labels shorter than images");
        kiln_tensor_free(short_y);
        CHECK(kiln_loader_create(ctx, y, y, &o, &l) == KILN_ERR_TYPE, "i64 images");
    }

#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
    /* next and release allocate nothing */
    {
        kiln_loader *l = NULL;
        kiln_loader_create(ctx, x8, y, &o3, &l);
        const kiln_batch *bt = NULL;
        kiln_loader_next(l, &bt);
        kiln_loader_release(l, bt);
        struct mallinfo2 m0 = mallinfo2();
        for (int k = 0; k < 100; k++) {
            kiln_loader_next(l, &bt);
            kiln_loader_release(l, bt);
        }
        struct mallinfo2 m1 = mallinfo2();
        CHECK(m0.uordblks == m1.uordblks && m0.hblkhd == m1.hblkhd, "100 batches allocated %zd bytes",
              (ssize_t)(m1.uordblks - m0.uordblks));
        kiln_loader_free(l);
    }
#endif

    /* shutdown mid-epoch with prefetching workers and a held batch (leaks show under ASan) */
    for (int rep = 0; rep < 20; rep++) {
        kiln_loader *l = NULL;
        kiln_loader_options o8 = o;
        o8.workers = 4;
        o8.slots = 8;
        kiln_loader_create(ctx, x8, y, &o8, &l);
        const kiln_batch *bt = NULL;
        for (int k = 0; k < rep % 5; k++) {
            kiln_loader_next(l, &bt);
            kiln_loader_release(l, bt);
        }
        kiln_loader_next(l, &bt);
        kiln_loader_free(l);
    }
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    kiln_tensor_free(x8);
}

/* ------------------------------------------------------ real Fashion-MNIST */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Reference values computed independently with numpy from the same files. */
static int fashion_mnist(kiln_context *ctx, const char *ddir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", ddir);
    FILE *f = fopen(p, "rb");
    if (!f) {
        printf("SKIP: %s is absent (scripts/deps.sh installs dataset-fashion-mnist)\n", p);
        return 77;
    }
    fclose(f);
    double t0 = now();
    kiln_mnist d;
    kiln_status st = kiln_mnist_load(ctx, ddir, KILN_F32, KILN_FASHION_MNIST_MEAN, KILN_FASHION_MNIST_STD, &d);
    double t1 = now();
    CHECK(st == KILN_OK, "load: %s", kiln_context_message(ctx));
    if (st) return 1;
    printf("loaded and normalized in %.3f s\n", t1 - t0);
    CHECK(d.train_images->dims[0] == 60000 && d.train_images->dims[1] == 1 && d.train_images->dims[2] == 28 &&
              d.train_images->dims[3] == 28 && d.test_images->dims[0] == 10000, "shapes");
    /* back to u8 exactly, through the same table */
    float lut[256];
    kiln_u8_normalize_lut(KILN_FASHION_MNIST_MEAN, KILN_FASHION_MNIST_STD, lut);
    const kiln_tensor *sets[2] = {d.train_images, d.test_images};
    const double want_sum[2] = {3431114169.0, 573469082.0};
    for (int s = 0; s < 2; s++) {
        const float *v = sets[s]->data;
        int64_t n = kiln_tensor_numel(sets[s]), bad = 0;
        double sum = 0, mean = 0, sq = 0, first = 0, last = 0;
        for (int64_t i = 0; i < n; i++) {
            long u = lround(((double)v[i] * KILN_FASHION_MNIST_STD + KILN_FASHION_MNIST_MEAN) * 255.0);
            bad += u < 0 || u > 255 || lut[u] != v[i];
            sum += (double)u;
            if (i < 784) first += (double)u;
            if (i >= n - 784) last += (double)u;
            mean += v[i];
            sq += (double)v[i] * v[i];
        }
        mean /= (double)n;
        double sd = sqrt(sq / (double)n - mean * mean);
        CHECK(bad == 0 && sum == want_sum[s], "split %d: pixel sum %.0f (want %.0f), %lld not in the table", s, sum,
              want_sum[s], (long long)bad);
        if (s == 0) {
            CHECK(first == 76247 && last == 16684, "first/last image sums %.0f %.0f", first, last);
            CHECK(fabs(mean - 0.000115) < 1e-5 && fabs(sd - 1.0000687) < 1e-5, "normalized mean %g std %g", mean, sd);
        }
    }
    int64_t hist[10] = {0};
    const int64_t *yl = d.train_labels->data;
    for (int64_t i = 0; i < 60000; i++) hist[yl[i]]++;
    int even = 0;
    for (int c = 0; c < 10; c++) even += hist[c] == 6000;
    CHECK(even == 10, "6000 training images per class");
    const int64_t head[8] = {9, 0, 0, 3, 0, 2, 7, 2}, thead[8] = {9, 2, 1, 1, 6, 1, 4, 6};
    CHECK(memcmp(yl, head, sizeof head) == 0 && memcmp(d.test_labels->data, thead, sizeof thead) == 0, "first labels");

    /* one epoch through the loader as the training example will run it */
    kiln_loader *l = NULL;
    kiln_loader_options o = kiln_loader_options_default();
    o.seed = 1;
    CHECK(kiln_loader_create(ctx, d.train_images, d.train_labels, &o, &l) == KILN_OK, "loader");
    double t2 = now(), checksum = 0;
    int64_t steps = kiln_loader_steps_per_epoch(l), samples = 0, last = 0;
    for (int64_t s = 0; s < steps; s++) {
        const kiln_batch *b = NULL;
        kiln_loader_next(l, &b);
        samples += b->size;
        last = b->size;
        checksum += b->images[0] + (double)b->labels[b->size - 1];
        kiln_loader_release(l, b);
    }
    double t3 = now();
    printf("one epoch of %lld batches (%lld samples) through 2 workers: %.3f s (checksum %.3f)\n", (long long)steps,
           (long long)samples, t3 - t2, checksum);
    CHECK(steps == 938 && samples == 60000 && last == 32, "epoch of 938 batches, last of 32");
    kiln_loader_free(l);
    kiln_mnist_free(&d);
    return 0;
}

int main(int argc, char **argv) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    if (argc == 3 && strcmp(argv[1], "--fashion-mnist") == 0) {
        int rc = fashion_mnist(ctx, argv[2]);
        kiln_context_free(ctx);
        if (rc == 77) return 77;
        printf("%s (%d failures)\n", fails ? "FAILED" : "OK", fails);
        return fails || rc ? 1 : 0;
    }
    snprintf(dir, sizeof dir, "%s/test_data.%ld", argc > 1 ? argv[1] : ".", (long)getpid());
    mkdir(dir, 0755);
    test_idx(ctx);
    test_mnist(ctx);
    test_loader(ctx);
    kiln_context_free(ctx);
    /* remove what test_idx wrote */
    const char *files[] = {"lab", "lab.gz", "img.gz", "i16", "f32.gz", "zip", "nd0", "empty", "cutdims", "cutdata.gz",
                           "long", "overflow.gz", "huge.gz", "good.gz", "half.gz", "flip.gz", "crc.gz", "notrailer.gz"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) remove(tpath(files[i]));
    rmdir(dir);
    printf("%s (%d failures)\n", fails ? "FAILED" : "OK", fails);
    return fails ? 1 : 0;
}
