/* test_anymodel.c — training any classifier (issue 12), the library parts:
 *   - kiln_model_add_classifier_loss: the loss against PyTorch's CrossEntropyLoss formula
 *     (with and without label smoothing, in double here), a label out of range refused;
 *   - kiln_model_resnet: torchvision's parameter counts and state_dict names and shapes,
 *     a forward pass;
 *   - kiln_cifar10_load on small files written here (and damaged ones);
 *   - kiln_images_augment / kiln_images_center: seeded, the crop and flip exact where
 *     they must be, normalization;
 *   - kiln_model_gradients against central differences on a small CNN;
 * and writes what the CLI tests train: DIR/tiny_cnn.onnx (Conv-BN-Relu-MaxPool-Conv-BN-
 * Relu-GlobalAveragePool-Gemm, 16x16 RGB in, 3 logits out) and DIR/folder (an image folder
 * of 3 colour classes, PNGs of varying sizes), DIR/cifar (a tiny CIFAR-10).
 *
 *   test_anymodel DIR
 */
#include "kiln_models.h"
#include "kiln_tools.h"
#include "check.h"
#include "core/internal.h"

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int fails;

static int write_png_rgb(const char *path, const uint8_t *px, int w, int h) {
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
    png_set_IHDR(p, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(p, info);
    for (int y = 0; y < h; y++) png_write_row(p, (png_const_bytep)(px + (size_t)y * w * 3));
    png_write_end(p, NULL);
    png_destroy_write_struct(&p, &info);
    return fclose(f) != 0;
}

static uint64_t rng_state = 12345;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* class c: channel c bright, the others dark, noise everywhere; sizes 18..29 a side */
static void write_folder(const char *dir) {
    char p[4400];
    mkdir(dir, 0755);
    static const char *splits[2] = {"train", "test"};
    for (int s = 0; s < 2; s++) {
        snprintf(p, sizeof p, "%s/%s", dir, splits[s]);
        mkdir(p, 0755);
        for (int c = 0; c < 3; c++) {
            snprintf(p, sizeof p, "%s/%s/c%d", dir, splits[s], c);
            mkdir(p, 0755);
            for (int i = 0; i < (s ? 10 : 40); i++) {
                const int w = 18 + (int)(rnd() % 12), h = 18 + (int)(rnd() % 12);
                uint8_t *px = malloc((size_t)w * h * 3);
                for (int k = 0; k < w * h; k++)
                    for (int ch = 0; ch < 3; ch++) px[k * 3 + ch] = (uint8_t)((ch == c ? 140 : 20) + rnd() % 100);
                snprintf(p, sizeof p, "%s/%s/c%d/%03d.png", dir, splits[s], c, i);
                CHECK(!write_png_rgb(p, px, w, h), "writing %s", p);
                free(px);
            }
        }
    }
}

static kiln_status init_tensor(kiln_model *m, const char *name, int nd, const int64_t *dims, double scale, double base) {
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_create(m->ctx, KILN_F32, nd, dims, &t);
    if (st) return st;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) ((float *)t->data)[i] = (float)(base + scale * ((int)(rnd() % 2001) - 1000) / 1000.0);
    st = kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
    return st;
}

