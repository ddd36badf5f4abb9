/* models.c — kiln's model builders (the model zoo), written with the public builder API.
 * Builders create no bias for a convolution followed by BatchNormalization (the BN's
 * shift makes it redundant); mnist-net has no BatchNormalization. */
#include "../core/internal.h"
#include "../passes/passes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: a counter-based stream for reproducible initialization. */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* PyTorch's default for Conv and Linear (kaiming_uniform_ with a = sqrt(5)) and for their
 * biases: uniform in +-1/sqrt(fan_in). */
static kiln_status add_uniform(kiln_model *m, const char *name, int ndim, const int64_t *dims,
                               int64_t fan_in, uint64_t *rng) {
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_create(m->ctx, KILN_F32, ndim, dims, &t);
    if (st) return st;
    float bound = 1.0f / sqrtf((float)fan_in), *p = t->data;
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++)
        p[i] = bound * (float)(2.0 * ((double)(mix(rng) >> 11) / 9007199254740992.0) - 1.0);
    st = kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
    return st;
}

static kiln_status node(kiln_model *m, const char *op, const char *name, int n_in, const char *const *in,
                        const char *out, kiln_node **n) {
    return kiln_model_add_node(m, op, name, n_in, in, 1, &out, n);
}

kiln_status kiln_model_mnist_net(kiln_context *ctx, int64_t batch, uint64_t seed, int dropout,
                                 kiln_model **out) {
    if (!ctx || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (batch == 0 || batch < -1)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "mnist-net: batch must be positive or -1, got %lld", (long long)batch);
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    if (st) return st;
    uint64_t rng = seed * 0x2545F4914F6CDD1Dull + 7;
    kiln_node *n = NULL;
    const int64_t k33[2] = {3, 3}, k22[2] = {2, 2};
    const char *d1 = dropout ? "d1" : "p1", *d2 = dropout ? "d2" : "h1";
#define TRY(x) do { if (!st) st = (x); } while (0)
    TRY(kiln_model_add_input(m, "image", KILN_F32, 4, (int64_t[]){batch, 1, 28, 28}));
    TRY(kiln_model_add_input(m, "label", KILN_I64, 1, (int64_t[]){batch}));
    TRY(add_uniform(m, "conv1.weight", 4, (int64_t[]){32, 1, 3, 3}, 9, &rng));
    TRY(add_uniform(m, "conv1.bias", 1, (int64_t[]){32}, 9, &rng));
    TRY(add_uniform(m, "conv2.weight", 4, (int64_t[]){64, 32, 3, 3}, 288, &rng));
    TRY(add_uniform(m, "conv2.bias", 1, (int64_t[]){64}, 288, &rng));
    TRY(add_uniform(m, "fc1.weight", 2, (int64_t[]){128, 9216}, 9216, &rng));
    TRY(add_uniform(m, "fc1.bias", 1, (int64_t[]){128}, 9216, &rng));
    TRY(add_uniform(m, "fc2.weight", 2, (int64_t[]){10, 128}, 128, &rng));
    TRY(add_uniform(m, "fc2.bias", 1, (int64_t[]){10}, 128, &rng));
    TRY(node(m, "Conv", "conv1", 3, (const char *[]){"image", "conv1.weight", "conv1.bias"}, "c1", &n));
    if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, k33);
    TRY(node(m, "Relu", "relu1", 1, (const char *[]){"c1"}, "r1", NULL));
    TRY(node(m, "Conv", "conv2", 3, (const char *[]){"r1", "conv2.weight", "conv2.bias"}, "c2", &n));
    if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, k33);
    TRY(node(m, "Relu", "relu2", 1, (const char *[]){"c2"}, "r2", NULL));
    TRY(node(m, "MaxPool", "pool", 1, (const char *[]){"r2"}, "p1", &n));
    if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, k22);
    if (!st) st = kiln_node_set_ints(n, "strides", 2, k22);
    if (dropout) {
        kiln_tensor *r = NULL;
        TRY(kiln_tensor_create(ctx, KILN_F32, 0, NULL, &r));
        if (!st) ((float *)r->data)[0] = 0.25f;
        TRY(kiln_model_add_initializer(m, "dropout1.ratio", r));
        if (r) ((float *)r->data)[0] = 0.5f;
        TRY(kiln_model_add_initializer(m, "dropout2.ratio", r));
        kiln_tensor_free(r);
        TRY(node(m, "Dropout", "dropout1", 2, (const char *[]){"p1", "dropout1.ratio"}, "d1", NULL));
    }
    TRY(node(m, "Flatten", "flatten", 1, (const char *[]){d1}, "f", &n));
    if (!st) st = kiln_node_set_int(n, "axis", 1);
    TRY(node(m, "Gemm", "fc1", 3, (const char *[]){"f", "fc1.weight", "fc1.bias"}, "g1", &n));
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    TRY(node(m, "Relu", "relu3", 1, (const char *[]){"g1"}, "h1", NULL));
    if (dropout) TRY(node(m, "Dropout", "dropout2", 2, (const char *[]){"h1", "dropout2.ratio"}, "d2", NULL));
    TRY(node(m, "Gemm", "fc2", 3, (const char *[]){d2, "fc2.weight", "fc2.bias"}, "logits", &n));
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    TRY(node(m, "LogSoftmax", "log_softmax", 1, (const char *[]){"logits"}, "logprobs", &n));
    if (!st) st = kiln_node_set_int(n, "axis", 1);
    TRY(node(m, "NegativeLogLikelihoodLoss", "nll", 2, (const char *[]){"logprobs", "label"}, "loss", &n));
    if (!st) st = kiln_node_set_string(n, "reduction", "mean");
    TRY(kiln_model_add_output(m, "logprobs"));
    TRY(kiln_model_add_output(m, "loss"));
    TRY(kiln_model_finalize(m));
