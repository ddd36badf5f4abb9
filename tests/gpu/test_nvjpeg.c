/* test_nvjpeg.c — GPU JPEG decoding (issue 12) on the GPU machine: a folder of generated
 * JPEGs (make_jpeg_folder: ImageNet-like sizes, 4:2:0 colour, grey JPEGs and PNGs among them)
 * streamed twice with the same seed, once decoded by libjpeg-turbo on the CPU (full scale:
 * dct_scale off) and once by nvJPEG on the GPU, for the training transform
 * (RandomResizedCrop, flip) and the evaluation one (resize, centre crop). The batches must
 * hold the same images in the same order with the same labels, and pixels within a few
 * units of 255 (decoders differ in IDCT and chroma upsampling; a wrong box or flip would be
 * tens of units off): mean |diff| <= 3 units, >= 90% of values within 8, no image's mean
 * over 8. Prints the backend, how many images each decoder took and the error budget used.
 * Exit 77 (ctest: skipped, not passed) when nvJPEG cannot be loaded here.
 *
 *   test_nvjpeg DIR                     the comparison (DIR/train/<class>/...)
 *   test_nvjpeg DIR --bench [B] [W]     decode throughput, one epoch each: CPU (W workers, the
 *                                       production DCT scaling) vs GPU, batch B (256, 16)
 * KILN_NVJPEG_LOG=1 adds nvJPEG's per-batch timings. */
#include "data/data.h"
#include "cuda/jpeg_gpu.h"
#include "../check.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fails;
static kiln_context *ctx;
static const char *msg(void) { return kiln_context_message(ctx); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const kiln_augment_options AUG = {.size = 224, .flip = true, .mean = {0.485f, 0.456f, 0.406f},
                                         .std = {0.229f, 0.224f, 0.225f}};

static kiln_loader *make(const kiln_image_list *list, bool train, int decode, bool dct, int64_t batch, int workers) {
    kiln_image_stream_options io = {.channels = 3, .train = train, .resize = 256, .dct_scale = dct, .aug = AUG,
                                    .decode = decode, .device_index = 0};
    kiln_loader_options lo = kiln_loader_options_default();
    lo.batch_size = batch;
    lo.seed = 11;
    lo.shuffle = train;
    lo.workers = workers;
    lo.slots = workers + 2;
    kiln_loader *l = NULL;
    if (kiln_loader_create_images(ctx, list, &io, &lo, &l)) {
        printf("FAIL: loader (%s, %s): %s\n", decode == KILN_DECODE_GPU ? "GPU" : "CPU", train ? "train" : "eval", msg());
        fails++;
        return NULL;
    }
    return l;
}

static void compare(const kiln_image_list *list, bool train) {
    const char *what = train ? "training transform" : "evaluation transform";
    const int64_t B = 32;
    kiln_loader *c = make(list, train, KILN_DECODE_CPU, false, B, 4), *g = make(list, train, KILN_DECODE_GPU, false, B, 4);
    if (!c || !g) {
        kiln_loader_free(c);
        kiln_loader_free(g);
        return;
    }
    const int64_t steps = kiln_loader_steps_per_epoch(c) < 12 ? kiln_loader_steps_per_epoch(c) : 12;
    const int64_t per = 3 * 224 * 224;
    kiln_tensor *host = NULL;
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){B, 3, 224, 224}, &host);
    double sum = 0, worst = 0, worst_img = 0;
    int64_t values = 0, within8 = 0, bad_images = 0, images = 0;
    for (int64_t q = 0; q < steps; q++) {
        const kiln_batch *a = NULL, *b = NULL;
        kiln_status sa = kiln_loader_next(c, &a), sb = kiln_loader_next(g, &b);
        CHECK(sa == KILN_OK && sb == KILN_OK, "%s: batch %lld: %s", what, (long long)q, msg());
        if (sa || sb) break;
        CHECK(kiln_tensor_device(b->x, NULL) == KILN_DEVICE_CUDA, "%s: the GPU batch is on the device", what);
        CHECK(a->size == b->size && !memcmp(a->indices, b->indices, sizeof(int64_t) * (size_t)a->size) &&
                  !memcmp(a->labels, b->labels, sizeof(int64_t) * (size_t)a->size),
              "%s: batch %lld: the same images and labels in the same order", what, (long long)q);
        /* the device batch to the host: a view of host's first b->size images */
        kiln_tensor *view = NULL;
        kiln_tensor_wrap(ctx, KILN_F32, 4, (int64_t[]){b->size, 3, 224, 224}, kiln_tensor_data(host), &view);
        kiln_status cs = kiln_tensor_copy(ctx, b->x, view);
        CHECK(cs == KILN_OK, "%s: copy to the host: %s", what, msg());
        const float *x = kiln_tensor_data(host);
        for (int64_t i = 0; i < b->size && !cs; i++) {
            double img = 0;
            for (int64_t k = 0; k < per; k++) {
                const int ch = (int)(k / (224 * 224));
                const double d = fabs((double)x[i * per + k] - (double)a->images[i * per + k]) * AUG.std[ch] * 255.0;
                if (!(d == d)) { /* NaN */
                    img = 1e9;
                    continue;
                }
                img += d;
                within8 += d <= 8.0;
                if (d > worst) worst = d;
            }
            sum += img;
            values += per;
            img /= (double)per;
            if (img > worst_img) worst_img = img;
            if (img > 8.0) {
                if (bad_images < 5)
                    printf("  %s: %s differs by %.1f units on average\n", what, list->paths[b->indices[i]], img);
                bad_images++;
            }
            images++;
        }
        kiln_tensor_free(view);
        kiln_loader_release(c, a);
        kiln_loader_release(g, b);
    }
    kiln_load_stats ls;
    kiln_loader_stats(g, &ls, false);
    const double mean = values ? sum / (double)values : 1e9, share = values ? (double)within8 / (double)values : 0;
    printf("%s: %lld images, decoder '%s' (%lld on the GPU, %lld on the CPU); |GPU - CPU| in units of 255: mean %.3f "
           "(budget 3: %.0f%% used), max %.1f, %.2f%% within 8 (>= 90%%), worst image mean %.2f (<= 8)\n",
           what, (long long)images, ls.decoder, (long long)ls.gpu_images, (long long)ls.cpu_images, mean, 100 * mean / 3,
           worst, 100 * share, worst_img);
    CHECK(images > 0 && ls.gpu_images > 0, "%s: nvJPEG decoded nothing", what);
    CHECK(mean <= 3.0 && share >= 0.90 && bad_images == 0, "%s: GPU and CPU batches differ (see above)", what);
    kiln_tensor_free(host);
    kiln_loader_free(c);
    kiln_loader_free(g);
}

