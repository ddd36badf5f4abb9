/* make_jpeg_folder.c — an ImageNet-like image folder of generated pictures, for timing the
 * streaming loader (decode + transform) against data already on the GPU, and for the
 * tests that train from JPEGs:
 *   OUT/train/<class>/<i>.jpg|.png and OUT/test/<class>/<i>.jpg|.png
 * Each class has its own colour and stripe direction (a small CNN learns them), every image
 * its own phase, shade and noise. Sizes vary around W x H (500x375 by default: ImageNet's
 * typical photo) by up to a fifth either way, one image in four portrait; one in ten is a
 * grey JPEG, one in twenty a PNG (every other one of those RGBA: kiln drops the alpha).
 * JPEG quality 90, 4:2:0 (libjpeg's default, as most photos). Deterministic for a seed.
 *
 *   make_jpeg_folder OUT CLASSES TRAIN_PER_CLASS TEST_PER_CLASS [WxH] [THREADS] [SEED]
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <png.h>

typedef struct job {
    const char *out;
    int classes, per[2];
    int w, h;
    uint64_t seed;
    int64_t total, next; /* atomic */
    int failed;          /* atomic */
} job;

static uint64_t mix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int write_jpeg(const char *path, const uint8_t *px, int w, int h, int c) {
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    struct jpeg_compress_struct j;
    struct jpeg_error_mgr e;
    j.err = jpeg_std_error(&e);
    jpeg_create_compress(&j);
    jpeg_stdio_dest(&j, f);
    j.image_width = (JDIMENSION)w;
    j.image_height = (JDIMENSION)h;
    j.input_components = c;
    j.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&j);
    jpeg_set_quality(&j, 90, TRUE);
    jpeg_start_compress(&j, TRUE);
    while (j.next_scanline < j.image_height) {
        JSAMPROW r = (JSAMPROW)(px + (size_t)j.next_scanline * w * c);
        jpeg_write_scanlines(&j, &r, 1);
    }
    jpeg_finish_compress(&j);
    jpeg_destroy_compress(&j);
    return fclose(f) != 0;
}

static int write_png(const char *path, const uint8_t *px, int w, int h, int c) {
    FILE *f = fopen(path, "wb");
    if (!f) return 1;
    png_structp p = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!p || !info || setjmp(png_jmpbuf(p))) {
        png_destroy_write_struct(&p, &info);
        fclose(f);
        return 1;
    }
    png_init_io(p, f);
    png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, 8, c == 4 ? PNG_COLOR_TYPE_RGBA : PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(p, 1);
    png_write_info(p, info);
    for (int y = 0; y < h; y++) png_write_row(p, (png_const_bytep)(px + (size_t)y * w * c));
    png_write_end(p, NULL);
    png_destroy_write_struct(&p, &info);
    return fclose(f) != 0;
}

/* Image k of the whole run (train first, then test; class-major within a split). */
static int make_one(job *jb, int64_t k, uint8_t *buf) {
    const int64_t n_train = (int64_t)jb->classes * jb->per[0];
    const int split = k >= n_train;
    const int64_t r = split ? k - n_train : k;
    const int cls = (int)(r / jb->per[split]), idx = (int)(r % jb->per[split]);
    uint64_t s = mix(jb->seed ^ mix((uint64_t)k));
    const double u1 = (double)(mix(s + 1) >> 11) / 9007199254740992.0, u2 = (double)(mix(s + 2) >> 11) / 9007199254740992.0;
    const unsigned kind = (unsigned)(mix(s + 3) % 20);
    int w = (int)(jb->w * (0.8 + 0.4 * u1)), h = (int)(jb->h * (0.8 + 0.4 * u2));
    if (mix(s + 4) % 4 == 0) { int t = w; w = h; h = t; } /* portrait */
    if (w < 8) w = 8;
    if (h < 8) h = 8;
    const int grey = kind < 2, png = kind >= 18, alpha = kind == 19;
    const int c = grey ? 1 : alpha ? 4 : 3;
    /* the class: a hue and a stripe direction; the image: phase, shade, noise */
    const double hue = 6.283185307 * cls / jb->classes, theta = 3.14159265 * cls / jb->classes;
    const double ct = cos(theta), st = sin(theta), freq = 0.05 + 0.02 * (cls % 3);
    const double phase = 6.283185307 * (double)(mix(s + 5) >> 11) / 9007199254740992.0;
    const double shade = 0.7 + 0.6 * (double)(mix(s + 6) >> 11) / 9007199254740992.0;
    double base[3];
    for (int q = 0; q < 3; q++) base[q] = 128 + 70 * cos(hue + q * 2.0943951);
    uint64_t ns = s;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const double stripe = 40 * sin((x * ct + y * st) * freq + phase);
            uint8_t v[4];
            for (int q = 0; q < 3; q++) {
                const double noise = (double)((ns = mix(ns)) & 31) - 16;
                double t = base[q] * shade + stripe + noise;
                v[q] = (uint8_t)(t < 0 ? 0 : t > 255 ? 255 : t);
            }
            v[3] = (uint8_t)(128 + (x + y) % 128);
            uint8_t *p = buf + ((size_t)y * w + x) * c;
            if (grey) p[0] = (uint8_t)((77 * v[0] + 150 * v[1] + 29 * v[2]) >> 8);
            else memcpy(p, v, (size_t)c);
        }
    char path[4300];
    snprintf(path, sizeof path, "%s/%s/c%04d/%06d.%s", jb->out, split ? "test" : "train", cls, idx, png ? "png" : "jpg");
    return png ? write_png(path, buf, w, h, c) : write_jpeg(path, buf, w, h, c);
}