#undef TRY
    if (st) {
        kiln_msg_prefix(ctx, "mnist-net: ");
        kiln_model_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

/* ------------------------------------------------------------ classifier loss */

/* SoftmaxCrossEntropyLoss with mean reduction, written as LogSoftmax -> NLL (the pair
 * src/passes/fuse_loss.c fuses on CUDA; SoftmaxCrossEntropyLoss itself has no CUDA
 * kernel). Label smoothing eps as PyTorch's CrossEntropyLoss(label_smoothing=eps):
 *   loss = (1 - eps) * NLL_mean(logp, y) + eps * mean_n(sum_k -logp[n,k]) / K
 *        = (1 - eps) * nll - eps * ReduceMean(logp)          (over all N*K entries)
 * Every op used (LogSoftmax, NegativeLogLikelihoodLoss, ReduceMean, Mul, Sub) has a
 * gradient rule on the CPU. */
/* A Constant node, not an initializer: the trainer would train a float initializer. */
static kiln_status add_scalar(kiln_model *m, const char *name, float v) {
    kiln_node *n = NULL;
    kiln_status st = node(m, "Constant", name, 0, NULL, name, &n);
    if (!st) st = kiln_node_set_float(n, "value_float", v);
    return st;
}

kiln_status kiln_model_add_classifier_loss(const kiln_model *src, const char *logits, float label_smoothing,
                                           kiln_model **out) {
    if (!src || !logits || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    kiln_context *ctx = src->ctx;
    if (!src->finalized) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "classifier loss: the model must be finalized");
    if (!(label_smoothing >= 0.f && label_smoothing < 1.f))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "classifier loss: label smoothing must be in [0, 1), got %g",
                         (double)label_smoothing);
    int oi = kiln_model_output_index(src, logits);
    if (oi < 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "classifier loss: '%s' is not an output of the model", logits);
    kiln_dtype dt;
    int nd = 0;
    int64_t dims[KILN_MAX_DIMS];
    kiln_status st = kiln_model_output_info(src, oi, &dt, &nd, dims);
    if (st) return st;
    if (dt != KILN_F32 || nd != 2 || dims[1] < 1)
        return kiln_fail(ctx, KILN_ERR_SHAPE,
                         "classifier loss: the logits '%s' must be f32 (batch, classes) with a known class count; "
                         "they are %s with %d dims%s",
                         logits, kiln_dtype_name(dt), nd, nd == 2 ? " and a symbolic class dim" : "");
    static const char *const taken[] = {"label", "loss", "logprobs", "kiln:smooth_mean", "kiln:nll", "kiln:ls_a",
                                        "kiln:ls_b", "kiln:ls_nll", "kiln:ls_mean", "kiln:ls_one_minus",
                                        "kiln:ls_eps"};
    for (size_t i = 0; i < sizeof taken / sizeof *taken; i++)
        if (kiln_model_find_value(src, taken[i]) >= 0 && strcmp(taken[i], logits) != 0)
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                             "classifier loss: the model already has a value named '%s' (kiln adds it)", taken[i]);
    if (strcmp(logits, "logprobs") == 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "classifier loss: rename the logits output (kiln adds 'logprobs')");
    kiln_model *m = NULL;
    if ((st = kiln_model_clone(src, &m))) return st;
    m->finalized = false;
    /* the batch: every graph input's first dim symbolic (a model exported at batch 4 trains
     * at any batch, where its graph allows) */
    for (int i = 0; i < m->n_inputs; i++) {
        kiln_value *v = &m->values[m->inputs[i]];
        if (v->ndim > 0 && v->dims[0] >= 0) v->dims[0] = -1;
    }
    /* An Identity node reading an initializer becomes an initializer of its own (a copy):
     * torch.onnx.export in eval mode without constant folding stores equal tensors once
     * (fresh BatchNormalization statistics, all 0 or 1) and names the others through
     * Identity nodes; each BN then has its own statistics under its state_dict name.
     * Nodes are in topological order, so chains of them resolve. */
    bool *dead = kiln_calloc(ctx, (size_t)m->n_nodes + 1, sizeof(bool), "classifier loss");
    if (!dead) {
        kiln_model_free(m);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < m->n_nodes; i++) {
        const kiln_node *id = &m->nodes[i];
        if (strcmp(id->op_type, "Identity") || id->n_in != 1 || id->n_out != 1 || id->in[0] < 0 ||
            !m->values[id->in[0]].init || m->values[id->out[0]].is_output)
            continue;
        kiln_value *src_v = &m->values[id->in[0]], *dst = &m->values[id->out[0]];
        if (!(dst->init = kiln_tensor_clone(ctx, src_v->init))) {
            free(dead);
            kiln_model_free(m);
            return KILN_ERR_OUT_OF_MEMORY;
        }
        dst->dtype = src_v->dtype;
        dst->ndim = src_v->ndim;
        memcpy(dst->dims, src_v->dims, sizeof dst->dims);
        dead[i] = true;
    }
    kiln_pass_remove_nodes(m, dead);
    free(dead);
    kiln_node *n = NULL;
