/* test_core.c — the core without any particular op beyond Relu (and kiln.ReduceSumTo for
 * the planner's aliases): tensors, dtypes, the builder, validation errors, plans
 * (folding, memory planning, symbolic dims), the per-node profile, npy. */
#include "core/internal.h"
#include "core/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fails;
#include "check.h"

static void test_dtypes(void) {
    CHECK(kiln_f32_to_f16(1.0f) == 0x3c00, "f16(1)");
    CHECK(kiln_f32_to_f16(65504.0f) == 0x7bff, "f16(65504)");
    CHECK(kiln_f32_to_f16(65520.0f) == 0x7c00, "f16(65520) rounds to inf");
    CHECK(kiln_f32_to_f16(0.1f) == 0x2e66, "f16(0.1) = %04x", kiln_f32_to_f16(0.1f));
    CHECK(kiln_f32_to_f16(ldexpf(1, -24)) == 0x0001, "smallest subnormal");
    CHECK(kiln_f32_to_f16(ldexpf(1, -26)) == 0x0000, "below half the smallest subnormal");
    CHECK(kiln_f32_to_f16(-2.0f) == 0xc000, "f16(-2)");
    CHECK(isnan(kiln_f16_to_f32(kiln_f32_to_f16(NAN))), "nan survives f16");
    CHECK(kiln_f16_to_f32(0x0001) == ldexpf(1, -24), "subnormal decode");
    CHECK(kiln_f16_to_f32(0x3555) == 0x3555 / 0x3555 * 0.333251953125f, "f16 decode");
    CHECK(kiln_f32_to_bf16(1.0f) == 0x3f80, "bf16(1)");
    CHECK(kiln_f32_to_bf16(1.00390625f) == 0x3f80, "bf16 tie rounds to even");
    CHECK(kiln_f32_to_bf16(1.01171875f) == 0x3f82, "bf16 tie rounds to even (up)");
    CHECK(kiln_bf16_to_f32(0x4049) == 3.140625f, "bf16 decode");
    /* every f16 value survives a round trip through f32 */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t back = kiln_f32_to_f16(kiln_f16_to_f32((uint16_t)h));
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* nan payloads */
        bad += back != h;
    }
    CHECK(bad == 0, "%d f16 values do not round-trip", bad);
    CHECK(kiln_dtype_size(KILN_BF16) == 2 && kiln_dtype_size(KILN_BOOL) == 1 && kiln_dtype_size(KILN_I64) == 8, "sizes");
    CHECK(kiln_dtype_size((kiln_dtype)8) == 0, "string is not a kiln dtype");
}

static void test_broadcast(void) {
    int64_t out[8];
    int n;
    CHECK(kiln_broadcast_shape(3, (int64_t[]){2, 1, 4}, 2, (int64_t[]){3, 1}, &n, out) && n == 3 &&
              out[0] == 2 && out[1] == 3 && out[2] == 4, "broadcast 2x1x4 with 3x1");
    CHECK(!kiln_broadcast_shape(1, (int64_t[]){3}, 1, (int64_t[]){4}, &n, out), "3 vs 4 does not broadcast");
    CHECK(kiln_broadcast_shape(0, NULL, 2, (int64_t[]){2, 2}, &n, out) && n == 2, "scalar broadcasts");
    int64_t st[3][KILN_MAX_DIMS] = {{0}};
    int64_t dims[2] = {2, 3};
    kiln_broadcast_strides(1, (int64_t[]){3}, 2, dims, st[0]);
    CHECK(st[0][0] == 0 && st[0][1] == 1, "broadcast strides");
    int64_t idx[8] = {0}, off[1] = {0}, sum = 0;
    int64_t count = 0;
    do {
        sum += off[0];
        count++;
    } while (kiln_index_next(2, dims, idx, 1, (const int64_t(*)[KILN_MAX_DIMS])st, off));
    CHECK(count == 6 && sum == 2 * (0 + 1 + 2), "index iteration visits %lld, sum %lld", (long long)count, (long long)sum);
}

