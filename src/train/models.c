/* models.c — kiln's model builders (the model zoo), written with the public builder API.
 * Builders create no bias for a convolution followed by BatchNormalization (the BN's
 * shift makes it redundant); mnist-net has no BatchNormalization. */
#include "../core/internal.h"

#include <math.h>
#include <stdio.h>
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