static kiln_status conv_bn_relu(kiln_model *m, const char *in, const char *p, int64_t cin, int64_t cout, const char *out) {
    char w[64], g[64], b[64], rm[64], rv[64], c[64], bo[64];
    snprintf(w, sizeof w, "%s.conv.weight", p);
    snprintf(g, sizeof g, "%s.bn.weight", p);
    snprintf(b, sizeof b, "%s.bn.bias", p);
    snprintf(rm, sizeof rm, "%s.bn.running_mean", p);
    snprintf(rv, sizeof rv, "%s.bn.running_var", p);
    snprintf(c, sizeof c, "%s:c", p);
    snprintf(bo, sizeof bo, "%s:b", p);
    kiln_node *n = NULL;
    kiln_status st = init_tensor(m, w, 4, (int64_t[]){cout, cin, 3, 3}, sqrt(6.0 / (double)(cin * 9)), 0);
    if (!st) st = init_tensor(m, g, 1, (int64_t[]){cout}, 0.2, 1);
    if (!st) st = init_tensor(m, b, 1, (int64_t[]){cout}, 0.1, 0);
    if (!st) st = init_tensor(m, rm, 1, (int64_t[]){cout}, 0, 0);
    if (!st) st = init_tensor(m, rv, 1, (int64_t[]){cout}, 0, 1);
    if (!st) st = kiln_model_add_node(m, "Conv", c, 2, (const char *[]){in, w}, 1, (const char *[]){c}, &n);
    if (!st) st = kiln_node_set_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, (int64_t[]){3, 3});
    if (!st) st = kiln_model_add_node(m, "BatchNormalization", bo, 5, (const char *[]){c, g, b, rm, rv}, 1, (const char *[]){bo}, NULL);
    if (!st) st = kiln_model_add_node(m, "Relu", out, 1, (const char *[]){bo}, 1, (const char *[]){out}, NULL);
    return st;
}

