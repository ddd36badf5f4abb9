/* make_image_folder.c — an MNIST-format data set (Fashion-MNIST's IDX files) written as an
 * image folder, torchvision's ImageFolder layout, one grey 28x28 PNG per image:
 *   OUT/train/<label>/<index>.png and OUT/test/<label>/<index>.png
 * for the first N_TRAIN and N_TEST images of each split (0: all). The tests train from it;
 * a GPU comparison with PyTorch reads the same folder.
 *
 *   make_image_folder MNIST_DIR OUT [N_TRAIN N_TEST]
 */
#include "kiln_tools.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int write_png(const char *path, const uint8_t *px, int w, int h) {
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
    png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(p, info);
    for (int y = 0; y < h; y++) png_write_row(p, (png_const_bytep)(px + (size_t)y * w));
    png_write_end(p, NULL);
    png_destroy_write_struct(&p, &info);
    return fclose(f) != 0;
}

static int split(const char *out, const char *name, const kiln_tensor *images, const kiln_tensor *labels, int64_t n) {
    char d[4096];
    snprintf(d, sizeof d, "%s/%s", out, name);
    mkdir(d, 0755);
    const int64_t total = kiln_tensor_dim(images, 0);
    if (n <= 0 || n > total) n = total;
    const uint8_t *px = kiln_tensor_data(images);
    const int64_t *lab = kiln_tensor_data(labels);
    for (int64_t i = 0; i < n; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%lld", d, (long long)lab[i]);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/%lld/%05lld.png", d, (long long)lab[i], (long long)i);
        if (write_png(p, px + i * 28 * 28, 28, 28)) {
            fprintf(stderr, "make_image_folder: cannot write %s\n", p);
            return 1;
        }
    }
    printf("%s: %lld images\n", d, (long long)n);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: make_image_folder MNIST_DIR OUT [N_TRAIN N_TEST]\n");
        return 2;
    }
    kiln_context *ctx = NULL;
    kiln_mnist m = {0};
    if (kiln_context_create(&ctx)) return 1;
    if (kiln_mnist_load(ctx, argv[1], KILN_U8, 0, 1, &m)) {
        fprintf(stderr, "make_image_folder: %s\n", kiln_context_message(ctx));
        return 1;
    }
    mkdir(argv[2], 0755);
    const int64_t ntr = argc == 5 ? atoll(argv[3]) : 0, nte = argc == 5 ? atoll(argv[4]) : 0;
    int rc = split(argv[2], "train", m.train_images, m.train_labels, ntr) ||
             split(argv[2], "test", m.test_images, m.test_labels, nte);
    kiln_mnist_free(&m);
    kiln_context_free(ctx);
    return rc;
}