#define TRY(x) do { if (!st) st = (x); } while (0)
    TRY(kiln_model_add_input(m, "label", KILN_I64, 1, (int64_t[]){-1}));
    TRY(node(m, "LogSoftmax", "kiln:log_softmax", 1, (const char *[]){logits}, "logprobs", &n));
    if (!st) st = kiln_node_set_int(n, "axis", 1);
    const bool smooth = label_smoothing > 0;
    TRY(node(m, "NegativeLogLikelihoodLoss", "kiln:nll", 2, (const char *[]){"logprobs", "label"},
             smooth ? "kiln:nll" : "loss", &n));
    if (!st) st = kiln_node_set_string(n, "reduction", "mean");
    if (smooth) {
        TRY(add_scalar(m, "kiln:ls_one_minus", 1.f - label_smoothing));
        TRY(add_scalar(m, "kiln:ls_eps", label_smoothing));
        TRY(node(m, "ReduceMean", "kiln:ls_mean", 1, (const char *[]){"logprobs"}, "kiln:smooth_mean", &n));
        if (!st) st = kiln_node_set_int(n, "keepdims", 0);
        TRY(node(m, "Mul", "kiln:ls_nll", 2, (const char *[]){"kiln:nll", "kiln:ls_one_minus"}, "kiln:ls_a", NULL));
        TRY(node(m, "Mul", "kiln:ls_smooth", 2, (const char *[]){"kiln:smooth_mean", "kiln:ls_eps"}, "kiln:ls_b", NULL));
        TRY(node(m, "Sub", "kiln:ls_loss", 2, (const char *[]){"kiln:ls_a", "kiln:ls_b"}, "loss", NULL));
    }
    TRY(kiln_model_add_output(m, "loss"));
    TRY(kiln_model_finalize(m));
#undef TRY
    if (st) {
        kiln_msg_prefix(ctx, "classifier loss: ");
        kiln_model_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}

/* ------------------------------------------------------------------ ResNets */

/* torchvision's kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2 / fan_out). */
static kiln_status add_normal(kiln_model *m, const char *name, int ndim, const int64_t *dims, double std,
                              uint64_t *rng) {
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_create(m->ctx, KILN_F32, ndim, dims, &t);
    if (st) return st;
    float *p = t->data;
    const int64_t n = kiln_tensor_numel(t);
    for (int64_t i = 0; i < n; i += 2) { /* Box-Muller, two values per pair of draws */
        const double u1 = ((double)(mix(rng) >> 11) + 1.0) / 9007199254740993.0;
        const double u2 = (double)(mix(rng) >> 11) / 9007199254740992.0;
        const double r = sqrt(-2.0 * log(u1)) * std;
        p[i] = (float)(r * cos(6.283185307179586 * u2));
        if (i + 1 < n) p[i + 1] = (float)(r * sin(6.283185307179586 * u2));
    }
    st = kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
    return st;
}