/* The transform kernel alone, decoder aside: each JPEG of the CPU loader's first batches
 * decoded by libjpeg-turbo, uploaded, and put through kiln_cuda_jpeg_augment with the box
 * drawn for it; the result must be the CPU path's (at most 1 unit of 255: float sums in
 * another nesting). A failure here is the kernel's; one only in compare() is the decoders'. */
static void kernel_alone(const kiln_image_list *list) {
    kiln_loader *c = make(list, true, KILN_DECODE_CPU, false, 16, 2);
    if (!c) return;
    const int S = 224;
    const size_t per = 3 * (size_t)S * S;
    float scale[3], shift[3];
    for (int k = 0; k < 3; k++) scale[k] = 1.f / (255.f * AUG.std[k]), shift[k] = AUG.mean[k] / AUG.std[k];
    float *out_d = NULL, *out_h = malloc(sizeof(float) * per);
    kiln_jpeg_item *item_d = NULL;
    cudaError_t ce = cudaMalloc((void **)&out_d, sizeof(float) * per);
    if (ce == cudaSuccess) ce = cudaMalloc((void **)&item_d, sizeof *item_d);
    CHECK(ce == cudaSuccess && out_h, "kernel: cudaMalloc: %s", cudaGetErrorString(ce));
    double worst = 0;
    int checked = 0, flipped = 0;
    for (int q = 0; q < 2 && ce == cudaSuccess && out_h; q++) {
        const kiln_batch *b = NULL;
        if (kiln_loader_next(c, &b)) {
            CHECK(0, "kernel: batch: %s", msg());
            break;
        }
        for (int64_t i = 0; i < b->size && ce == cudaSuccess; i++) {
            size_t n = 0;
            FILE *f = fopen(list->paths[b->indices[i]], "rb");
            unsigned char *data = NULL;
            if (f) {
                fseek(f, 0, SEEK_END);
                n = (size_t)ftell(f);
                rewind(f);
                data = malloc(n ? n : 1);
                if (data && fread(data, 1, n, f) != n) n = 0;
                fclose(f);
            }
            kiln_jpeg_info info;
            kiln_image im = {0};
            if (!data || !kiln_jpeg_probe(data, n, &info) || !info.gpu_ok ||
                kiln_image_decode(ctx, data, n, "x", 3, &im)) { /* grey, PNG: the CPU path's alone */
                free(data);
                continue;
            }
            free(data);
            kiln_crop_box box;
            kiln_rrc_box(11, b->epoch, b->indices[i], im.w, im.h, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, true, &box);
            unsigned char *src_d = NULL;
            ce = cudaMalloc((void **)&src_d, (size_t)im.w * im.h * 3);
            if (ce == cudaSuccess) ce = cudaMemcpy(src_d, im.pixels, (size_t)im.w * im.h * 3, cudaMemcpyHostToDevice);
            kiln_jpeg_item it = {.src = src_d, .w = im.w, .h = im.h, .x0 = box.x0, .y0 = box.y0, .cw = box.cw, .ch = box.ch,
                                 .flip = box.flip};
            if (ce == cudaSuccess) ce = cudaMemcpy(item_d, &it, sizeof it, cudaMemcpyHostToDevice);
            if (ce == cudaSuccess) ce = (cudaError_t)kiln_cuda_jpeg_augment(NULL, item_d, 1, S, scale, shift, out_d);
            if (ce == cudaSuccess) ce = cudaMemcpy(out_h, out_d, sizeof(float) * per, cudaMemcpyDeviceToHost);
            CHECK(ce == cudaSuccess, "kernel: %s", cudaGetErrorString(ce));
            double w = 0;
            for (size_t k = 0; k < per && ce == cudaSuccess; k++) {
                const double d = fabs((double)out_h[k] - (double)b->images[(size_t)i * per + k]) * AUG.std[k / ((size_t)S * S)] * 255;
                if (!(d <= w)) w = d; /* NaN too */
            }
            if (w > 1.01)
                printf("  kernel: %s box %d,%d %dx%d flip %d of %dx%d: off by up to %.2f units\n",
                       list->paths[b->indices[i]], box.x0, box.y0, box.cw, box.ch, box.flip, im.w, im.h, w);
            if (!(w <= worst)) worst = w;
            checked++;
            flipped += box.flip;
            if (src_d) cudaFree(src_d);
            kiln_image_free(&im);
        }
        kiln_loader_release(c, b);
    }
    printf("kernel alone (libjpeg-turbo's pixels through kiln_cuda_jpeg_augment): %d images (%d flipped), max |GPU - CPU| "
           "%.2f units of 255 (<= 1)\n", checked, flipped, worst);
    CHECK(checked > 0 && worst <= 1.01, "kernel alone: differs from the CPU path's transform");
    if (out_d) cudaFree(out_d);
    if (item_d) cudaFree(item_d);
    free(out_h);
    kiln_loader_free(c);
}