/* the tiny CNN as torch.onnx.export writes such a model: image (batch,3,16,16) -> logits (batch,3) */
static kiln_model *tiny_cnn(kiln_context *ctx) {
    kiln_model *m = NULL;
    kiln_node *n = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_status st = kiln_model_add_input(m, "image", KILN_F32, 4, (int64_t[]){-1, 3, 16, 16});
    if (!st) st = conv_bn_relu(m, "image", "block1", 3, 8, "r1");
    if (!st) st = kiln_model_add_node(m, "MaxPool", "pool", 1, (const char *[]){"r1"}, 1, (const char *[]){"p1"}, &n);
    if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, (int64_t[]){2, 2});
    if (!st) st = kiln_node_set_ints(n, "strides", 2, (int64_t[]){2, 2});
    if (!st) st = conv_bn_relu(m, "p1", "block2", 8, 16, "r2");
    if (!st) st = kiln_model_add_node(m, "GlobalAveragePool", "gap", 1, (const char *[]){"r2"}, 1, (const char *[]){"g"}, NULL);
    if (!st) st = kiln_model_add_node(m, "Flatten", "flatten", 1, (const char *[]){"g"}, 1, (const char *[]){"f"}, NULL);
    if (!st) st = init_tensor(m, "fc.weight", 2, (int64_t[]){3, 16}, 0.25, 0);
    if (!st) st = init_tensor(m, "fc.bias", 1, (int64_t[]){3}, 0.1, 0);
    if (!st) st = kiln_model_add_node(m, "Gemm", "fc", 3, (const char *[]){"f", "fc.weight", "fc.bias"}, 1, (const char *[]){"logits"}, &n);
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    if (!st) st = kiln_model_add_output(m, "logits");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        printf("FAIL tiny_cnn: %s\n", kiln_context_message(ctx));
        fails++;
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* The loss against PyTorch's CrossEntropyLoss(label_smoothing=eps), in double. */
static void test_loss(kiln_context *ctx) {
    const int N = 4, K = 5;
    kiln_model *m = NULL, *lm = NULL;
    kiln_session *s = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    if (!st) st = kiln_model_add_input(m, "x", KILN_F32, 2, (int64_t[]){N, K});
    if (!st) st = kiln_model_add_node(m, "Identity", "id", 1, (const char *[]){"x"}, 1, (const char *[]){"logits"}, NULL);
    if (!st) st = kiln_model_add_output(m, "logits");
    if (!st) st = kiln_model_finalize(m);
    CHECK(!st, "loss model: %s", kiln_context_message(ctx));
    kiln_tensor *x = NULL, *y = NULL;
    kiln_tensor_create(ctx, KILN_F32, 2, (int64_t[]){N, K}, &x);
    kiln_tensor_create(ctx, KILN_I64, 1, (int64_t[]){N}, &y);
    float *xv = kiln_tensor_data(x);
    int64_t *yv = kiln_tensor_data(y);
    for (int i = 0; i < N * K; i++) xv[i] = (float)((int)(rnd() % 2001) - 1000) / 300.f;
    for (int i = 0; i < N; i++) yv[i] = (i * 3 + 1) % K;
    const float eps_list[2] = {0.f, 0.2f};
    for (int e = 0; e < 2 && !st; e++) {
        const double eps = eps_list[e];
        st = kiln_model_add_classifier_loss(m, "logits", eps_list[e], &lm);
        CHECK(!st, "add_classifier_loss: %s", kiln_context_message(ctx));
        if (st) break;
        CHECK(kiln_model_num_inputs(lm) == 2 && strcmp(kiln_model_input_name(lm, 1), "label") == 0, "inputs x, label");
        CHECK(kiln_model_output_index(lm, "loss") >= 0 && kiln_model_output_index(lm, "logits") >= 0, "outputs");
        const kiln_tensor *out[2] = {NULL, NULL};
        kiln_tensor *in[2] = {x, y};
        int li = kiln_model_output_index(lm, "loss");
        st = kiln_session_create(lm, NULL, &s);
        if (!st) st = kiln_session_run(s, 2, in, 2, out);
        CHECK(!st, "run: %s", kiln_context_message(ctx));
        if (st) break;
        double want = 0;
        for (int i = 0; i < N; i++) {
            double mx = -1e30, sum = 0, all = 0;
            for (int k = 0; k < K; k++) mx = fmax(mx, xv[i * K + k]);
            for (int k = 0; k < K; k++) sum += exp(xv[i * K + k] - mx);
            for (int k = 0; k < K; k++) all += -(xv[i * K + k] - mx - log(sum));
            const double nll = -(xv[i * K + yv[i]] - mx - log(sum));
            want += ((1 - eps) * nll + eps * all / K) / N;
        }
        const double got = ((const float *)kiln_tensor_data(out[li]))[0];
        CHECK(fabs(got - want) <= 1e-6 * fmax(1, fabs(want)), "loss eps %g: kiln %.8f, formula %.8f", eps, got, want);
        /* a label out of range: the run fails naming it */
        yv[2] = K;
        st = kiln_session_run(s, 2, in, 2, out);
        CHECK(st != KILN_OK && strstr(kiln_context_message(ctx), "outside"), "label %d of %d classes: %s", K, K,
              st ? kiln_context_message(ctx) : "accepted");
        yv[2] = (2 * 3 + 1) % K;
        st = KILN_OK;
        kiln_session_free(s);
        s = NULL;
        kiln_model_free(lm);
        lm = NULL;
    }
    CHECK(kiln_model_add_classifier_loss(m, "logits", 1.0f, &lm) != KILN_OK, "label smoothing 1 refused");
    CHECK(kiln_model_add_classifier_loss(m, "nope", 0.f, &lm) != KILN_OK, "an unknown output refused");
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    kiln_session_free(s);
    kiln_model_free(lm);
    kiln_model_free(m);
}

static int64_t params_of(const kiln_model *m, const char *name, int64_t *dims, int *nd) {
    int v = kiln_model_find_value(m, name);
    if (v < 0 || !m->values[v].init) return -1;
    *nd = m->values[v].init->ndim;
    memcpy(dims, m->values[v].init->dims, sizeof(int64_t) * (size_t)*nd);
    return kiln_tensor_numel(m->values[v].init);
}