static void test_tensor_api(kiln_context *ctx) {
    kiln_tensor_free(NULL);
    kiln_model_free(NULL);
    kiln_session_free(NULL);
    kiln_context_free(NULL);
    kiln_tensor *t = NULL;
    CHECK(kiln_tensor_create(ctx, KILN_F32, 2, (int64_t[]){2, -3}, &t) == KILN_ERR_INVALID_ARGUMENT && !t,
          "negative dim rejected");
    CHECK(strstr(kiln_context_message(ctx), "negative") != NULL, "message names the problem: %s", kiln_context_message(ctx));
    CHECK(kiln_tensor_create(ctx, KILN_F32, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}, &t) == KILN_ERR_INVALID_ARGUMENT,
          "rank 9 rejected");
    CHECK(kiln_tensor_create(ctx, (kiln_dtype)8, 1, (int64_t[]){1}, &t) == KILN_ERR_INVALID_ARGUMENT, "string dtype rejected");
    CHECK(kiln_tensor_create(ctx, KILN_I64, 1, (int64_t[]){5}, &t) == KILN_OK, "create");
    CHECK(kiln_tensor_numel(t) == 5 && kiln_tensor_nbytes(t) == 40 && kiln_tensor_dim(t, 0) == 5 &&
              kiln_tensor_dim(t, 1) == -1, "accessors");
    kiln_tensor_free(t);
}

/* x (-1,N) -> Relu -> Relu -> Relu -> Relu -> y ; plus w(init) -> Relu -> wr (folded) */
static kiln_model *relu_chain(kiln_context *ctx, int64_t n) {
    kiln_model *m = NULL;
    if (kiln_model_create(ctx, &m)) return NULL;
    kiln_model_add_input(m, "x", KILN_F32, 2, (int64_t[]){-1, n});
    kiln_tensor *w = NULL;
    kiln_tensor_create(ctx, KILN_F32, 1, (int64_t[]){3}, &w);
    float *wd = kiln_tensor_data(w);
    wd[0] = -1, wd[1] = 2, wd[2] = -3;
    kiln_model_add_initializer(m, "w", w);
    kiln_tensor_free(w);
    const char *names[] = {"x", "a", "b", "c", "y"};
    for (int i = 0; i < 4; i++) kiln_model_add_node(m, "Relu", names[i + 1], 1, &names[i], 1, &names[i + 1], NULL);
    const char *win = "w", *wout = "wr";
    kiln_model_add_node(m, "Relu", "relu_w", 1, &win, 1, &wout, NULL);
    kiln_model_add_output(m, "y");
    kiln_model_add_output(m, "wr");
    if (kiln_model_finalize(m)) {
        printf("finalize: %s\n", kiln_context_message(ctx));
        kiln_model_free(m);
        return NULL;
    }
    return m;
}

static void test_plan(kiln_context *ctx) {
    const int64_t N = 1000;
    kiln_model *m = relu_chain(ctx, N);
    CHECK(m != NULL, "relu chain builds");
    if (!m) return;
    kiln_session *s = NULL;
    /* the memory plan of the chain itself: the elementwise fusion would make it one node */
    kiln_session_options so = {.disable_passes = KILN_PASS_FUSE_ELTWISE};
    CHECK(kiln_session_create(m, &so, &s) == KILN_OK, "session");
    for (int64_t batch = 1; batch <= 3; batch += 2) {
        kiln_tensor *x = NULL;
        kiln_tensor_create(ctx, KILN_F32, 2, (int64_t[]){batch, N}, &x);
        float *xd = kiln_tensor_data(x);
        for (int64_t i = 0; i < batch * N; i++) xd[i] = (float)((i % 7) - 3);
        const kiln_tensor *out[2] = {0};
        kiln_status st = kiln_session_run(s, 1, &x, 2, out);
        CHECK(st == KILN_OK, "run: %s", kiln_context_message(ctx));
        if (!st) {
            const float *y = kiln_tensor_data(out[0]);
            int bad = 0;
            for (int64_t i = 0; i < batch * N; i++) bad += y[i] != (xd[i] > 0 ? xd[i] : 0);
            CHECK(bad == 0 && kiln_tensor_dim(out[0], 0) == batch, "relu chain output (batch %lld)", (long long)batch);
            const float *wr = kiln_tensor_data(out[1]);
            CHECK(wr[0] == 0 && wr[1] == 2 && wr[2] == 0, "folded output");
            kiln_plan_stats ps;
            kiln_session_stats(s, &ps);
            size_t one = (size_t)((batch * N * 4 + 63) / 64 * 64);
            CHECK(ps.arena_bytes == 2 * one, "arena %zu bytes, want two buffers of %zu", ps.arena_bytes, one);
            CHECK(ps.naive_bytes == 4 * one, "naive %zu", ps.naive_bytes);
            CHECK(ps.folded == 1 && ps.nodes == 4, "folded %d nodes %d", ps.folded, ps.nodes);
        }
        kiln_tensor_free(x);
    }
    /* wrong rank and dtype name the input and both shapes */
    kiln_tensor *bad = NULL;
    kiln_tensor_create(ctx, KILN_F32, 1, (int64_t[]){N}, &bad);
    const kiln_tensor *o = NULL;
    CHECK(kiln_session_run(s, 1, &bad, 1, &o) == KILN_ERR_SHAPE, "rank mismatch");
    CHECK(strstr(kiln_context_message(ctx), "'x'") && strstr(kiln_context_message(ctx), "f32[1000]"),
          "message: %s", kiln_context_message(ctx));
    kiln_tensor_free(bad);
    kiln_tensor_create(ctx, KILN_F64, 2, (int64_t[]){1, N}, &bad);
    CHECK(kiln_session_run(s, 1, &bad, 1, &o) == KILN_ERR_TYPE, "dtype mismatch");
    kiln_tensor_free(bad);
    CHECK(kiln_session_run(s, 0, NULL, 1, &o) == KILN_ERR_INVALID_ARGUMENT, "input count");
    kiln_session_free(s);
    kiln_model_free(m);
}

