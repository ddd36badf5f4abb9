/* test_images.c — JPEG and PNG decoding and image folders (src/data/images.c) on files this
 * test writes with libjpeg and libpng: grey, RGB, RGBA, palette and 16-bit PNGs, grey and
 * colour JPEGs, against the pixels written (exactly for PNG, within JPEG's loss); a folder
 * data set (classes, order, hidden and other files left out, several sizes with resize and
 * crop); and the bad inputs: a corrupt and a truncated JPEG, a truncated PNG, a file that is
 * neither, an empty class folder, a folder without classes, an image of another size.
 *
 *   test_images WORKDIR
 */
#include "data/data.h" /* kiln_image_decode_scaled */
#include "kiln_tools.h"

#include <stdio.h> /* before jpeglib.h, which uses FILE */

#include <jpeglib.h>
#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fails;
#define CHECK(cond, ...)                                                                                   \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fails++;                                                                                       \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                    \
            printf(__VA_ARGS__);                                                                           \
            printf("\n");                                                                                  \
        }                                                                                                  \
    } while (0)

static kiln_context *ctx;
static const char *msg(void) { return kiln_context_message(ctx); }

/* A test pattern: channel k of pixel (x, y). */
static uint8_t pat(int x, int y, int k, int seed) { return (uint8_t)(x * 29 + y * 13 + k * 71 + seed * 37); }

static void write_png(const char *path, int w, int h, int color_type, int bit_depth, int seed) {
    FILE *f = fopen(path, "wb");
    png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(p);
    png_init_io(p, f);
    png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, bit_depth, color_type, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_color pal[256];
    if (color_type == PNG_COLOR_TYPE_PALETTE) {
        for (int i = 0; i < 256; i++) pal[i] = (png_color){pat(i, 0, 0, seed), pat(i, 0, 1, seed), pat(i, 0, 2, seed)};
        png_set_PLTE(p, info, pal, 256);
    }
    png_write_info(p, info);
    const int ch = color_type == PNG_COLOR_TYPE_GRAY ? 1 : color_type == PNG_COLOR_TYPE_RGB ? 3
                   : color_type == PNG_COLOR_TYPE_RGBA ? 4 : 1;
    const int bps = bit_depth / 8;
    unsigned char *row = malloc((size_t)w * ch * bps);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++)
            for (int k = 0; k < ch; k++) {
                const uint8_t v = color_type == PNG_COLOR_TYPE_PALETTE ? (uint8_t)(x + y * w)
                                  : k == 3                              ? 128
                                                                        : pat(x, y, k, seed);
                if (bps == 2) { /* 16-bit big-endian: v in the high byte, noise below */
                    row[((size_t)x * ch + k) * 2] = v;
                    row[((size_t)x * ch + k) * 2 + 1] = 0x33;
                } else {
                    row[(size_t)x * ch + k] = v;
                }
            }
        png_write_row(p, row);
    }
    png_write_end(p, NULL);
    png_destroy_write_struct(&p, &info);
    free(row);
    fclose(f);
}