static void *worker(void *arg) {
    job *jb = arg;
    uint8_t *buf = malloc((size_t)(jb->w * 1.2 + 8) * (size_t)(jb->h * 1.2 + 8) * 4 * 2 + (size_t)(jb->w + jb->h) * 64);
    /* portrait swaps w and h: the same area */
    if (!buf) {
        __atomic_store_n(&jb->failed, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    for (;;) {
        const int64_t k = __atomic_fetch_add(&jb->next, 1, __ATOMIC_RELAXED);
        if (k >= jb->total || __atomic_load_n(&jb->failed, __ATOMIC_RELAXED)) break;
        if (make_one(jb, k, buf)) {
            fprintf(stderr, "make_jpeg_folder: cannot write image %lld under %s\n", (long long)k, jb->out);
            __atomic_store_n(&jb->failed, 1, __ATOMIC_RELAXED);
        }
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 5 || argc > 8) {
        fprintf(stderr, "usage: make_jpeg_folder OUT CLASSES TRAIN_PER_CLASS TEST_PER_CLASS [WxH] [THREADS] [SEED]\n");
        return 2;
    }
    job jb = {.out = argv[1], .classes = atoi(argv[2]), .per = {atoi(argv[3]), atoi(argv[4])}, .w = 500, .h = 375};
    if (argc > 5 && (sscanf(argv[5], "%dx%d", &jb.w, &jb.h) != 2 || jb.w < 8 || jb.h < 8 || jb.w > 8192 || jb.h > 8192)) {
        fprintf(stderr, "make_jpeg_folder: size must be WxH, 8 to 8192 a side\n");
        return 2;
    }
    int threads = argc > 6 ? atoi(argv[6]) : 4;
    jb.seed = argc > 7 ? strtoull(argv[7], NULL, 10) : 1;
    if (jb.classes < 1 || jb.classes > 10000 || jb.per[0] < 1 || jb.per[1] < 1 || threads < 1 || threads > 256) {
        fprintf(stderr, "make_jpeg_folder: CLASSES 1..10000, at least one image per class in each split, THREADS 1..256\n");
        return 2;
    }
    char d[4300];
    mkdir(jb.out, 0755);
    for (int sp = 0; sp < 2; sp++) {
        snprintf(d, sizeof d, "%s/%s", jb.out, sp ? "test" : "train");
        mkdir(d, 0755);
        for (int c = 0; c < jb.classes; c++) {
            snprintf(d, sizeof d, "%s/%s/c%04d", jb.out, sp ? "test" : "train", c);
            mkdir(d, 0755);
        }
    }
    jb.total = (int64_t)jb.classes * (jb.per[0] + jb.per[1]);
    pthread_t th[256];
    int started = 0;
    for (int i = 0; i < threads; i++)
        if (pthread_create(&th[started], NULL, worker, &jb) == 0) started++;
    if (!started) worker(&jb);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    if (jb.failed) return 1;
    printf("%s: %d classes, %d training and %d test images a class, about %dx%d\n", jb.out, jb.classes, jb.per[0],
           jb.per[1], jb.w, jb.h);
    return 0;
}