/* A Pad of zeros and a Slice that keeps every element (a pad to a multiple of the window and
 * the crop back, as torchvision's Swin writes them when the sizes already are multiples)
 * share their input's storage and run nothing; a real Pad and a reversing full-size Slice
 * (same shape, step -1) keep their own buffers and compute. x -> Relu r; p = Pad(r, 0);
 * s = Slice(p, axis 2 whole) -> Relu y; t = Pad(r, 1 row on H); u = Slice(r, axis 3 reversed). */
static void i64_init(kiln_model *m, const char *name, int n, const int64_t *v) {
    kiln_tensor *t = NULL;
    kiln_tensor_create(m->ctx, KILN_I64, 1, (int64_t[]){n}, &t);
    if (!t) return;
    memcpy(kiln_tensor_data(t), v, (size_t)n * sizeof *v);
    kiln_model_add_initializer(m, name, t);
    kiln_tensor_free(t);
}

static void test_plan_alias_pad_slice(kiln_context *ctx) {
    const int64_t B = 2, C = 3, H = 4, W = 5;
    kiln_model *m = NULL;
    CHECK(kiln_model_create(ctx, &m) == KILN_OK, "model");
    if (!m) return;
    kiln_model_add_input(m, "x", KILN_F32, 4, (int64_t[]){-1, C, H, W});
    i64_init(m, "zero_pads", 8, (int64_t[]){0, 0, 0, 0, 0, 0, 0, 0});
    i64_init(m, "row_pads", 8, (int64_t[]){0, 0, 1, 0, 0, 0, 0, 0});
    i64_init(m, "s0", 1, (int64_t[]){0});
    i64_init(m, "big", 1, (int64_t[]){INT64_MAX});
    i64_init(m, "ax2", 1, (int64_t[]){2});
    i64_init(m, "ax3", 1, (int64_t[]){3});
    i64_init(m, "last", 1, (int64_t[]){-1});
    i64_init(m, "before", 1, (int64_t[]){INT64_MIN});
    i64_init(m, "back", 1, (int64_t[]){-1});
    kiln_model_add_node(m, "Relu", "relu1", 1, (const char *[]){"x"}, 1, (const char *[]){"r"}, NULL);
    kiln_model_add_node(m, "Pad", "pad0", 2, (const char *[]){"r", "zero_pads"}, 1, (const char *[]){"p"}, NULL);
    kiln_model_add_node(m, "Slice", "crop", 4, (const char *[]){"p", "s0", "big", "ax2"}, 1, (const char *[]){"s"}, NULL);
    kiln_model_add_node(m, "Relu", "relu2", 1, (const char *[]){"s"}, 1, (const char *[]){"y"}, NULL);
    kiln_model_add_node(m, "Pad", "pad1", 2, (const char *[]){"r", "row_pads"}, 1, (const char *[]){"t"}, NULL);
    kiln_model_add_node(m, "Slice", "flip", 5, (const char *[]){"r", "last", "before", "ax3", "back"}, 1,
                        (const char *[]){"u"}, NULL);
    kiln_model_add_output(m, "y");
    kiln_model_add_output(m, "t");
    kiln_model_add_output(m, "u");
    kiln_session *se = NULL;
    kiln_session_options so = {.disable_passes = KILN_PASS_FUSE_ELTWISE};
    if (kiln_model_finalize(m) || kiln_session_create(m, &so, &se)) {
        CHECK(false, "session: %s", kiln_context_message(ctx));
        kiln_model_free(m);
        return;
    }
    kiln_tensor *xt = NULL;
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){B, C, H, W}, &xt);
    float *xd = kiln_tensor_data(xt);
    const int64_t n = B * C * H * W;
    for (int64_t i = 0; i < n; i++) xd[i] = (float)((i * 7) % 11) - 5.f;
    const kiln_tensor *out[3] = {0};
    kiln_status st = kiln_session_run(se, 1, &xt, 3, out);
    CHECK(st == KILN_OK, "run: %s", kiln_context_message(ctx));
    if (!st) {
        const float *yd = kiln_tensor_data(out[0]), *td = kiln_tensor_data(out[1]), *ud = kiln_tensor_data(out[2]);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            const float r = xd[i] > 0 ? xd[i] : 0;
            bad += yd[i] != r;
            bad += ud[i - i % W + (W - 1 - i % W)] != r;
            const int64_t w = i % W, h = i / W % H, bc = i / (W * H);
            bad += td[(bc * (H + 1) + h + 1) * W + w] != r;
        }
        for (int64_t bc = 0; bc < B * C; bc++)
            for (int64_t w = 0; w < W; w++) bad += td[bc * (H + 1) * W + w] != 0;
        CHECK(bad == 0, "outputs through the aliased Pad and Slice, the real Pad and the reversing Slice (%d wrong)",
              bad);
        kiln_plan_stats ps;
        kiln_session_stats(se, &ps);
        const size_t one = (size_t)((n * 4 + 63) / 64 * 64), padded = (size_t)((B * C * (H + 1) * W * 4 + 63) / 64 * 64);
        CHECK(ps.naive_bytes == 3 * one + padded, "buffers %zu bytes, want r (p and s its aliases), y, u and t: %zu",
              ps.naive_bytes, 3 * one + padded);
    }
    kiln_tensor_free(xt);
    kiln_session_free(se);
    kiln_model_free(m);
}