/* torchvision: sum(p.numel() for p in resnetNN(num_classes=K).parameters()) */
static void test_resnet(kiln_context *ctx) {
    static const struct { int depth; int64_t classes, params; const char *name; int64_t d0, d1, d2, d3; } cases[] = {
        {18, 10, 11181642, "layer2.0.downsample.0.weight", 128, 64, 1, 1},
        {34, 1000, 21797672, "layer3.5.conv2.weight", 256, 256, 3, 3},
        {50, 1000, 25557032, "layer1.0.conv3.weight", 256, 64, 1, 1},
        {101, 1000, 44549160, "layer3.22.bn3.running_var", 1024, 0, 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        kiln_model *m = NULL;
        kiln_status st = kiln_model_resnet(ctx, cases[c].depth, cases[c].classes, -1, 1, 0, &m);
        CHECK(!st, "resnet%d: %s", cases[c].depth, kiln_context_message(ctx));
        if (st) continue;
        int64_t total = 0, bn = 0;
        for (int v = 0; v < m->n_values; v++) {
            if (!m->values[v].init) continue;
            if (strstr(m->values[v].name, "running_")) bn += kiln_tensor_numel(m->values[v].init);
            else total += kiln_tensor_numel(m->values[v].init);
        }
        CHECK(total == cases[c].params, "resnet%d: %lld parameters, torchvision has %lld", cases[c].depth,
              (long long)total, (long long)cases[c].params);
        int64_t dims[8];
        int nd = 0;
        const int64_t n = params_of(m, cases[c].name, dims, &nd);
        CHECK(n > 0 && dims[0] == cases[c].d0 && (nd == 1 || (dims[1] == cases[c].d1 && dims[2] == cases[c].d2 &&
                                                              dims[3] == cases[c].d3)),
              "resnet%d: %s missing or misshapen", cases[c].depth, cases[c].name);
        CHECK(params_of(m, "fc.weight", dims, &nd) == cases[c].classes * (cases[c].depth >= 50 ? 2048 : 512),
              "resnet%d: fc.weight", cases[c].depth);
        CHECK(params_of(m, "bn1.running_mean", dims, &nd) == 64 && params_of(m, "conv1.weight", dims, &nd) == 64 * 3 * 49,
              "resnet%d: stem names", cases[c].depth);
        if (cases[c].depth == 18) {
            /* a forward pass at 64x64, batch 2: logits (2, 10), finite */
            kiln_session *s = NULL;
            kiln_tensor *x = NULL;
            const kiln_tensor *y = NULL;
            kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){2, 3, 64, 64}, &x);
            for (int64_t i = 0; i < kiln_tensor_numel(x); i++) ((float *)kiln_tensor_data(x))[i] = (float)(rnd() % 100) / 50.f - 1;
            st = kiln_session_create(m, NULL, &s);
            if (!st) st = kiln_session_run(s, 1, &x, 1, &y);
            CHECK(!st && kiln_tensor_dim(y, 0) == 2 && kiln_tensor_dim(y, 1) == 10 &&
                      isfinite(((const float *)kiln_tensor_data(y))[7]),
                  "resnet18 forward: %s", st ? kiln_context_message(ctx) : "bad logits");
            kiln_session_free(s);
            kiln_tensor_free(x);
            /* zero_init_residual: the last BN of each block starts at 0 */
            kiln_model *z = NULL;
            CHECK(!kiln_model_resnet(ctx, 18, 10, 32, 1, 1, &z), "resnet18 zero-init");
            int v = z ? kiln_model_find_value(z, "layer1.0.bn2.weight") : -1;
            CHECK(v >= 0 && ((const float *)z->values[v].init->data)[0] == 0.f, "layer1.0.bn2.weight zero");
            kiln_model_free(z);
        }
        kiln_model_free(m);
    }
    kiln_model *m = NULL;
    CHECK(kiln_model_resnet(ctx, 20, 10, -1, 1, 0, &m) != KILN_OK && !m, "resnet20 refused");
}

static void write_bytes(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) printf("cannot write %s\n", path);
    if (f) fclose(f);
}