static kiln_status add_const(kiln_model *m, const char *name, int64_t c, float v) {
    kiln_tensor *t = NULL;
    kiln_status st = kiln_tensor_create(m->ctx, KILN_F32, 1, &c, &t);
    if (st) return st;
    for (int64_t i = 0; i < c; i++) ((float *)t->data)[i] = v;
    st = kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
    return st;
}

/* conv (no bias) -> BatchNormalization [-> Relu]: `prefix`conv`k` and `prefix`bn`k`
 * (or the names given), output written to out (a value name of at most 128 bytes). */
static kiln_status conv_bn(kiln_model *m, const char *in, const char *conv_name, const char *bn_name, int64_t cin,
                           int64_t cout, int k, int stride, bool relu, float gamma, uint64_t *rng, char *out,
                           size_t out_size) {
    char w[160], g[160], b[160], rm[160], rv[160], cv[160], bo[160];
    snprintf(w, sizeof w, "%s.weight", conv_name);
    snprintf(g, sizeof g, "%s.weight", bn_name);
    snprintf(b, sizeof b, "%s.bias", bn_name);
    snprintf(rm, sizeof rm, "%s.running_mean", bn_name);
    snprintf(rv, sizeof rv, "%s.running_var", bn_name);
    snprintf(cv, sizeof cv, "%s:out", conv_name);
    snprintf(bo, sizeof bo, "%s:out", bn_name);
    kiln_status st = add_normal(m, w, 4, (int64_t[]){cout, cin, k, k}, sqrt(2.0 / (double)(cout * k * k)), rng);
    if (!st) st = add_const(m, g, cout, gamma);
    if (!st) st = add_const(m, b, cout, 0.f);
    if (!st) st = add_const(m, rm, cout, 0.f);
    if (!st) st = add_const(m, rv, cout, 1.f);
    kiln_node *n = NULL;
    if (!st) st = node(m, "Conv", conv_name, 2, (const char *[]){in, w}, cv, &n);
    const int64_t ks[2] = {k, k}, st2[2] = {stride, stride}, p = k / 2, pads[4] = {p, p, p, p};
    if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, ks);
    if (!st) st = kiln_node_set_ints(n, "strides", 2, st2);
    if (!st) st = kiln_node_set_ints(n, "pads", 4, pads);
    if (!st) st = node(m, "BatchNormalization", bn_name, 5, (const char *[]){cv, g, b, rm, rv}, bo, &n);
    if (!st) st = kiln_node_set_float(n, "epsilon", 1e-5f);
    if (!st) st = kiln_node_set_float(n, "momentum", 0.9f); /* PyTorch's momentum 0.1 */
    if (relu) {
        char r[160];
        snprintf(r, sizeof r, "%s:relu", bn_name);
        if (!st) st = node(m, "Relu", r, 1, (const char *[]){bo}, r, NULL);
        snprintf(out, out_size, "%s", r);
    } else {
        snprintf(out, out_size, "%s", bo);
    }
    return st;
}