/* An NHWC input is converted to the NCHW the kernels read, into plan-owned memory. */
/* A kiln.ReduceSumTo that sums nothing (autograd emits one for each operand of a residual
 * Add, before shapes are known) shares its input's storage: no buffer of its own, nothing
 * run. x -> Relu r; s = ReduceSumTo(r, like r) -> Relu y; t = ReduceSumTo(r, like b[N]),
 * a real sum over the batch, keeps its buffer. */
static void test_plan_alias_sum_to(kiln_context *ctx) {
    const int64_t B = 3, N = 40;
    kiln_model *m = NULL;
    CHECK(kiln_model_create(ctx, &m) == KILN_OK, "model");
    if (!m) return;
    kiln_model_add_input(m, "x", KILN_F32, 2, (int64_t[]){-1, N});
    kiln_tensor *b = NULL;
    kiln_tensor_create(ctx, KILN_F32, 1, (int64_t[]){N}, &b);
    kiln_model_add_initializer(m, "b", b);
    kiln_tensor_free(b);
    const char *x = "x", *r = "r", *s = "s", *y = "y", *t = "t";
    kiln_model_add_node(m, "Relu", "relu1", 1, &x, 1, &r, NULL);
    const int in_s[2] = {kiln_model_get_value(m, "r"), kiln_model_get_value(m, "r")};
    const int out_s[1] = {kiln_model_get_value(m, "s")};
    CHECK(kiln_model_add_node_raw(m, "ReduceSumTo", "same", "kiln", 2, in_s, 1, out_s, 0, NULL) >= 0, "node");
    kiln_model_add_node(m, "Relu", "relu2", 1, &s, 1, &y, NULL);
    const int in_t[2] = {kiln_model_get_value(m, "r"), kiln_model_get_value(m, "b")};
    const int out_t[1] = {kiln_model_get_value(m, "t")};
    CHECK(kiln_model_add_node_raw(m, "ReduceSumTo", "batch", "kiln", 2, in_t, 1, out_t, 0, NULL) >= 0, "node");
    kiln_model_add_output(m, y);
    kiln_model_add_output(m, t);
    kiln_session *se = NULL;
    kiln_session_options so = {.disable_passes = KILN_PASS_FUSE_ELTWISE};
    if (kiln_model_finalize(m) || kiln_session_create(m, &so, &se)) {
        CHECK(false, "session: %s", kiln_context_message(ctx));
        kiln_model_free(m);
        return;
    }
    kiln_tensor *xt = NULL;
    kiln_tensor_create(ctx, KILN_F32, 2, (int64_t[]){B, N}, &xt);
    float *xd = kiln_tensor_data(xt);
    for (int64_t i = 0; i < B * N; i++) xd[i] = (float)((i * 7) % 11) - 5.f;
    const kiln_tensor *out[2] = {0};
    kiln_status st = kiln_session_run(se, 1, &xt, 2, out);
    CHECK(st == KILN_OK, "run: %s", kiln_context_message(ctx));
    if (!st) {
        const float *yd = kiln_tensor_data(out[0]), *td = kiln_tensor_data(out[1]);
        int bad = 0;
        for (int64_t i = 0; i < B * N; i++) bad += yd[i] != (xd[i] > 0 ? xd[i] : 0);
        for (int64_t j = 0; j < N; j++) {
            float want = 0;
            for (int64_t i = 0; i < B; i++) want += xd[i * N + j] > 0 ? xd[i * N + j] : 0;
            bad += td[j] != want;
        }
        CHECK(bad == 0, "outputs through the aliased and the summing ReduceSumTo (%d wrong)", bad);
        kiln_plan_stats ps;
        kiln_session_stats(se, &ps);
        const size_t one = (size_t)((B * N * 4 + 63) / 64 * 64), row = (size_t)((N * 4 + 63) / 64 * 64);
        CHECK(ps.naive_bytes == 2 * one + row, "buffers %zu bytes, want r (s its alias), y, t: %zu", ps.naive_bytes,
              2 * one + row);
    }
    kiln_tensor_free(xt);
    kiln_session_free(se);
    kiln_model_free(m);
}