static void test_cifar(kiln_context *ctx, const char *dir) {
    char p[4400];
    mkdir(dir, 0755);
    /* 30 training records over two files, 9 test records: pixel values from (record, index) */
    uint8_t *rec = malloc(3073 * 30);
    for (int f = 0; f < 3; f++) {
        const int n = f == 2 ? 9 : 15;
        for (int r = 0; r < n; r++) {
            rec[r * 3073] = (uint8_t)((r + f) % 10);
            for (int i = 0; i < 3072; i++) rec[r * 3073 + 1 + i] = (uint8_t)((f == 2 ? 40 : 0) + r * 3 + (f & 1) * 50 + i / 1024 * 60 + i % 7);
        }
        if (f < 2) snprintf(p, sizeof p, "%s/data_batch_%d.bin", dir, f + 1);
        else snprintf(p, sizeof p, "%s/test_batch.bin", dir);
        write_bytes(p, rec, (size_t)n * 3073);
    }
    CHECK(kiln_cifar10_detect(dir), "CIFAR-10 detected in %s", dir);
    kiln_mnist d = {0};
    kiln_status st = kiln_cifar10_load(ctx, dir, &d);
    CHECK(!st, "cifar load: %s", kiln_context_message(ctx));
    if (!st) {
        CHECK(kiln_tensor_dim(d.train_images, 0) == 30 && kiln_tensor_dim(d.train_images, 1) == 3 &&
                  kiln_tensor_dim(d.train_images, 3) == 32 && kiln_tensor_dim(d.test_images, 0) == 9,
              "cifar shapes");
        const uint8_t *px = kiln_tensor_data(d.train_images);
        const int64_t *y = kiln_tensor_data(d.train_labels);
        /* record 3 of data_batch_2 is sample 18: label (3+1)%10, G plane pixel 5 = 3*3+50+60+1029%7 */
        CHECK(y[18] == 4 && px[(size_t)18 * 3072 + 1024 + 5] == 9 + 50 + 60 + 1029 % 7, "cifar record 18: label %lld px %d",
              (long long)y[18], px[(size_t)18 * 3072 + 1024 + 5]);
        CHECK(((const int64_t *)kiln_tensor_data(d.test_labels))[8] == 0, "cifar test label");
    }
    kiln_mnist_free(&d);
    /* damaged: a label of 10, then a truncated record */
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/bad", dir);
    mkdir(bad, 0755);
    rec[3073] = 10;
    snprintf(p, sizeof p, "%s/data_batch_1.bin", bad);
    write_bytes(p, rec, 2 * 3073);
    snprintf(p, sizeof p, "%s/test_batch.bin", bad);
    write_bytes(p, rec, 3073);
    st = kiln_cifar10_load(ctx, bad, &d);
    CHECK(st == KILN_ERR_PARSE && strstr(kiln_context_message(ctx), "record 1 has label 10"), "label 10: %s",
          kiln_context_message(ctx));
    snprintf(p, sizeof p, "%s/data_batch_1.bin", bad);
    write_bytes(p, rec, 3073 + 100);
    st = kiln_cifar10_load(ctx, bad, &d);
    CHECK(st == KILN_ERR_PARSE && strstr(kiln_context_message(ctx), "3173 bytes"), "truncated: %s",
          kiln_context_message(ctx));
    CHECK(!d.train_images, "failed load leaves out zeroed");
    free(rec);
}

