/* test_stochastic_depth.c — a small CNN with a residual block under stochastic depth, as
 * torch.onnx.export writes torchvision's (ConvNeXt, EfficientNet) in training mode, built
 * here without PyTorch:
 *
 *   image (batch,3,16,16) -> Conv-BN-Relu (8) = r1
 *   branch: Conv-BN (8 -> 8) = b
 *   noise: Shape(r1)[0:1] ++ [1,1,1] -> ConstantOfShape -> RandomUniformLike(dtype f32)
 *          -> Less(u, 0.75) -> Cast(f32) -> Div(0.75)            (the per-sample keep mask)
 *   r1 + b * noise -> GlobalAveragePool -> Flatten -> Gemm -> logits (batch,3)
 *
 * Checks, with the library: the graph's draws follow the run seed (two runs with one seed
 * give the same logits, another seed others), autograd builds its gradient (the random
 * op is a constant to it) and kiln_model_gradients matches central differences for the
 * weights under a fixed seed. Then it writes DIR/tiny_sd.onnx for train_stochastic_depth.sh
 * (`kiln train` from the image folder test_anymodel writes), and DIR/tiny_sd_fixed.onnx, the
 * same with the batch fixed at 2 in the graph (the noise's shape a constant), which kiln
 * train refuses naming the node where the batch's shape is lost.
 *
 *   test_stochastic_depth DIR
 */
#include "kiln_models.h"
#include "kiln_tools.h"
#include "check.h"
#include "core/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fails;

static uint64_t rng_state = 777;
static double rnd_unit(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

static kiln_status init_tensor(kiln_model *m, const char *name, int nd, const int64_t *dims, double scale,
                               double base) {
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_create(m->ctx, KILN_F32, nd, dims, &t);
    if (st) return st;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++)
        ((float *)t->data)[i] = (float)(base + scale * (2 * rnd_unit() - 1));
    st = kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
    return st;
}

static kiln_status const_tensor(kiln_model *m, const char *name, kiln_dtype dt, int nd, const int64_t *dims,
                                const double *v) {
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_create(m->ctx, dt, nd, dims, &t);
    if (st) return st;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) kiln_set_f64(t, i, v[i]);
    st = kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
    return st;
}

/* Conv 3x3 (pads 1) + BatchNormalization, then Relu when relu */
static kiln_status conv_bn(kiln_model *m, const char *in, const char *p, int64_t cin, int64_t cout, bool relu,
                           const char *out) {
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
    const char *bn_out = relu ? bo : out;
    if (!st)
        st = kiln_model_add_node(m, "BatchNormalization", bo, 5, (const char *[]){c, g, b, rm, rv}, 1,
                                 (const char *[]){bn_out}, NULL);
    if (!st && relu) st = kiln_model_add_node(m, "Relu", out, 1, (const char *[]){bo}, 1, (const char *[]){out}, NULL);
    return st;
}

/* fixed > 0: the input's batch and the noise's shape fixed at that batch (a Constant), as
 * torch.onnx.export writes EfficientNet without dynamic_axes */