static void test_nhwc_input(kiln_context *ctx) {
    kiln_model *m = NULL;
    const char *x[] = {"x"}, *y[] = {"y"};
    kiln_model_create(ctx, &m);
    kiln_model_add_input(m, "x", KILN_F32, 4, (int64_t[]){1, 2, 2, 3});
    kiln_model_add_node(m, "Relu", "r", 1, x, 1, y, NULL);
    kiln_model_add_output(m, "y");
    CHECK(kiln_model_finalize(m) == KILN_OK, "finalize: %s", kiln_context_message(ctx));
    kiln_session *s = NULL;
    kiln_session_create(m, NULL, &s);
    float nhwc[12];
    for (int i = 0; i < 12; i++) nhwc[i] = (float)(i % 2 ? i : -i); /* (1,2,3,2) in memory */
    kiln_tensor *t = NULL;
    kiln_tensor_wrap(ctx, KILN_F32, 4, (int64_t[]){1, 2, 2, 3}, nhwc, &t);
    CHECK(kiln_tensor_set_format(t, KILN_FORMAT_NHWC) == KILN_OK, "set format");
    const kiln_tensor *out = NULL;
    CHECK(kiln_session_run(s, 1, &t, 1, &out) == KILN_OK, "run nhwc: %s", kiln_context_message(ctx));
    if (out) {
        const float *o = kiln_tensor_data(out);
        int bad = 0;
        for (int c = 0; c < 2; c++)
            for (int h = 0; h < 2; h++)
                for (int w = 0; w < 3; w++) {
                    float v = nhwc[(h * 3 + w) * 2 + c];
                    bad += o[(c * 2 + h) * 3 + w] != (v > 0 ? v : 0);
                }
        CHECK(bad == 0, "NHWC input converted to NCHW (%d wrong)", bad);
    }
    kiln_tensor *back = NULL;
    CHECK(kiln_tensor_to_format(ctx, t, KILN_FORMAT_NCHW, &back) == KILN_OK &&
              ((float *)kiln_tensor_data(back))[1] == nhwc[2], "to_format");
    kiln_tensor_free(back);
    kiln_tensor_free(t);
    kiln_tensor *t2 = NULL;
    kiln_tensor_create(ctx, KILN_F32, 2, (int64_t[]){2, 2}, &t2);
    CHECK(kiln_tensor_set_format(t2, KILN_FORMAT_NHWC) == KILN_ERR_INVALID_ARGUMENT, "NHWC needs 4-D");
    kiln_tensor_free(t2);
    kiln_session_free(s);
    kiln_model_free(m);
}

