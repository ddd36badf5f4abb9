/* test_jpeg_gpu.c — the host half of GPU JPEG decoding (issue 12, nvJPEG), on any machine:
 *   - kiln_jpeg_probe: which files the GPU decodes (baseline RGB 4:2:0 / 4:4:4 / 4:2:2) and
 *     which go to the CPU path (grey, progressive, cut short, not a JPEG);
 *   - the crop boxes both decoders take (kiln_rrc_box, kiln_center_box): the same for a
 *     seed, inside the image, torchvision's scale and ratio ranges, the evaluation centre
 *     crop of a 500x375 image by hand;
 *   - the loader's hooks for batches finished elsewhere (attach, fill_at, finish, release,
 *     stats), with a source of its own;
 *   - without nvJPEG (or CUDA): decode GPU is refused naming why, auto decodes on the CPU
 *     exactly as decode CPU does.
 * The GPU side (nvJPEG against libjpeg-turbo, a training epoch): tests/gpu/test_nvjpeg.c. */
#include "data/data.h"
#include "check.h"

#include <jpeglib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fails;
static kiln_context *ctx;
static const char *msg(void) { return kiln_context_message(ctx); }

/* A w x h JPEG in memory: channels 1 or 3, h_samp x v_samp luma sampling, progressive. */
static unsigned char *jpeg_mem(int w, int h, int channels, int hs, int vs, bool progressive, unsigned long *n) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    *n = 0;
    jpeg_mem_dest(&c, &buf, n);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = channels;
    c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    if (channels == 3) {
        c.comp_info[0].h_samp_factor = hs;
        c.comp_info[0].v_samp_factor = vs;
    }
    if (progressive) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    unsigned char *row = malloc((size_t)w * channels);
    while (c.next_scanline < c.image_height) {
        for (int x = 0; x < w * channels; x++) row[x] = (unsigned char)(x * 7 + c.next_scanline * 3);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    return buf;
}