static void write_jpeg(const char *path, int w, int h, int channels, int seed) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    FILE *f = fopen(path, "wb");
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = channels;
    c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 100, TRUE);
    jpeg_start_compress(&c, TRUE);
    unsigned char *row = malloc((size_t)w * channels);
    while (c.next_scanline < c.image_height) {
        /* smooth, so quality 100 keeps it within a few levels */
        for (int x = 0; x < w; x++)
            for (int k = 0; k < channels; k++) row[x * channels + k] = (uint8_t)(40 + x * 4 + (int)c.next_scanline * 3 + k * 30 + seed);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    fclose(f);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static kiln_status decode_file(const char *path, int channels, kiln_image *im) {
    size_t n = 0;
    unsigned char *b = slurp(path, &n);
    kiln_status st = kiln_image_decode(ctx, b, n, path, channels, im);
    free(b);
    return st;
}

static void test_decode(const char *dir) {
    char p[8704];
    kiln_image im;
    /* PNG: grey, RGB, RGBA (alpha dropped), 16-bit (cut to the high byte), palette */
    snprintf(p, sizeof p, "%s/grey.png", dir);
    write_png(p, 7, 5, PNG_COLOR_TYPE_GRAY, 8, 1);
    CHECK(decode_file(p, 0, &im) == KILN_OK && im.w == 7 && im.h == 5 && im.c == 1, "grey PNG: %s", msg());
    int bad = 0;
    for (int y = 0; y < 5 && im.pixels; y++)
        for (int x = 0; x < 7; x++) bad += im.pixels[y * 7 + x] != pat(x, y, 0, 1);
    CHECK(bad == 0, "grey PNG pixels exact (%d wrong)", bad);
    kiln_image_free(&im);
    CHECK(decode_file(p, 3, &im) == KILN_OK && im.c == 3 && im.pixels[3 * 8 + 2] == pat(1, 1, 0, 1),
          "grey PNG as RGB: %s", msg());
    kiln_image_free(&im);

    snprintf(p, sizeof p, "%s/rgba.png", dir);
    write_png(p, 6, 4, PNG_COLOR_TYPE_RGBA, 8, 2);
    CHECK(decode_file(p, 0, &im) == KILN_OK && im.c == 3, "RGBA PNG decodes to RGB: %s", msg());
    bad = 0;
    for (int y = 0; y < 4 && im.pixels; y++)
        for (int x = 0; x < 6; x++)
            for (int k = 0; k < 3; k++) bad += im.pixels[(y * 6 + x) * 3 + k] != pat(x, y, k, 2);
    CHECK(bad == 0, "RGBA PNG: alpha dropped, colours exact (%d wrong)", bad);
    kiln_image_free(&im);

    snprintf(p, sizeof p, "%s/rgb16.png", dir);
    write_png(p, 5, 3, PNG_COLOR_TYPE_RGB, 16, 3);
    CHECK(decode_file(p, 0, &im) == KILN_OK && im.c == 3 && im.pixels[0] == pat(0, 0, 0, 3) &&
              im.pixels[(2 * 5 + 4) * 3 + 2] == pat(4, 2, 2, 3),
          "16-bit PNG to 8 bits: %s", msg());
    kiln_image_free(&im);

    snprintf(p, sizeof p, "%s/palette.png", dir);
    write_png(p, 4, 4, PNG_COLOR_TYPE_PALETTE, 8, 4);
    CHECK(decode_file(p, 0, &im) == KILN_OK && im.c == 3 && im.pixels[5 * 3 + 1] == pat(5, 0, 1, 4),
          "palette PNG expanded: %s", msg());
    kiln_image_free(&im);

    /* JPEG: colour and grey, within JPEG's loss at quality 100 */
    snprintf(p, sizeof p, "%s/colour.jpg", dir);
    write_jpeg(p, 16, 8, 3, 0);
    CHECK(decode_file(p, 0, &im) == KILN_OK && im.w == 16 && im.h == 8 && im.c == 3, "RGB JPEG: %s", msg());
    int worst = 0;
    for (int y = 0; y < 8 && im.pixels; y++)
        for (int x = 0; x < 16; x++)
            for (int k = 0; k < 3; k++) {
                const int d = abs(im.pixels[(y * 16 + x) * 3 + k] - (40 + x * 4 + y * 3 + k * 30));
                if (d > worst) worst = d;
            }
    CHECK(worst <= 6, "RGB JPEG within 6 levels (%d)", worst);
    kiln_image_free(&im);
    snprintf(p, sizeof p, "%s/grey.jpg", dir);
    write_jpeg(p, 8, 8, 1, 0);
    CHECK(decode_file(p, 0, &im) == KILN_OK && im.c == 1, "grey JPEG: %s", msg());
    kiln_image_free(&im);
    CHECK(decode_file(p, 3, &im) == KILN_OK && im.c == 3 && im.pixels[0] == im.pixels[1] && im.pixels[1] == im.pixels[2],
          "grey JPEG as RGB: the channels equal: %s", msg());
    kiln_image_free(&im);

    /* bad files */
    size_t n = 0;
    snprintf(p, sizeof p, "%s/colour.jpg", dir);
    unsigned char *b = slurp(p, &n);
    CHECK(kiln_image_decode(ctx, b, n / 2, "half.jpg", 0, &im) == KILN_ERR_PARSE && strstr(msg(), "half.jpg") &&
              !im.pixels,
          "a JPEG cut in its headers: %s", msg());
    {   /* cut in its scan data: libjpeg would fill grey, kiln refuses */
        snprintf(p, sizeof p, "%s/big.jpg", dir);
        write_jpeg(p, 128, 96, 3, 0);
        size_t bn = 0;
        unsigned char *big = slurp(p, &bn);
        CHECK(decode_file(p, 0, &im) == KILN_OK, "big.jpg: %s", msg());
        kiln_image_free(&im);
        CHECK(kiln_image_decode(ctx, big, bn - bn / 4, "cut.jpg", 0, &im) == KILN_ERR_PARSE &&
                  strstr(msg(), "cut.jpg") && strstr(msg(), "truncated") && !im.pixels,
              "a JPEG cut in its scan: %s", msg());
        free(big);
    }
    memset(b + 4, 0x5A, 40); /* the header damaged */
    CHECK(kiln_image_decode(ctx, b, n, "corrupt.jpg", 0, &im) == KILN_ERR_PARSE && strstr(msg(), "corrupt.jpg"),
          "a corrupt JPEG: %s", msg());
    free(b);
    snprintf(p, sizeof p, "%s/rgba.png", dir);
    b = slurp(p, &n);
    CHECK(kiln_image_decode(ctx, b, n - 20, "cut.png", 0, &im) == KILN_ERR_PARSE && strstr(msg(), "cut.png"),
          "a truncated PNG: %s", msg());
    free(b);
    CHECK(kiln_image_decode(ctx, "GIF89a....", 10, "anim.gif", 0, &im) == KILN_ERR_PARSE &&
              strstr(msg(), "neither a JPEG nor a PNG"),
          "a GIF: %s", msg());
    CHECK(kiln_image_decode(ctx, "", 0, "empty.png", 0, &im) == KILN_ERR_PARSE, "an empty file: %s", msg());
    CHECK(kiln_image_decode(ctx, NULL, 0, "x", 2, &im) == KILN_ERR_INVALID_ARGUMENT, "2 channels: %s", msg());
    /* a PNG header claiming 100000 x 100000 is refused before allocating */
    snprintf(p, sizeof p, "%s/grey.png", dir);
    b = slurp(p, &n);
    b[16] = 0, b[17] = 1, b[18] = 0x86, b[19] = 0xA0; /* width 100000 (the CRC now wrong too) */
    CHECK(kiln_image_decode(ctx, b, n, "huge.png", 0, &im) != KILN_OK && !im.pixels, "a huge PNG: %s", msg());
    free(b);

    /* resize and crop: a plain centre crop is exact; resizing keeps a flat image flat */
    kiln_image src = {.w = 6, .h = 4, .c = 1, .pixels = malloc(24)}, out = {0};
    for (int i = 0; i < 24; i++) src.pixels[i] = (uint8_t)i;
    CHECK(kiln_image_resize_crop(ctx, &src, 0, 2, 2, &out) == KILN_OK && out.w == 2 && out.h == 2 &&
              out.pixels[0] == 8 && out.pixels[3] == 15,
          "centre crop 2x2 of 6x4");
    kiln_image_free(&out);
    memset(src.pixels, 77, 24);
    CHECK(kiln_image_resize_crop(ctx, &src, 2, 0, 0, &out) == KILN_OK && out.w == 3 && out.h == 2 &&
              out.pixels[0] == 77 && out.pixels[5] == 77,
          "shorter side 4 -> 2: 6x4 -> 3x2, flat stays flat");
    kiln_image_free(&out);
    CHECK(kiln_image_resize_crop(ctx, &src, 8, 8, 8, &out) == KILN_OK && out.w == 8 && out.h == 8 && out.pixels[63] == 77,
          "upscale and crop");
    kiln_image_free(&out);
    CHECK(kiln_image_resize_crop(ctx, &src, 0, 5, 5, &out) == KILN_ERR_SHAPE, "a crop larger than the image: %s", msg());
    kiln_image_free(&src);
}

static void mkd(const char *dir, const char *sub) {
    char p[8704];
    snprintf(p, sizeof p, "%s/%s", dir, sub);
    mkdir(p, 0755);
}

static void test_folder(const char *root) {
    char d[4352], p[8704];
    snprintf(d, sizeof d, "%s/folder", root);
    mkdir(d, 0755);
    mkd(d, "cat");
    mkd(d, "dog");
    mkd(d, ".cache");
    const char *cats[] = {"b.png", "a.png", "c.PNG"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/cat/%s", d, cats[i]);
        write_png(p, 6, 4, PNG_COLOR_TYPE_GRAY, 8, 10 + i);
    }
    snprintf(p, sizeof p, "%s/dog/x.jpg", d);
    write_jpeg(p, 6, 4, 1, 0);
    snprintf(p, sizeof p, "%s/dog/notes.txt", d);
    spit(p, "not an image", 12);
    snprintf(p, sizeof p, "%s/dog/.hidden.png", d);
    spit(p, "junk", 4);
    kiln_image_folder f;
    kiln_image_folder_options o = {.threads = 3};
    CHECK(kiln_image_folder_load(ctx, d, &o, &f) == KILN_OK, "folder: %s", msg());
    if (f.images) {
        CHECK(f.n_classes == 2 && !strcmp(f.class_names[0], "cat") && !strcmp(f.class_names[1], "dog"),
              "classes cat, dog (hidden folders left out)");
        CHECK(kiln_tensor_dim(f.images, 0) == 4 && kiln_tensor_dim(f.images, 1) == 1 && kiln_tensor_dim(f.images, 2) == 4 &&
                  kiln_tensor_dim(f.images, 3) == 6,
              "u8 (4,1,4,6)");
        const int64_t *l = kiln_tensor_data(f.labels);
        CHECK(l[0] == 0 && l[1] == 0 && l[2] == 0 && l[3] == 1, "labels 0 0 0 1");
        /* name order within a class: a.png (seed 11), b.png (10), c.PNG (12) */
        const uint8_t *px = kiln_tensor_data(f.images);
        CHECK(px[0] == pat(0, 0, 0, 11) && px[24] == pat(0, 0, 0, 10) && px[48 + 7] == pat(1, 1, 0, 12),
              "files in name order, pixels in (C,H,W)");
    }
    kiln_image_folder_free(&f);
    o.channels = 3;
    CHECK(kiln_image_folder_load(ctx, d, &o, &f) == KILN_OK && kiln_tensor_dim(f.images, 1) == 3, "as RGB: %s", msg());
    kiln_image_folder_free(&f);

    /* another size: refused without resize and crop, taken with them */
    snprintf(p, sizeof p, "%s/dog/y.png", d);
    write_png(p, 9, 7, PNG_COLOR_TYPE_RGB, 8, 5);
    o.channels = 0;
    CHECK(kiln_image_folder_load(ctx, d, &o, &f) == KILN_ERR_SHAPE && strstr(msg(), "y.png") && strstr(msg(), "9x7") &&
              !f.images,
          "an image of another size: %s", msg());
    o.resize = 4;
    o.crop = 4;
    CHECK(kiln_image_folder_load(ctx, d, &o, &f) == KILN_OK && kiln_tensor_dim(f.images, 0) == 5 &&
              kiln_tensor_dim(f.images, 2) == 4 && kiln_tensor_dim(f.images, 3) == 4,
          "resize 4, crop 4: %s", msg());
    kiln_image_folder_free(&f);
    o.crop = 0;
    CHECK(kiln_image_folder_load(ctx, d, &o, &f) == KILN_ERR_INVALID_ARGUMENT && strstr(msg(), "crop"),
          "resize without crop: %s", msg());

    /* a damaged image names its path; an empty class; no classes */
    snprintf(p, sizeof p, "%s/dog/z.jpg", d);
    spit(p, "\xFF\xD8\xFF\xE0garbage", 11);
    o = (kiln_image_folder_options){.resize = 4, .crop = 4};
    CHECK(kiln_image_folder_load(ctx, d, &o, &f) == KILN_ERR_PARSE && strstr(msg(), "dog/z.jpg"), "a damaged file: %s",
          msg());
    remove(p);
    mkd(d, "empty");
    CHECK(kiln_image_folder_load(ctx, d, &o, &f) == KILN_ERR_INVALID_ARGUMENT && strstr(msg(), "empty") &&
              strstr(msg(), "no images"),
          "an empty class folder: %s", msg());
    snprintf(p, sizeof p, "%s/dog", d);
    CHECK(kiln_image_folder_load(ctx, p, &o, &f) == KILN_ERR_INVALID_ARGUMENT && strstr(msg(), "no class folders"),
          "a folder of images, not of classes: %s", msg());
    snprintf(p, sizeof p, "%s/nowhere", d);
    CHECK(kiln_image_folder_load(ctx, p, &o, &f) == KILN_ERR_IO && strstr(msg(), "nowhere"), "a missing folder: %s",
          msg());
}


/* ---------------------------------------------------------- streaming folders */

/* Batches of a and b equal, bit for bit, for `steps` steps (labels, indices, pixels). */
static int same_batches(kiln_loader *a, kiln_loader *b, int64_t steps, const char *what) {
    int bad = 0;
    for (int64_t q = 0; q < steps && !bad; q++) {
        const kiln_batch *x = NULL, *y = NULL;
        kiln_status sa = kiln_loader_next(a, &x);
        CHECK(sa == KILN_OK, "%s: batch %lld: %s", what, (long long)q, msg());
        kiln_status sb = sa ? sa : kiln_loader_next(b, &y);
        CHECK(sb == KILN_OK, "%s: batch %lld (streaming): %s", what, (long long)q, msg());
        if (sa || sb) return 1;
        const int64_t m = kiln_tensor_numel(x->x) / (x->size ? x->size : 1);
        if (x->size != y->size || x->epoch != y->epoch || x->step != y->step) bad = 1;
        for (int64_t i = 0; !bad && i < x->size; i++)
            if (x->labels[i] != y->labels[i] || x->indices[i] != y->indices[i]) bad = 1;
        if (!bad && memcmp(x->images, y->images, sizeof(float) * (size_t)(m * x->size))) bad = 1;
        CHECK(!bad, "%s: batch %lld (epoch %lld step %lld) differs", what, (long long)q, (long long)x->epoch,
              (long long)x->step);
        kiln_loader_release(a, x);
        kiln_loader_release(b, y);
    }
    return bad;
}

/* kiln_image_decode_scaled's need: full size, the region x 29..50, y 17..30 */
static void region_need(void *arg, int w, int h, int *nw, int *nh, int region[4]) {
    (void)arg;
    *nw = w, *nh = h;
    region[0] = 29, region[1] = 17, region[2] = 21, region[3] = 13;
}

static void test_stream(const char *root) {
    char d[4352], p[8704];
    snprintf(d, sizeof d, "%s/stream", root);
    mkdir(d, 0755);
    const char *cls[] = {"ant", "bee", "cow"};
    /* the training split: every image 37x37 (the side the in-memory path stores), PNG of
     * every kind and JPEG, grey and colour */
    int n = 0;
    for (int c = 0; c < 3; c++) {
        mkd(d, cls[c]);
        for (int i = 0; i < 7; i++, n++) {
            const int kind = (c * 7 + i) % 5;
            snprintf(p, sizeof p, "%s/%s/%02d.%s", d, cls[c], i, kind < 3 ? "png" : "jpg");
            if (kind == 0) write_png(p, 37, 37, PNG_COLOR_TYPE_RGB, 8, n);
            if (kind == 1) write_png(p, 37, 37, PNG_COLOR_TYPE_GRAY, 8, n);
            if (kind == 2) write_png(p, 37, 37, PNG_COLOR_TYPE_RGBA, 8, n); /* alpha dropped */
            if (kind == 3) write_jpeg(p, 37, 37, 3, n);
            if (kind == 4) write_jpeg(p, 37, 37, 1, n); /* grey: expanded to RGB */
        }
    }
    kiln_image_list list = {0};
    CHECK(kiln_image_list_load(ctx, d, &list) == KILN_OK && list.n == 21 && list.n_classes == 3 &&
              !strcmp(list.class_names[2], "cow") && list.labels[20] == 2 && strstr(list.paths[0], "ant/00.png"),
          "image list: %s", msg());
    kiln_image_folder f = {0};
    kiln_image_folder_options fo = {.channels = 3, .resize = 37, .crop = 37};
    CHECK(kiln_image_folder_load(ctx, d, &fo, &f) == KILN_OK, "folder: %s", msg());
    if (!f.images || list.n != 21) {
        kiln_image_list_free(&list);
        kiln_image_folder_free(&f);
        return;
    }
    kiln_augment_options aug = {.size = 32, .flip = true, .mean = {0.4f, 0.5f, 0.6f}, .std = {0.2f, 0.25f, 0.3f}};
    kiln_tensor *e[2] = {NULL, NULL};
    kiln_loader_options lo = kiln_loader_options_default();
    lo.batch_size = 4;
    lo.seed = 77;
    kiln_image_stream_options io = {.channels = 3, .train = true, .aug = aug};
    /* the training transform: streaming equals the in-memory path (decoded once, then
     * kiln_images_augment per epoch), epoch by epoch, with and without workers, sharded */
    for (int cfg = 0; cfg < 4; cfg++) {
        kiln_loader_options a = lo;
        a.workers = cfg == 0 ? 0 : cfg == 1 ? 1 : 3;
        a.drop_last = cfg == 2;
        if (cfg == 3) a.shard_rank = 1, a.shard_count = 2;
        kiln_loader_options b = a;
        b.workers = cfg == 0 ? 3 : cfg == 1 ? 0 : 2;
        kiln_loader *ls = NULL;
        CHECK(kiln_loader_create_images(ctx, &list, &io, &b, &ls) == KILN_OK, "stream loader: %s", msg());
        for (int64_t ep = 0; ep < 2 && ls; ep++) {
            kiln_tensor_free(e[0]);
            e[0] = NULL;
            kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){21, 3, 32, 32}, &e[0]);
            CHECK(kiln_images_augment(ctx, f.images, &aug, lo.seed, ep, e[0]) == KILN_OK, "augment: %s", msg());
            kiln_loader *lm = NULL;
            CHECK(kiln_loader_create(ctx, e[0], f.labels, &a, &lm) == KILN_OK && kiln_loader_seek(lm, ep, 0) == KILN_OK,
                  "loader: %s", msg());
            char what[64];
            snprintf(what, sizeof what, "train transform, config %d, epoch %lld", cfg, (long long)ep);
            if (lm) same_batches(lm, ls, kiln_loader_steps_per_epoch(lm), what);
            kiln_loader_free(lm);
        }
        kiln_load_stats ss;
        kiln_loader_stats(ls, &ss, false);
        CHECK(ss.samples >= 21 && ss.wait_s >= 0 && ss.busy_s > 0 && ss.workers == b.workers,
              "stats: %lld samples, %g s busy, %g s waited", (long long)ss.samples, ss.busy_s, ss.wait_s);
        kiln_loader_free(ls);
    }
    kiln_image_folder_free(&f);
    kiln_image_list_free(&list);

    /* the evaluation transform, images of several sizes: bit for bit the in-memory path
     * (kiln_image_folder_load with resize and crop, then kiln_images_center) */
    snprintf(d, sizeof d, "%s/stream_eval", root);
    mkdir(d, 0755);
    for (int c = 0; c < 2; c++) {
        mkd(d, cls[c]);
        for (int i = 0; i < 5; i++) {
            snprintf(p, sizeof p, "%s/%s/%d.%s", d, cls[c], i, i & 1 ? "jpg" : "png");
            const int w = 30 + 9 * i + c, h = 60 - 7 * i;
            if (i & 1) write_jpeg(p, w, h, i == 3 ? 1 : 3, i);
            else write_png(p, w, h, i == 2 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, 8, i);
        }
    }
    fo = (kiln_image_folder_options){.channels = 3, .resize = 29, .crop = 24};
    aug.size = 24;
    CHECK(kiln_image_folder_load(ctx, d, &fo, &f) == KILN_OK && kiln_image_list_load(ctx, d, &list) == KILN_OK,
          "eval folder: %s", msg());
    if (f.images) {
        kiln_tensor_free(e[1]);
        e[1] = NULL;
        kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){10, 3, 24, 24}, &e[1]);
        CHECK(kiln_images_center(ctx, f.images, 0, &aug, e[1]) == KILN_OK, "center: %s", msg());
        io = (kiln_image_stream_options){.channels = 3, .resize = 29, .aug = aug};
        kiln_loader_options a = lo;
        a.shuffle = false;
        a.batch_size = 3;
        kiln_loader *lm = NULL, *ls = NULL;
        CHECK(kiln_loader_create(ctx, e[1], f.labels, &a, &lm) == KILN_OK &&
                  kiln_loader_create_images(ctx, &list, &io, &a, &ls) == KILN_OK,
              "eval loaders: %s", msg());
        if (lm && ls) same_batches(lm, ls, 2 * kiln_loader_steps_per_epoch(lm), "evaluation transform");
        kiln_loader_free(lm);
        kiln_loader_free(ls);
    }
    kiln_image_folder_free(&f);
    kiln_image_list_free(&list);

    /* DCT scaling: a large smooth JPEG decoded at a reduced scale gives nearly what the
     * full decode gives, for both transforms (the crop mapped onto the smaller image) */
    snprintf(d, sizeof d, "%s/stream_big", root);
    mkdir(d, 0755);
    mkd(d, "one");
    snprintf(p, sizeof p, "%s/one/big.jpg", d);
    write_jpeg(p, 60, 40, 3, 5);
    CHECK(kiln_image_list_load(ctx, d, &list) == KILN_OK, "big list: %s", msg());
    for (int train = 0; train < 2 && list.n == 1; train++) {
        float out[2][3 * 8 * 8];
        kiln_augment_options ag = {.size = 8, .mean = {0, 0, 0}, .std = {1, 1, 1}, .scale_min = 0.5f};
        for (int dct = 0; dct < 2; dct++) {
            io = (kiln_image_stream_options){.channels = 3, .train = train, .resize = 10, .dct_scale = dct, .aug = ag};
            kiln_loader_options a = lo;
            a.batch_size = 1;
            kiln_loader *ls = NULL;
            const kiln_batch *b = NULL;
            CHECK(kiln_loader_create_images(ctx, &list, &io, &a, &ls) == KILN_OK && kiln_loader_next(ls, &b) == KILN_OK,
                  "big: %s", msg());
            if (b) memcpy(out[dct], b->images, sizeof out[dct]);
            kiln_loader_free(ls);
        }
        double diff = 0, same = 1;
        for (int i = 0; i < 3 * 64; i++) {
            diff += fabs(out[0][i] - out[1][i]) / (3 * 64);
            same = same && out[0][i] == out[1][i];
        }
        /* the image rises 4 levels a pixel along x, 16 an output pixel at this scale: the
         * scaled decode stays within 10 levels (0.04) on average, a crop misplaced by an
         * output pixel would not */
        CHECK(diff < 0.04 && !same, "DCT scaling (%s): mean |diff| %g of full decoding (scaled: %s)",
              train ? "train" : "eval", diff, same ? "no" : "yes");
    }
    kiln_image_list_free(&list);

    /* the decode of a region (the crop alone): the rows and iMCU columns holding it and a
     * pixel more each side, at the offset the frame gives, pixel for pixel the full
     * decode's there, but for the first column (libjpeg's fancy upsampling of chroma takes
     * it for the image's edge: the margin keeps it out of the crop) */
    {
        snprintf(p, sizeof p, "%s/region.jpg", root);
        write_jpeg(p, 64, 48, 3, 9);
        size_t len = 0;
        unsigned char *jb = slurp(p, &len);
        kiln_image full = {0}, part = {0};
        kiln_image_frame fr = {0};
        CHECK(kiln_image_decode(ctx, jb, len, "region.jpg", 3, &full) == KILN_OK, "full: %s", msg());
        CHECK(kiln_image_decode_scaled(ctx, jb, len, "region.jpg", 3, region_need, NULL, &part, &fr) == KILN_OK,
              "region: %s", msg());
        CHECK(fr.full_w == 64 && fr.full_h == 48 && fr.scaled_w == 64 && fr.scaled_h == 48 && fr.x0 < 29 &&
                  fr.y0 < 17 && fr.x0 + part.w >= 29 + 21 && fr.y0 + part.h >= 17 + 13 && part.h < 48 && part.w < 64,
              "region frame: at %d,%d, %dx%d of %dx%d", fr.x0, fr.y0, part.w, part.h, fr.scaled_w, fr.scaled_h);
        int bad = 0;
        for (int y = 0; full.pixels && part.pixels && y < part.h; y++)
            for (int x = 0; x < part.w * 3; x++)
                bad += (x >= 3 || fr.x0 == 0) &&
                       part.pixels[(size_t)y * part.w * 3 + x] != full.pixels[((size_t)(fr.y0 + y) * 64 + fr.x0) * 3 + x];
        CHECK(bad == 0, "region pixels: %d differ from the full decode's", bad);
        kiln_image_free(&full);
        kiln_image_free(&part);
        free(jb);
    }

    /* bad files: the stream stops with the file's error, from a worker or not, at every
     * later next too; an empty class folder is refused when listing */
    snprintf(d, sizeof d, "%s/stream_bad", root);
    mkdir(d, 0755);
    mkd(d, "a");
    mkd(d, "b");
    for (int i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/%s/%d.png", d, i < 3 ? "a" : "b", i);
        write_png(p, 12, 12, PNG_COLOR_TYPE_RGB, 8, i);
    }
    size_t bn = 0;
    snprintf(p, sizeof p, "%s/b/4.png", d);
    unsigned char *bytes = slurp(p, &bn);
    snprintf(p, sizeof p, "%s/b/4.png", d);
    spit(p, bytes, bn / 2); /* truncated */
    free(bytes);
    CHECK(kiln_image_list_load(ctx, d, &list) == KILN_OK, "bad list: %s", msg());
    for (int w = 0; w < 3 && list.n == 6; w += 2) {
        io = (kiln_image_stream_options){.channels = 3, .train = true, .aug = {.size = 8, .std = {1, 1, 1}}};
        kiln_loader_options a = lo;
        a.batch_size = 2;
        a.shuffle = false;
        a.workers = w;
        kiln_loader *ls = NULL;
        CHECK(kiln_loader_create_images(ctx, &list, &io, &a, &ls) == KILN_OK, "bad loader: %s", msg());
        const kiln_batch *b = NULL;
        int ok = 0;
        kiln_status st = KILN_OK;
        while (ls && ok < 10 && !(st = kiln_loader_next(ls, &b))) {
            ok++;
            kiln_loader_release(ls, b);
        }
        CHECK(ok == 2 && st == KILN_ERR_PARSE && strstr(msg(), "b/4.png"),
              "a truncated PNG in the stream (%d workers): %d batches, then %s: %s", w, ok, kiln_status_name(st), msg());
        CHECK(ls && kiln_loader_next(ls, &b) == KILN_ERR_PARSE && strstr(msg(), "b/4.png"), "and again: %s", msg());
        kiln_loader_free(ls);
    }
    kiln_image_list_free(&list);
    mkd(d, "c");
    CHECK(kiln_image_list_load(ctx, d, &list) == KILN_ERR_INVALID_ARGUMENT && strstr(msg(), "/c") && !list.paths,
          "an empty class folder: %s", msg());
    kiln_tensor_free(e[0]);
    kiln_tensor_free(e[1]);
}

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: test_images WORKDIR\n"), 2;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/images_test", argv[1]);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
    mkdir(dir, 0755);
    kiln_context_create(&ctx);
    test_decode(dir);
    test_folder(dir);
    test_stream(dir);
    kiln_context_free(ctx);
    if (fails) return printf("%d check(s) failed\n", fails), 1;
    printf("ok: JPEG and PNG decoding, resize and crop, image folders, streaming image folders\n");
    return 0;
}