static void test_graph_errors(kiln_context *ctx) {
    kiln_model *m = NULL;
    const char *in1[] = {"nowhere"}, *out1[] = {"y"};
    kiln_model_create(ctx, &m);
    kiln_model_add_input(m, "x", KILN_F32, 1, (int64_t[]){4});
    kiln_model_add_node(m, "Relu", "r", 1, in1, 1, out1, NULL);
    kiln_model_add_output(m, "y");
    CHECK(kiln_model_finalize(m) == KILN_ERR_GRAPH && strstr(kiln_context_message(ctx), "nowhere"),
          "undefined input: %s", kiln_context_message(ctx));
    kiln_model_free(m);

    const char *a[] = {"a"}, *b[] = {"b"};
    kiln_model_create(ctx, &m);
    kiln_model_add_input(m, "x", KILN_F32, 1, (int64_t[]){4});
    kiln_model_add_node(m, "Relu", "r1", 1, a, 1, b, NULL);
    kiln_model_add_node(m, "Relu", "r2", 1, b, 1, a, NULL);
    kiln_model_add_output(m, "b");
    CHECK(kiln_model_finalize(m) == KILN_ERR_GRAPH && strstr(kiln_context_message(ctx), "cycle"),
          "cycle: %s", kiln_context_message(ctx));
    kiln_model_free(m);

    const char *x[] = {"x"};
    kiln_model_create(ctx, &m);
    kiln_model_add_input(m, "x", KILN_F32, 1, (int64_t[]){4});
    kiln_model_add_node(m, "FancyOp", "f", 1, x, 1, out1, NULL);
    kiln_model_add_output(m, "y");
    CHECK(kiln_model_finalize(m) == KILN_ERR_UNSUPPORTED && strstr(kiln_context_message(ctx), "FancyOp"),
          "unknown op: %s", kiln_context_message(ctx));
    kiln_model_free(m);

    kiln_model_create(ctx, &m);
    kiln_model_add_input(m, "x", KILN_BOOL, 1, (int64_t[]){4});
    kiln_model_add_node(m, "Relu", "r", 1, x, 1, out1, NULL);
    kiln_model_add_output(m, "y");
    CHECK(kiln_model_finalize(m) == KILN_ERR_TYPE && strstr(kiln_context_message(ctx), "Relu node 'r'") &&
              strstr(kiln_context_message(ctx), "bool[4]"),
          "bad dtype caught at finalize with op, node and shape: %s", kiln_context_message(ctx));
    kiln_model_free(m);

    kiln_model_create(ctx, &m);
    kiln_model_add_input(m, "x", KILN_F32, 1, (int64_t[]){4});
    kiln_model_add_node(m, "Relu", "r", 2, (const char *[]){"x", "x"}, 1, out1, NULL);
    kiln_model_add_output(m, "y");
    CHECK(kiln_model_finalize(m) == KILN_ERR_GRAPH, "too many inputs: %s", kiln_context_message(ctx));
    CHECK(kiln_model_add_output(m, "z") == KILN_OK || 1, "open model still editable after failed finalize");
    kiln_model_free(m);
}

static void test_npy(kiln_context *ctx, const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/t.npy", dir);
    for (int nd = 0; nd <= 3; nd++) {
        int64_t dims[3] = {2, 3, 4};
        kiln_tensor *t = NULL, *u = NULL;
        kiln_tensor_create(ctx, KILN_I32, nd, dims, &t);
        int32_t *d = kiln_tensor_data(t);
        for (int64_t i = 0; i < kiln_tensor_numel(t); i++) d[i] = (int32_t)(i * 7 - 5);
        CHECK(kiln_tensor_save_npy(ctx, t, path) == KILN_OK, "save npy: %s", kiln_context_message(ctx));
        CHECK(kiln_tensor_load_npy(ctx, path, &u) == KILN_OK, "load npy rank %d: %s", nd, kiln_context_message(ctx));
        if (u) {
            CHECK(u->dtype == KILN_I32 && u->ndim == nd && memcmp(u->data, t->data, kiln_tensor_nbytes(t)) == 0,
                  "npy round trip rank %d", nd);
            FILE *f = fopen(path, "rb");
            char hdr[11] = {0};
            CHECK(f && fread(hdr, 1, 10, f) == 10, "read back");
            if (f) fclose(f);
            CHECK(((unsigned char)hdr[8] + 10) % 64 == 0, "data is 64-byte aligned");
        }
        kiln_tensor_free(t);
        kiln_tensor_free(u);
    }
    /* truncate the last file: a clean parse error */
    FILE *f = fopen(path, "r+b");
    if (f) {
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fclose(f);
        CHECK(truncate(path, sz - 4) == 0, "truncate");
    }
    kiln_tensor *u = NULL;
    CHECK(kiln_tensor_load_npy(ctx, path, &u) == KILN_ERR_PARSE && !u && strstr(kiln_context_message(ctx), "truncated"),
          "truncated npy: %s", kiln_context_message(ctx));
    f = fopen(path, "wb");
    if (f) {
        fputs("\x93NUMPY\x01\x00\x20\x00{'descr': '<f4', 'shape': (2,}    \n", f);
        fclose(f);
    }
    CHECK(kiln_tensor_load_npy(ctx, path, &u) == KILN_ERR_PARSE, "header without fortran_order: %s", kiln_context_message(ctx));
    CHECK(kiln_tensor_load_npy(ctx, "/nonexistent/x.npy", &u) == KILN_ERR_IO, "missing file");
    remove(path);
}