static void test_probe(void) {
    unsigned long n;
    kiln_jpeg_info info;
    struct {
        int c, hs, vs;
        bool prog, ok;
        const char *what;
    } cases[] = {
        {3, 2, 2, false, true, "4:2:0"},  {3, 1, 1, false, true, "4:4:4"},    {3, 2, 1, false, true, "4:2:2"},
        {1, 1, 1, false, false, "grey"},  {3, 2, 2, true, false, "progressive"}, {3, 4, 1, false, false, "4:1:1"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        unsigned char *b = jpeg_mem(61, 45, cases[k].c, cases[k].hs, cases[k].vs, cases[k].prog, &n);
        bool found = kiln_jpeg_probe(b, n, &info);
        CHECK(found && info.w == 61 && info.h == 45 && info.components == cases[k].c && info.gpu_ok == cases[k].ok,
              "probe %s: found %d %dx%d %d components, gpu %d (want %d)", cases[k].what, found, info.w, info.h,
              info.components, info.gpu_ok, cases[k].ok);
        if (k == 0) {
            /* cut short: no EOI, so the CPU path (which names the file) decodes it */
            CHECK(kiln_jpeg_probe(b, n - 40, &info) && !info.gpu_ok, "a JPEG cut short goes to the CPU");
            CHECK(!kiln_jpeg_probe(b, 10, &info), "only its first bytes: no frame header");
        }
        free(b);
    }
    CHECK(!kiln_jpeg_probe((const unsigned char *)"\x89PNG\r\n\x1a\n....", 12, &info), "a PNG is no JPEG");
    CHECK(!kiln_jpeg_probe(NULL, 0, &info), "nothing");
    /* a hostile segment length running past the end */
    const unsigned char bad[] = {0xFF, 0xD8, 0xFF, 0xE0, 0xFF, 0xFF, 0, 0, 0xFF, 0xD9};
    CHECK(!kiln_jpeg_probe(bad, sizeof bad, &info), "a segment past the end");
}

/* field by field: the struct's padding is not part of a box */
static bool same_box(const kiln_crop_box *a, const kiln_crop_box *b) {
    return a->x0 == b->x0 && a->y0 == b->y0 && a->cw == b->cw && a->ch == b->ch && a->flip == b->flip;
}

static void test_boxes(void) {
    /* training: torchvision's RandomResizedCrop, the same box for the same (seed, epoch,
     * index), within the image and the scale / ratio ranges (or the centre fallback) */
    int flips = 0, differ = 0;
    for (int i = 0; i < 400; i++) {
        const int w = 300 + (i * 37) % 400, h = 200 + (i * 53) % 300;
        kiln_crop_box a, b, c;
        kiln_rrc_box(7, 2, i, w, h, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, true, &a);
        kiln_rrc_box(7, 2, i, w, h, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, true, &b);
        kiln_rrc_box(7, 3, i, w, h, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, true, &c);
        CHECK(same_box(&a, &b), "box %d: the same for the same seed", i);
        differ += !same_box(&a, &c);
        flips += a.flip;
        CHECK(a.x0 >= 0 && a.y0 >= 0 && a.cw >= 1 && a.ch >= 1 && a.x0 + a.cw <= w && a.y0 + a.ch <= h,
              "box %d (%d,%d %dx%d) inside %dx%d", i, a.x0, a.y0, a.cw, a.ch, w, h);
        const double area = (double)a.cw * a.ch / ((double)w * h), ratio = (double)a.cw / a.ch;
        CHECK(area >= 0.075 && area <= 1.0 && ratio > 0.70 && ratio < 1.45, "box %d: area %.3f ratio %.3f", i, area,
              ratio);
        kiln_rrc_box(7, 2, i, w, h, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, false, &b);
        CHECK(!b.flip && b.x0 == a.x0 && b.cw == a.cw, "box %d: no flip, the same crop", i);
    }
    CHECK(differ > 390, "another epoch, other boxes (%d of 400 differ)", differ);
    CHECK(flips > 150 && flips < 250, "about half flipped (%d of 400)", flips);
    /* evaluation: 500x375, shorter side to 256 (341x256), centre 224: by hand, in input
     * pixels x0 = round(58 * 500/341) = 85, y0 = round(16 * 375/256) = 23, 328 x 328 */
    kiln_crop_box e;
    CHECK(kiln_center_box(ctx, 500, 375, 256, 224, &e) == KILN_OK && e.x0 == 85 && e.y0 == 23 && e.cw == 328 &&
              e.ch == 328 && !e.flip,
          "centre box of 500x375: %d,%d %dx%d", e.x0, e.y0, e.cw, e.ch);
    CHECK(kiln_center_box(ctx, 100, 80, 0, 64, &e) == KILN_OK && e.x0 == 18 && e.y0 == 8 && e.cw == 64 && e.ch == 64,
          "no resize: the plain centre 64x64 of 100x80: %d,%d %dx%d", e.x0, e.y0, e.cw, e.ch);
    CHECK(kiln_center_box(ctx, 100, 80, 0, 90, &e) == KILN_ERR_SHAPE, "a crop larger than the image: %s", msg());
}

/* ------------------------------------------- the loader's hooks, a source of its own */

typedef struct hooked {
    int attached, slots, finished, released, fill_at_calls;
    int64_t batch;
    kiln_tensor *other; /* what finish points b->x at */
} hooked;

static kiln_status h_attach(void *arg, kiln_context *c, int slots, int64_t batch) {
    (void)c;
    hooked *h = arg;
    h->attached++;
    h->slots = slots;
    h->batch = batch;
    return KILN_OK;
}
static kiln_status h_fill(void *arg, kiln_context *c, int64_t index, int64_t epoch, float *dst, int64_t *label) {
    (void)arg, (void)epoch;
    (void)c;
    dst[0] = (float)index;
    *label = index % 3;
    return KILN_OK;
}
static kiln_status h_fill_at(void *arg, kiln_context *c, int slot, int64_t i, int64_t index, int64_t epoch, float *dst,
                             int64_t *label) {
    hooked *h = arg;
    __atomic_fetch_add(&h->fill_at_calls, 1, __ATOMIC_RELAXED);
    if (slot < 0 || slot >= h->slots || i < 0 || i >= h->batch) return kiln_fail(c, KILN_ERR_INTERNAL, "slot %d i %lld", slot, (long long)i);
    if (index == 13) return kiln_fail(c, KILN_ERR_PARSE, "sample 13 is bad");
    return h_fill(arg, c, index, epoch, dst, label);
}
static kiln_status h_finish(void *arg, kiln_context *c, kiln_batch *b) {
    (void)c;
    hooked *h = arg;
    h->finished++;
    b->x = h->other;
    return KILN_OK;
}
static void h_release(void *arg, const kiln_batch *b) {
    (void)b;
    __atomic_fetch_add(&((hooked *)arg)->released, 1, __ATOMIC_RELAXED);
}
static void h_stats(void *arg, kiln_load_stats *out, bool reset) {
    (void)arg, (void)reset;
    snprintf(out->decoder, sizeof out->decoder, "test");
    out->gpu_images = 5;
}

static void test_hooks(void) {
    hooked h = {0};
    kiln_tensor_create(ctx, KILN_F32, 1, (int64_t[]){1}, &h.other);
    for (int workers = 0; workers < 3; workers += 2) {
        h.finished = h.released = h.attached = 0;
        kiln_loader_source src = {.n = 12, .ndim = 1, .dims = {1}, .arg = &h, .fill = h_fill, .attach = h_attach,
                                  .fill_at = h_fill_at, .finish = h_finish, .release = h_release, .stats = h_stats};
        kiln_loader_options o = kiln_loader_options_default();
        o.batch_size = 4;
        o.workers = workers;
        o.shuffle = false;
        kiln_loader *l = NULL;
        CHECK(kiln_loader_create_source(ctx, &src, &o, &l) == KILN_OK && h.attached == 1 && h.batch == 4 && h.slots >= 2,
              "hooked source (%d workers): %s", workers, msg());
        if (!l) continue;
        for (int q = 0; q < 6; q++) {
            const kiln_batch *b = NULL;
            kiln_status st = kiln_loader_next(l, &b);
            CHECK(st == KILN_OK && b->x == h.other && b->size == 4 && b->images[0] == (float)((q % 3) * 4) &&
                      b->labels[1] == ((q % 3) * 4 + 1) % 3,
                  "batch %d through finish: %s", q, msg());
            if (b) kiln_loader_release(l, b);
        }
        kiln_load_stats ls;
        kiln_loader_stats(l, &ls, true);
        CHECK(h.finished == 6 && h.released == 6 && !strcmp(ls.decoder, "test") && ls.gpu_images == 5,
              "finish %d, release %d, stats '%s'", h.finished, h.released, ls.decoder);
        kiln_loader_free(l);
    }
    /* a fill_at failure stops the stream naming the sample */
    kiln_loader_source src = {.n = 16, .ndim = 1, .dims = {1}, .arg = &h, .fill = h_fill, .attach = h_attach,
                              .fill_at = h_fill_at, .finish = h_finish, .release = h_release};
    kiln_loader_options o = kiln_loader_options_default();
    o.batch_size = 4;
    o.shuffle = false;
    kiln_loader *l = NULL;
    CHECK(kiln_loader_create_source(ctx, &src, &o, &l) == KILN_OK, "hooked source: %s", msg());
    kiln_status st = KILN_OK;
    for (int q = 0; q < 4 && l && !st; q++) {
        const kiln_batch *b = NULL;
        st = kiln_loader_next(l, &b);
        if (!st) kiln_loader_release(l, b);
    }
    CHECK(st == KILN_ERR_PARSE && strstr(msg(), "sample 13"), "a bad sample stops the stream: %d %s", st, msg());
    kiln_loader_free(l);
    kiln_tensor_free(h.other);
}

/* ------------------------------------- without nvJPEG: refused, or the CPU path */

static void test_fallback(const char *root) {
    char d[4200], p[4300];
    snprintf(d, sizeof d, "%s/jpeg_gpu", root);
    mkdir(d, 0755);
    const char *cls[] = {"a", "b"};
    for (int c = 0; c < 2; c++) {
        snprintf(p, sizeof p, "%s/%s", d, cls[c]);
        mkdir(p, 0755);
        for (int i = 0; i < 4; i++) {
            unsigned long n;
            unsigned char *b = jpeg_mem(40 + 3 * i, 30 + c, i == 3 ? 1 : 3, 2, 2, i == 2, &n);
            snprintf(p, sizeof p, "%s/%s/%d.jpg", d, cls[c], i);
            FILE *f = fopen(p, "wb");
            if (f) fwrite(b, 1, n, f), fclose(f);
            free(b);
        }
    }
    kiln_image_list list = {0};
    CHECK(kiln_image_list_load(ctx, d, &list) == KILN_OK && list.n == 8, "list: %s", msg());
    char why[512] = "";
    const bool have = kiln_gpu_decode_available(why, sizeof why);
    printf("GPU decoding here: %s%s\n", have ? "available" : "no: ", have ? "" : why);
    CHECK(have || why[0], "no GPU decoding, and a reason given");
    kiln_image_stream_options io = {.channels = 3, .train = true,
                                    .aug = {.size = 24, .flip = true, .mean = {0.5f, 0.5f, 0.5f}, .std = {0.25f, 0.25f, 0.25f}}};
    kiln_loader_options lo = kiln_loader_options_default();
    lo.batch_size = 4;
    lo.seed = 5;
    kiln_loader *l = NULL;
    if (!have) {
        io.decode = KILN_DECODE_GPU;
        CHECK(kiln_loader_create_images(ctx, &list, &io, &lo, &l) == KILN_ERR_UNSUPPORTED && !l &&
                  strstr(msg(), "no GPU decoding") && strstr(msg(), why),
              "decode GPU without nvJPEG refused naming why: %s", msg());
        io.decode = KILN_DECODE_AUTO;
        kiln_loader *c = NULL;
        CHECK(kiln_loader_create_images(ctx, &list, &io, &lo, &l) == KILN_OK, "auto: %s", msg());
        io.decode = KILN_DECODE_CPU;
        CHECK(kiln_loader_create_images(ctx, &list, &io, &lo, &c) == KILN_OK, "cpu: %s", msg());
        for (int q = 0; q < 4 && l && c; q++) {
            const kiln_batch *a = NULL, *b = NULL;
            CHECK(kiln_loader_next(l, &a) == KILN_OK && kiln_loader_next(c, &b) == KILN_OK, "batch %d: %s", q, msg());
            if (a && b)
                CHECK(kiln_tensor_device(a->x, NULL) == KILN_DEVICE_CPU &&
                          !memcmp(a->images, b->images, sizeof(float) * 4 * 3 * 24 * 24),
                      "auto without nvJPEG: the CPU path's batch %d", q);
            if (a) kiln_loader_release(l, a);
            if (b) kiln_loader_release(c, b);
        }
        kiln_load_stats ls;
        kiln_loader_stats(l, &ls, false);
        CHECK(ls.decoder[0] == 0 && ls.gpu_images == 0, "no decoder named on the CPU path ('%s')", ls.decoder);
        kiln_loader_free(c);
        kiln_loader_free(l);
        l = NULL;
    }
    io.decode = 7;
    CHECK(kiln_loader_create_images(ctx, &list, &io, &lo, &l) == KILN_ERR_INVALID_ARGUMENT && strstr(msg(), "decode"),
          "decode 7 refused: %s", msg());
    io.decode = KILN_DECODE_GPU;
    io.channels = 1;
    CHECK(kiln_loader_create_images(ctx, &list, &io, &lo, &l) == KILN_ERR_UNSUPPORTED && strstr(msg(), "3 channels"),
          "GPU decoding of grey batches refused: %s", msg());
    kiln_image_list_free(&list);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : ".";
    kiln_context_create(&ctx);
    test_probe();
    test_boxes();
    test_hooks();
    test_fallback(root);
    kiln_context_free(ctx);
    if (fails) {
        printf("test_jpeg_gpu: %d check(s) failed\n", fails);
        return 1;
    }
    printf("test_jpeg_gpu: all passed\n");
    return 0;
}