/* One epoch of batches, nothing else: the loader's rate. */
static double epoch_rate(kiln_loader *l, int64_t *n_out) {
    const int64_t steps = kiln_loader_steps_per_epoch(l);
    int64_t n = 0;
    const double t0 = now_s();
    for (int64_t q = 0; q < steps; q++) {
        const kiln_batch *b = NULL;
        if (kiln_loader_next(l, &b)) {
            printf("FAIL: bench batch %lld: %s\n", (long long)q, msg());
            fails++;
            return 0;
        }
        n += b->size;
        kiln_loader_release(l, b);
    }
    *n_out = n;
    return n / (now_s() - t0);
}

static void bench(const kiln_image_list *list, int64_t batch, int workers) {
    for (int gpu = 0; gpu < 2; gpu++) {
        kiln_loader *l = make(list, true, gpu ? KILN_DECODE_GPU : KILN_DECODE_CPU, true, batch, workers);
        if (!l) return;
        int64_t n = 0;
        epoch_rate(l, &n); /* the first epoch: page cache, nvJPEG's buffers */
        const double r = epoch_rate(l, &n);
        kiln_load_stats ls;
        kiln_loader_stats(l, &ls, false);
        printf("bench decode+transform, training transform, batch %lld: %s: %.0f img/s (%lld images; %d workers%s%s)\n",
               (long long)batch, gpu ? "GPU (nvJPEG)" : "CPU (libjpeg-turbo)", r, (long long)n, workers,
               gpu ? ", " : "", gpu ? ls.decoder : "");
        kiln_loader_free(l);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: test_nvjpeg DIR [--bench [BATCH] [WORKERS]]\n"), 2;
    kiln_context_create(&ctx);
    char why[512];
    if (!kiln_gpu_decode_available(why, sizeof why)) {
        printf("test_nvjpeg: skipped: %s\n", why);
        kiln_context_free(ctx);
        return 77;
    }
    char d[4096];
    snprintf(d, sizeof d, "%s/train", argv[1]);
    kiln_image_list list = {0};
    if (kiln_image_list_load(ctx, d, &list)) {
        printf("FAIL: %s\n", msg());
        return 1;
    }
    if (argc > 2 && !strcmp(argv[2], "--bench")) {
        bench(&list, argc > 3 ? atoll(argv[3]) : 256, argc > 4 ? atoi(argv[4]) : 16);
    } else {
        setenv("KILN_NVJPEG_LOG", "1", 0); /* the backend and every batch's timings: diagnosable from one run */
        kernel_alone(&list);
        compare(&list, true);
        compare(&list, false);
    }
    kiln_image_list_free(&list);
    kiln_context_free(ctx);
    if (fails) {
        printf("test_nvjpeg: %d check(s) failed\n", fails);
        return 1;
    }
    printf("test_nvjpeg: all passed\n");
    return 0;
}