/* kiln_op_cost's FLOPs from shapes alone (the op ctx of a node that is never run). */
static double flops_of(const char *op, const char *attr, int64_t attr_v, const int64_t *a, int na,
                       const int64_t *b, int nb, const int64_t *y, int ny, double *bytes) {
    kiln_attr at = {.name = (char *)attr, .type = KILN_ATTR_INT, .i = attr_v};
    /* the FLOP count is the op's own (kiln_op_def.flops): kiln's fused ops are in its domain */
    const char *domain = strncmp(op, "Fused", 5) == 0 ? "kiln" : "";
    kiln_node node = {.op_type = (char *)op, .name = (char *)"n", .domain = (char *)domain, .op = -1,
                      .n_attrs = attr ? 1 : 0, .attrs = attr ? &at : NULL};
    kiln_tensor ta = {.dtype = KILN_F32}, tb = ta, ty = ta;
    kiln_tensor_set_shape(&ta, KILN_F32, na, a);
    kiln_tensor_set_shape(&tb, KILN_F32, nb, b);
    kiln_tensor_set_shape(&ty, KILN_F32, ny, y);
    kiln_tensor *in[2] = {&ta, &tb}, *out[1] = {&ty};
    kiln_op_ctx c = {.node = &node, .n_in = 2, .in = in, .n_out = 1, .out = out};
    double flops = 0;
    kiln_op_cost(&c, &flops, bytes);
    return flops;
}