static kiln_model *sd_cnn(kiln_context *ctx, int64_t fixed) {
    kiln_model *m = NULL;
    kiln_node *n = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_status st = kiln_model_add_input(m, "image", KILN_F32, 4, (int64_t[]){fixed > 0 ? fixed : -1, 3, 16, 16});
    if (!st) st = conv_bn(m, "image", "stem", 3, 8, true, "r1");
    if (!st) st = conv_bn(m, "r1", "block.branch", 8, 8, false, "b");
    /* stochastic depth (p = 0.25), torchvision.ops.stochastic_depth mode "row" */
    if (fixed > 0) {
        if (!st) st = const_tensor(m, "sd:size", KILN_I64, 1, (int64_t[]){4}, (double[]){(double)fixed, 1, 1, 1});
    } else {
        if (!st)
            st = kiln_model_add_node(m, "Shape", "sd/shape", 1, (const char *[]){"r1"}, 1, (const char *[]){"sd:n"}, &n);
        if (!st) st = kiln_node_set_int(n, "end", 1);
        if (!st) st = const_tensor(m, "sd.ones", KILN_I64, 1, (int64_t[]){3}, (double[]){1, 1, 1});
        if (!st)
            st = kiln_model_add_node(m, "Concat", "sd/concat", 2, (const char *[]){"sd:n", "sd.ones"}, 1,
                                     (const char *[]){"sd:size"}, &n);
        if (!st) st = kiln_node_set_int(n, "axis", 0);
    }
    if (!st)
        st = kiln_model_add_node(m, "ConstantOfShape", "sd/empty", 1, (const char *[]){"sd:size"}, 1,
                                 (const char *[]){"sd:empty"}, NULL);
    if (!st)
        st = kiln_model_add_node(m, "RandomUniformLike", "sd/uniform", 1, (const char *[]){"sd:empty"}, 1,
                                 (const char *[]){"sd:u"}, &n);
    if (!st) st = kiln_node_set_int(n, "dtype", 1);
    /* the survival rate as the export writes it: a Constant node (an initializer would be a
     * parameter the trainer trains) */
    if (!st)
        st = kiln_model_add_node(m, "Constant", "sd/survival", 0, NULL, 1, (const char *[]){"sd.survival"}, &n);
    if (!st) st = kiln_node_set_float(n, "value_float", 0.75f);
    if (!st)
        st = kiln_model_add_node(m, "Less", "sd/less", 2, (const char *[]){"sd:u", "sd.survival"}, 1,
                                 (const char *[]){"sd:keep"}, NULL);
    if (!st)
        st = kiln_model_add_node(m, "Cast", "sd/cast", 1, (const char *[]){"sd:keep"}, 1, (const char *[]){"sd:keepf"},
                                 &n);
    if (!st) st = kiln_node_set_int(n, "to", 1);
    if (!st)
        st = kiln_model_add_node(m, "Div", "sd/div", 2, (const char *[]){"sd:keepf", "sd.survival"}, 1,
                                 (const char *[]){"sd:noise"}, NULL);
    if (!st)
        st = kiln_model_add_node(m, "Mul", "sd/mul", 2, (const char *[]){"b", "sd:noise"}, 1,
                                 (const char *[]){"sd:out"}, NULL);
    if (!st) st = kiln_model_add_node(m, "Add", "block/add", 2, (const char *[]){"r1", "sd:out"}, 1, (const char *[]){"h"}, NULL);
    if (!st) st = kiln_model_add_node(m, "GlobalAveragePool", "gap", 1, (const char *[]){"h"}, 1, (const char *[]){"g"}, NULL);
    if (!st) st = kiln_model_add_node(m, "Flatten", "flatten", 1, (const char *[]){"g"}, 1, (const char *[]){"f"}, NULL);
    if (!st) st = init_tensor(m, "fc.weight", 2, (int64_t[]){3, 8}, 0.3, 0);
    if (!st) st = init_tensor(m, "fc.bias", 1, (int64_t[]){3}, 0.1, 0);
    if (!st)
        st = kiln_model_add_node(m, "Gemm", "fc", 3, (const char *[]){"f", "fc.weight", "fc.bias"}, 1,
                                 (const char *[]){"logits"}, &n);
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    if (!st) st = kiln_model_add_output(m, "logits");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        printf("FAIL sd_cnn: %s\n", kiln_context_message(ctx));
        fails++;
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

/* The same batch under run seeds 1, 1 and 2..9: seed 1 twice gives the same logits; some
 * later seed drops the block for another sample, so its logits differ. */
static void test_seeds(kiln_context *ctx, kiln_model *m) {
    enum { B = 8 };
    kiln_session *s = NULL;
    kiln_tensor *x = NULL, *first = NULL;
    CHECK(!kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){B, 3, 16, 16}, &x), "input: %s", kiln_context_message(ctx));
    if (!x) return;
    for (int64_t i = 0; i < kiln_tensor_numel(x); i++) ((float *)x->data)[i] = (float)(2 * rnd_unit() - 1);
    kiln_status st = kiln_session_create(m, NULL, &s);
    CHECK(!st, "session: %s", kiln_context_message(ctx));
    const kiln_tensor *out = NULL;
    if (!st) st = kiln_session_run_seeded(s, 1, 1, &x, 1, &out);
    CHECK(!st, "run seed 1: %s", kiln_context_message(ctx));
    if (!st) first = kiln_tensor_clone(ctx, out);
    if (!st) st = kiln_session_run_seeded(s, 1, 1, &x, 1, &out);
    CHECK(!st && first && !memcmp(first->data, out->data, kiln_tensor_nbytes(out)),
          "seed 1 twice: the logits differ (%s)", kiln_context_message(ctx));
    int differ = 0;
    for (uint64_t seed = 2; !st && first && seed < 10; seed++) {
        st = kiln_session_run_seeded(s, seed, 1, &x, 1, &out);
        differ += !st && memcmp(first->data, out->data, kiln_tensor_nbytes(out)) != 0;
    }
    CHECK(!st && differ > 0, "seeds 2..9 all gave seed 1's logits: the draw does not follow the run seed (%s)",
          kiln_context_message(ctx));
    printf("%s seeds: same seed same logits, %d of 8 other seeds other logits\n", fails ? "FAIL" : "ok  ", differ);
    kiln_tensor_free(first);
    kiln_tensor_free(x);
    kiln_session_free(s);
}