kiln_status kiln_model_resnet(kiln_context *ctx, int depth, int64_t n_classes, int64_t image_size, uint64_t seed,
                              int zero_init_residual, kiln_model **out) {
    if (!ctx || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    static const int blocks[5][4] = {{2, 2, 2, 2}, {3, 4, 6, 3}, {3, 4, 6, 3}, {3, 4, 23, 3}, {3, 8, 36, 3}};
    const int which = depth == 18 ? 0 : depth == 34 ? 1 : depth == 50 ? 2 : depth == 101 ? 3 : depth == 152 ? 4 : -1;
    if (which < 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "resnet: depth must be 18, 34, 50, 101 or 152, got %d", depth);
    if (n_classes < 1)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "resnet%d: the class count must be >= 1, got %lld", depth,
                         (long long)n_classes);
    if (image_size == 0 || image_size < -1)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "resnet%d: the image size must be positive or -1, got %lld",
                         depth, (long long)image_size);
    const bool bottleneck = depth >= 50;
    const int expansion = bottleneck ? 4 : 1;
    kiln_model *m = NULL;
    kiln_status st = kiln_model_create(ctx, &m);
    if (st) return st;
    uint64_t rng = seed * 0x2545F4914F6CDD1Dull + 11;
    char x[160], name[160], bn[160], y[160];
    kiln_node *n = NULL;
    st = kiln_model_add_input(m, "image", KILN_F32, 4, (int64_t[]){-1, 3, image_size, image_size});
    if (!st) st = conv_bn(m, "image", "conv1", "bn1", 3, 64, 7, 2, true, 1.f, &rng, x, sizeof x);
    if (!st) st = node(m, "MaxPool", "maxpool", 1, (const char *[]){x}, "maxpool:out", &n);
    if (!st) st = kiln_node_set_ints(n, "kernel_shape", 2, (int64_t[]){3, 3});
    if (!st) st = kiln_node_set_ints(n, "strides", 2, (int64_t[]){2, 2});
    if (!st) st = kiln_node_set_ints(n, "pads", 4, (int64_t[]){1, 1, 1, 1});
    snprintf(x, sizeof x, "maxpool:out");
    int64_t inplanes = 64;
    for (int l = 0; l < 4 && !st; l++) {
        const int64_t planes = 64 << l;
        for (int b = 0; b < blocks[which][l] && !st; b++) {
            const int stride = b == 0 && l > 0 ? 2 : 1;
            char p[64], h[160], id[160];
            snprintf(p, sizeof p, "layer%d.%d", l + 1, b);
            snprintf(id, sizeof id, "%s", x);
            const float last_gamma = zero_init_residual ? 0.f : 1.f;
            if (bottleneck) {
                snprintf(name, sizeof name, "%s.conv1", p);
                snprintf(bn, sizeof bn, "%s.bn1", p);
                st = conv_bn(m, x, name, bn, inplanes, planes, 1, 1, true, 1.f, &rng, h, sizeof h);
                snprintf(name, sizeof name, "%s.conv2", p);
                snprintf(bn, sizeof bn, "%s.bn2", p);
                if (!st) st = conv_bn(m, h, name, bn, planes, planes, 3, stride, true, 1.f, &rng, h, sizeof h);
                snprintf(name, sizeof name, "%s.conv3", p);
                snprintf(bn, sizeof bn, "%s.bn3", p);
                if (!st)
                    st = conv_bn(m, h, name, bn, planes, planes * expansion, 1, 1, false, last_gamma, &rng, h, sizeof h);
            } else {
                snprintf(name, sizeof name, "%s.conv1", p);
                snprintf(bn, sizeof bn, "%s.bn1", p);
                st = conv_bn(m, x, name, bn, inplanes, planes, 3, stride, true, 1.f, &rng, h, sizeof h);
                snprintf(name, sizeof name, "%s.conv2", p);
                snprintf(bn, sizeof bn, "%s.bn2", p);
                if (!st) st = conv_bn(m, h, name, bn, planes, planes, 3, 1, false, last_gamma, &rng, h, sizeof h);
            }
            if (!st && (stride != 1 || inplanes != planes * expansion)) {
                snprintf(name, sizeof name, "%s.downsample.0", p);
                snprintf(bn, sizeof bn, "%s.downsample.1", p);
                st = conv_bn(m, x, name, bn, inplanes, planes * expansion, 1, stride, false, 1.f, &rng, id, sizeof id);
            }
            snprintf(name, sizeof name, "%s:add", p);
            snprintf(y, sizeof y, "%s:out", p);
            if (!st) st = node(m, "Add", name, 2, (const char *[]){h, id}, name, NULL);
            if (!st) st = node(m, "Relu", y, 1, (const char *[]){name}, y, NULL);
            snprintf(x, sizeof x, "%s", y);
            inplanes = planes * expansion;
        }
    }
    /* Linear's default init: kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in)), bias likewise */
    if (!st) st = add_uniform(m, "fc.weight", 2, (int64_t[]){n_classes, inplanes}, inplanes, &rng);
    if (!st) st = add_uniform(m, "fc.bias", 1, (int64_t[]){n_classes}, inplanes, &rng);
    if (!st) st = node(m, "GlobalAveragePool", "avgpool", 1, (const char *[]){x}, "avgpool:out", NULL);
    if (!st) st = node(m, "Flatten", "flatten", 1, (const char *[]){"avgpool:out"}, "flatten:out", &n);
    if (!st) st = kiln_node_set_int(n, "axis", 1);
    if (!st) st = node(m, "Gemm", "fc", 3, (const char *[]){"flatten:out", "fc.weight", "fc.bias"}, "logits", &n);
    if (!st) st = kiln_node_set_int(n, "transB", 1);
    if (!st) st = kiln_model_add_output(m, "logits");
    if (!st) st = kiln_model_finalize(m);
    if (st) {
        kiln_msg_prefix(ctx, "resnet%d: ", depth);
        kiln_model_free(m);
        return st;
    }
    *out = m;
    return KILN_OK;
}