static void test_profile(kiln_context *ctx) {
    double bytes = 0;
    const int64_t a[2] = {4, 6}, at[2] = {6, 4}, w[2] = {6, 5}, y[2] = {4, 5};
    CHECK(flops_of("Gemm", NULL, 0, a, 2, w, 2, y, 2, &bytes) == 2 * 4 * 5 * 6 && bytes == (24 + 30 + 20) * 4,
          "Gemm: 2*M*N*K FLOPs, bytes of A, B and Y (%g)", bytes);
    CHECK(flops_of("FusedGemm", "transA", 1, at, 2, w, 2, y, 2, &bytes) == 2 * 4 * 5 * 6, "FusedGemm, transA");
    const int64_t x4[4] = {2, 8, 10, 10}, w4[4] = {16, 4, 3, 3}, y4[4] = {2, 16, 8, 8};
    CHECK(flops_of("Conv", "group", 2, x4, 4, w4, 4, y4, 4, &bytes) == 2.0 * (2 * 16 * 8 * 8) * (4 * 3 * 3),
          "Conv: 2 * outputs * C/group * kernel");
    const int64_t ma[3] = {3, 7, 9}, mb[2] = {9, 2}, my[3] = {3, 7, 2};
    CHECK(flops_of("MatMul", NULL, 0, ma, 3, mb, 2, my, 3, &bytes) == 2.0 * 3 * 7 * 2 * 9, "MatMul batched");
    const int64_t tx[4] = {1, 8, 5, 5}, tw[4] = {8, 3, 2, 2}, ty[4] = {1, 3, 10, 10};
    CHECK(flops_of("ConvTranspose", NULL, 0, tx, 4, tw, 4, ty, 4, &bytes) == 2.0 * (8 * 5 * 5) * (3 * 2 * 2),
          "ConvTranspose: 2 * inputs * M/group * kernel");
    CHECK(flops_of("Relu", NULL, 0, a, 2, a, 2, a, 2, &bytes) == 0 && bytes == 3 * 24 * 4, "Relu: no FLOPs counted");
    /* a convolution's gradients: as many products as the convolution x4 * w4 -> y4 above */
    {
        kiln_node gi = {.op_type = (char *)"ConvGradInput", .name = (char *)"gi", .domain = (char *)"kiln", .op = -1};
        kiln_node gw = gi;
        gw.op_type = (char *)"ConvGradWeight";
        kiln_tensor gx = {.dtype = KILN_F32}, gwt = gx, gdy = gx;
        kiln_tensor_set_shape(&gx, KILN_F32, 4, x4);
        kiln_tensor_set_shape(&gwt, KILN_F32, 4, w4);
        kiln_tensor_set_shape(&gdy, KILN_F32, 4, y4);
        kiln_tensor *in_i[3] = {&gdy, &gwt, &gx}, *out_i[1] = {&gx}, *in_w[3] = {&gx, &gdy, &gwt}, *out_w[1] = {&gwt};
        kiln_op_ctx ci = {.node = &gi, .n_in = 3, .in = in_i, .n_out = 1, .out = out_i};
        kiln_op_ctx cw = {.node = &gw, .n_in = 3, .in = in_w, .n_out = 1, .out = out_w};
        double fi = 0, fw = 0, bi = 0, bw = 0;
        kiln_op_cost(&ci, &fi, &bi);
        kiln_op_cost(&cw, &fw, &bw);
        const double conv = 2.0 * (2 * 16 * 8 * 8) * (4 * 3 * 3);
        CHECK(fi == conv && fw == conv, "ConvGradInput %g and ConvGradWeight %g FLOPs, want %g each", fi, fw, conv);
        CHECK(bi == 4.0 * (2 * 16 * 8 * 8 + 16 * 4 * 3 * 3 + 2 * 2 * 8 * 10 * 10), "ConvGradInput bytes %g", bi);
    }

    /* the host-clock profile of a plan: one entry per run node, in run order, consistent */
    kiln_model *m = relu_chain(ctx, 1000);
    kiln_session *s = NULL;
    kiln_session_options o = {.disable_passes = ~0u};
    kiln_tensor *x = NULL;
    kiln_profile p = {0};
    CHECK(m && kiln_session_create(m, &o, &s) == KILN_OK, "session: %s", kiln_context_message(ctx));
    CHECK(kiln_tensor_create(ctx, KILN_F32, 2, (int64_t[]){8, 1000}, &x) == KILN_OK, "input");
    if (s && x) {
        CHECK(kiln_session_profile(s, 1, &x, 1, 5, &p) == KILN_OK, "profile: %s", kiln_context_message(ctx));
        kiln_plan_stats ps;
        kiln_session_stats(s, &ps);
        CHECK(p.n == ps.nodes && p.n == 4 && p.iters == 5, "one entry per run node (%d, %d)", p.n, ps.nodes);
        double sum = 0;
        for (int e = 0; e < p.n; e++) {
            const kiln_profile_node *pn = &p.nodes[e];
            sum += pn->ms;
            CHECK(strcmp(pn->op_type, "Relu") == 0 && pn->ms >= 0 && pn->dur_ms >= 0 && pn->bytes == 2 * 8000 * 4 &&
                      strcmp(pn->shapes, "f32[8,1000] -> f32[8,1000]") == 0,
                  "node %d: %s %g ms, %g bytes, '%s'", e, pn->op_type, pn->ms, pn->bytes, pn->shapes);
            if (e) CHECK(pn->start_ms >= p.nodes[e - 1].start_ms + p.nodes[e - 1].dur_ms, "node %d starts after the last", e);
        }
        CHECK(fabs(sum - p.total_ms) < 1e-9, "total is the sum of the medians");
        CHECK(kiln_session_profile(s, 1, &x, 0, 0, &p) == KILN_ERR_INVALID_ARGUMENT, "iters must be >= 1");
    }
    kiln_profile_free(&p);
    kiln_profile_free(&p);
    kiln_tensor_free(x);
    kiln_session_free(s);
    kiln_model_free(m);
}

int main(int argc, char **argv) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx)) return 1;
    test_dtypes();
    test_broadcast();
    test_tensor_api(ctx);
    test_plan(ctx);
    test_plan_alias_sum_to(ctx);
    test_plan_alias_pad_slice(ctx);
    test_nhwc_input(ctx);
    test_graph_errors(ctx);
    test_profile(ctx);
    test_npy(ctx, argc > 1 ? argv[1] : ".");
    kiln_context_free(ctx);
    printf("%s: %d failed checks\n", fails ? "FAIL" : "PASS", fails);
    return fails ? 1 : 0;
}