/* The weights' gradients through the block (kiln_model_gradients: what one training step
 * computes, BatchNormalization in training mode, the draws from the options' seed), against
 * central differences under the same seed, for a weight of the branch under the random
 * mask, of the stem (reached through both paths) and the classifier's bias. */
static void test_gradients(kiln_context *ctx, kiln_model *cnn) {
    enum { B = 8 };
    kiln_model *m = NULL;
    kiln_status st = kiln_model_add_classifier_loss(cnn, "logits", 0.0f, &m);
    CHECK(!st, "loss: %s", kiln_context_message(ctx));
    if (st) return;
    kiln_tensor *x = NULL, *y = NULL;
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){B, 3, 16, 16}, &x);
    kiln_tensor_create(ctx, KILN_I64, 1, (int64_t[]){B}, &y);
    CHECK(x && y, "inputs");
    if (!x || !y) goto out;
    for (int64_t i = 0; i < kiln_tensor_numel(x); i++) ((float *)kiln_tensor_data(x))[i] = (float)(2 * rnd_unit() - 1);
    for (int i = 0; i < B; i++) ((int64_t *)kiln_tensor_data(y))[i] = i % 3;
    kiln_tensor *in[2] = {x, y};
    kiln_train_options o = KILN_TRAIN_OPTIONS_INIT;
    o.seed = 11;
    kiln_gradients g = {0};
    st = kiln_model_gradients(m, "loss", &o, 2, in, &g);
    CHECK(!st, "gradients: %s", kiln_context_message(ctx));
    CHECK(st || g.n == 8, "8 trained tensors (2 x conv weight, BN weight, BN bias; fc weight and bias), got %d", g.n);
    static const char *const probe[3] = {"block.branch.conv.weight", "stem.conv.weight", "fc.bias"};
    double worst = 0;
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
            st = kiln_model_gradients(m, "loss", &o, 2, in, &gg); /* its loss is the forward's */
            l[side] = gg.loss;
            kiln_gradients_free(&gg);
        }
        w[j] = w0;
        const double fd = (l[1] - l[0]) / (2.0 * h), got = ((const float *)kiln_tensor_data(g.values[gi]))[j];
        const double tol = 2e-3 + 2e-2 * fabs(fd);
        CHECK(!st && fabs(fd - got) <= tol, "%s[%lld]: gradient %.6g, central difference %.6g", probe[pi],
              (long long)j, got, fd);
        if (fabs(fd - got) / tol > worst) worst = fabs(fd - got) / tol;
    }
    printf("%s gradients through stochastic depth under one seed: %d parameters, central differences within %.0f%% "
           "of the tolerance\n", fails ? "FAIL" : "ok  ", g.n, worst * 100);
    kiln_gradients_free(&g);
out:
    kiln_tensor_free(x);
    kiln_tensor_free(y);
    kiln_model_free(m);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_stochastic_depth DIR\n");
        return 2;
    }
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    kiln_model *m = sd_cnn(ctx, 0), *fixed = sd_cnn(ctx, 2);
    if (fixed) {
        char p[4096];
        snprintf(p, sizeof p, "%s/tiny_sd_fixed.onnx", argv[1]);
        CHECK(!kiln_model_save_onnx(fixed, p), "save %s: %s", p, kiln_context_message(ctx));
    }
    kiln_model_free(fixed);
    if (m) {
        test_seeds(ctx, m);
        test_gradients(ctx, m);
        char p[4096];
        snprintf(p, sizeof p, "%s/tiny_sd.onnx", argv[1]);
        CHECK(!kiln_model_save_onnx(m, p), "save %s: %s", p, kiln_context_message(ctx));
    }
    kiln_model_free(m);
    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "all passed");
    return fails != 0;
}