static void test_transforms(kiln_context *ctx) {
    const int n = 6, S = 20;
    kiln_tensor *im = NULL, *a = NULL, *b = NULL, *c = NULL;
    kiln_tensor_create(ctx, KILN_U8, 4, (int64_t[]){n, 3, S, S}, &im);
    uint8_t *px = kiln_tensor_data(im);
    for (int64_t i = 0; i < kiln_tensor_numel(im); i++) px[i] = (uint8_t)(rnd() % 256);
    kiln_augment_options o = {.size = 12, .flip = true, .mean = {0.5f, 0.4f, 0.3f}, .std = {0.2f, 0.25f, 0.3f}};
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){n, 3, 12, 12}, &a);
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){n, 3, 12, 12}, &b);
    CHECK(!kiln_images_augment(ctx, im, &o, 7, 3, a) && !kiln_images_augment(ctx, im, &o, 7, 3, b), "augment");
    CHECK(memcmp(kiln_tensor_data(a), kiln_tensor_data(b), sizeof(float) * (size_t)kiln_tensor_numel(a)) == 0,
          "the same (seed, epoch) gives the same images");
    CHECK(!kiln_images_augment(ctx, im, &o, 7, 4, b), "augment epoch 4");
    CHECK(memcmp(kiln_tensor_data(a), kiln_tensor_data(b), sizeof(float) * (size_t)kiln_tensor_numel(a)) != 0,
          "another epoch gives other crops");
    const float lo = (0 - 0.5f) / 0.2f, hi = (1 - 0.5f) / 0.2f; /* channel 0's range is the widest */
    int out_of_range = 0;
    for (int64_t i = 0; i < kiln_tensor_numel(a); i++) {
        const float v = ((float *)kiln_tensor_data(a))[i];
        out_of_range += !(v >= lo - 1e-4f && v <= hi + 1e-4f);
    }
    CHECK(!out_of_range, "%d augmented values outside the normalized range", out_of_range);
    /* the whole image at its own size (scale 1, ratio 1): each output is the image or its
     * mirror, normalized; over 6 images both happen with high probability (2^-5 not) */
    o.size = S;
    o.scale_min = o.scale_max = 1;
    o.ratio_min = o.ratio_max = 1;
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){n, 3, S, S}, &c);
    CHECK(!kiln_images_augment(ctx, im, &o, 1, 0, c), "augment full");
    int flips = 0, bad = 0;
    for (int i = 0; i < n; i++) {
        const float *v = (const float *)kiln_tensor_data(c) + (size_t)i * 3 * S * S;
        const uint8_t *u = px + (size_t)i * 3 * S * S;
        const bool flip = fabsf(v[0] - (u[S - 1] / 255.f - 0.5f) / 0.2f) < 1e-5f && fabsf(v[1] - (u[S - 2] / 255.f - 0.5f) / 0.2f) < 1e-5f;
        flips += flip;
        for (int ch = 0; ch < 3; ch++)
            for (int y = 0; y < S; y++)
                for (int x = 0; x < S; x++) {
                    const int sx = flip ? S - 1 - x : x;
                    const float want = (u[(ch * S + y) * S + sx] / 255.f - o.mean[ch]) / o.std[ch];
                    bad += fabsf(v[(ch * S + y) * S + x] - want) > 1e-5f;
                }
    }
    CHECK(!bad && flips > 0 && flips < n, "full-image crops: %d wrong values, %d of %d flipped", bad, flips, n);
    /* evaluation at the images' own size: exactly normalized pixels */
    CHECK(!kiln_images_center(ctx, im, 0, &o, c), "center");
    bad = 0;
    for (int64_t i = 0; i < kiln_tensor_numel(c); i++) {
        const int ch = (int)(i / (S * S) % 3);
        bad += fabsf(((float *)kiln_tensor_data(c))[i] - (px[i] / 255.f - o.mean[ch]) / o.std[ch]) > 1e-5f;
    }
    CHECK(!bad, "centre crop at the same size: %d values differ", bad);
    o.size = 12;
    CHECK(kiln_images_center(ctx, im, 8, &o, a) == KILN_ERR_SHAPE, "a crop larger than the resized image refused");
    kiln_tensor_free(im);
    kiln_tensor_free(a);
    kiln_tensor_free(b);
    kiln_tensor_free(c);
}

/* kiln_model_gradients against central differences of the loss (batch statistics, so
 * the whole batch moves with each weight) in the tiny CNN */
static void test_gradients(kiln_context *ctx, kiln_model *cnn) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_add_classifier_loss(cnn, "logits", 0.1f, &m);
    CHECK(!st, "loss: %s", kiln_context_message(ctx));
    if (st) return;
    kiln_tensor *x = NULL, *y = NULL;
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){4, 3, 16, 16}, &x);
    kiln_tensor_create(ctx, KILN_I64, 1, (int64_t[]){4}, &y);
    for (int64_t i = 0; i < kiln_tensor_numel(x); i++) ((float *)kiln_tensor_data(x))[i] = (float)((int)(rnd() % 2001) - 1000) / 500.f;
    for (int i = 0; i < 4; i++) ((int64_t *)kiln_tensor_data(y))[i] = i % 3;
    kiln_tensor *in[2] = {x, y};
    kiln_gradients g = {0};
    st = kiln_model_gradients(m, "loss", NULL, 2, in, &g);
    CHECK(!st, "gradients: %s", kiln_context_message(ctx));
    CHECK(g.n == 8, "8 trained tensors (2 x conv weight, BN weight, BN bias; fc weight and bias), got %d", g.n);
    kiln_session *s = NULL;
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    (void)o;
    /* the loss with BN in training mode: a trainer with lr 0 gives it per step */
    static const char *const probe[3] = {"block1.conv.weight", "block2.bn.weight", "fc.bias"};
    for (int pi = 0; pi < 3 && !st; pi++) {
        int gi = -1;
        for (int k = 0; k < g.n; k++)
            if (!strcmp(g.names[k], probe[pi])) gi = k;
        CHECK(gi >= 0, "no gradient for %s", probe[pi]);
        if (gi < 0) continue;
        const int v = kiln_model_find_value(m, probe[pi]);
        float *w = m->values[v].init->data;
        const int64_t j = kiln_tensor_numel(m->values[v].init) / 2;
        const float w0 = w[j], h = 1e-2f;
        double l[2];
        for (int side = 0; side < 2; side++) {
            w[j] = w0 + (side ? h : -h);
            kiln_gradients gg = {0};
            st = kiln_model_gradients(m, "loss", NULL, 2, in, &gg); /* its loss is the forward's */
            l[side] = gg.loss;
            kiln_gradients_free(&gg);
        }
        w[j] = w0;
        const double fd = (l[1] - l[0]) / (2.0 * h), got = ((const float *)kiln_tensor_data(g.values[gi]))[j];
        CHECK(fabs(fd - got) <= 2e-3 + 2e-2 * fabs(fd), "%s[%lld]: gradient %.6g, central difference %.6g", probe[pi],
              (long long)j, got, fd);
    }
    kiln_session_free(s);
    kiln_gradients_free(&g);
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    kiln_model_free(m);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_anymodel DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    mkdir(dir, 0755);
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    char p[4096];
    test_loss(ctx);
    test_resnet(ctx);
    snprintf(p, sizeof p, "%s/cifar", dir);
    test_cifar(ctx, p);
    test_transforms(ctx);
    kiln_model *cnn = tiny_cnn(ctx);
    if (cnn) {
        test_gradients(ctx, cnn);
        snprintf(p, sizeof p, "%s/tiny_cnn.onnx", dir);
        CHECK(!kiln_model_save_onnx(cnn, p), "save %s: %s", p, kiln_context_message(ctx));
    }
    kiln_model_free(cnn);
    /* a classifier without a single weight (GlobalAveragePool -> Flatten): kiln train must
     * refuse it by name */
    kiln_model *np = NULL;
    kiln_status st = kiln_model_create(ctx, &np);
    if (!st) st = kiln_model_add_input(np, "image", KILN_F32, 4, (int64_t[]){-1, 3, 16, 16});
    if (!st) st = kiln_model_add_node(np, "GlobalAveragePool", "gap", 1, (const char *[]){"image"}, 1, (const char *[]){"g"}, NULL);
    if (!st) st = kiln_model_add_node(np, "Flatten", "flatten", 1, (const char *[]){"g"}, 1, (const char *[]){"logits"}, NULL);
    if (!st) st = kiln_model_add_output(np, "logits");
    if (!st) st = kiln_model_finalize(np);
    snprintf(p, sizeof p, "%s/no_weights.onnx", dir);
    if (!st) st = kiln_model_save_onnx(np, p);
    CHECK(!st, "no_weights.onnx: %s", kiln_context_message(ctx));
    kiln_model_free(np);
    snprintf(p, sizeof p, "%s/folder", dir);
    write_folder(p);
    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "all anymodel checks passed");
    return fails ? 1 : 0;
}
