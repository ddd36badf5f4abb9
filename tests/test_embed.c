/* test_embed.c — the C API for embedding (kiln.h): options that grow (struct_size),
 * inputs and outputs by name, output dtypes and shapes before a run, DLPack import and
 * export (ownership, channels_last, refusals), tensor copies, and the log callback. On
 * the CPU backend with examples/tiny_cnn; tests/gpu/test_cuda_io.c does the device part.
 *
 *   test_embed EXAMPLES_DIR
 */
#include "kiln.h"

#include <dlpack/dlpack.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static float max_diff(const kiln_tensor *a, const kiln_tensor *b) {
    const float *x = kiln_tensor_data(a), *y = kiln_tensor_data(b);
    float d = 0;
    for (int64_t i = 0; i < kiln_tensor_numel(a); i++) d = fmaxf(d, fabsf(x[i] - y[i]));
    return d;
}

/* ------------------------------------------------------------------ options */

static void test_options(kiln_model *m) {
    kiln_session *s = NULL;
    kiln_session_options o = {0}; /* 0: this release's layout */
    CHECK(kiln_session_create(m, &o, &s) == KILN_OK, "zeroed options: %s", msg());
    kiln_session_free(s);
    s = NULL;
    kiln_session_options init = KILN_SESSION_OPTIONS_INIT;
    CHECK(init.struct_size == sizeof(kiln_session_options), "KILN_SESSION_OPTIONS_INIT sets struct_size");
    CHECK(kiln_session_create(m, &init, &s) == KILN_OK, "KILN_SESSION_OPTIONS_INIT: %s", msg());
    kiln_session_free(s);
    s = NULL;

    /* an older caller: a struct that ends before device_index; what follows is not read */
    kiln_session_options old = {.struct_size = offsetof(kiln_session_options, device_index), .device_index = 7};
    CHECK(kiln_session_create(m, &old, &s) == KILN_OK, "an older caller's struct_size: %s", msg());
    kiln_session_free(s);
    s = NULL;
    /* the same field read when the size covers it: the CPU has one device */
    kiln_session_options bad = {.device_index = 7};
    CHECK(kiln_session_create(m, &bad, &s) == KILN_ERR_INVALID_ARGUMENT && strstr(msg(), "device_index 7"),
          "device_index 7 on the CPU: %s", msg());

    /* a newer caller: a bigger struct; zeros past ours are fine, anything else refused */
    struct {
        kiln_session_options o;
        int64_t future[2];
    } newer;
    memset(&newer, 0, sizeof newer);
    newer.o.struct_size = sizeof newer;
    CHECK(kiln_session_create(m, &newer.o, &s) == KILN_OK, "a newer caller with zeros past the end: %s", msg());
    kiln_session_free(s);
    s = NULL;
    newer.future[1] = 1;
    CHECK(kiln_session_create(m, &newer.o, &s) == KILN_ERR_INVALID_ARGUMENT && strstr(msg(), "newer kiln.h") && !s,
          "a newer caller's unknown field: %s", msg());
    kiln_session_options tiny = {.struct_size = 4};
    CHECK(kiln_session_create(m, &tiny, &s) == KILN_ERR_INVALID_ARGUMENT && strstr(msg(), "struct_size is 4"),
          "struct_size 4: %s", msg());

    kiln_train_options to = KILN_TRAIN_OPTIONS_INIT;
    CHECK(to.struct_size == sizeof(kiln_train_options), "KILN_TRAIN_OPTIONS_INIT");
}

/* ---------------------------------------------------------- names and shapes */

static void test_names(kiln_model *m, kiln_tensor *x, const kiln_tensor *want) {
    CHECK(kiln_model_input_index(m, "x") == 0, "input 'x' is 0");
    CHECK(kiln_model_input_index(m, "probs") == -1, "'probs' is not an input");
    CHECK(kiln_model_output_index(m, "probs") == 0, "output 'probs' is 0");
    CHECK(kiln_model_output_index(m, NULL) == -1 && kiln_model_input_index(NULL, "x") == -1, "NULLs");

    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    int nd = 0;
    int64_t dims[KILN_MAX_DIMS];
    CHECK(kiln_model_input_info(m, 0, &dt, &nd, dims) == KILN_OK && dt == KILN_F32 && nd == 4 && dims[0] == -1 &&
              dims[1] == 3,
          "input info");
    const char *batch = kiln_model_input_dim_name(m, 0, 0);
    CHECK(kiln_model_input_dim_name(m, 0, 1) == NULL, "a fixed dim has no name");
    CHECK(kiln_model_output_info(m, 0, &dt, &nd, dims) == KILN_OK, "output info: %s", msg());
    CHECK(dt == KILN_F32 && nd == 2 && dims[0] == -1 && dims[1] == 10,
          "output 'probs' before a run: %s, %d dims [%lld, %lld]; want f32 [-1, 10]", kiln_dtype_name(dt), nd,
          (long long)dims[0], (long long)dims[1]);
    const char *ob = kiln_model_output_dim_name(m, 0, 0);
    CHECK((batch == NULL && ob == NULL) || (batch && ob && strcmp(batch, ob) == 0),
          "the output's batch dim takes the input's name (%s, %s)", batch ? batch : "(none)", ob ? ob : "(none)");
    CHECK(kiln_model_output_dim_name(m, 0, 1) == NULL, "the class dim is fixed");
    CHECK(kiln_model_output_info(m, 1, &dt, &nd, dims) == KILN_ERR_INVALID_ARGUMENT, "output 1 does not exist");

    kiln_session *s = NULL;
    CHECK(kiln_session_create(m, NULL, &s) == KILN_OK, "session: %s", msg());
    if (!s) return;
    CHECK(kiln_session_output_info(s, 1, &x, 0, &dt, &nd, dims) == KILN_OK && dt == KILN_F32 && nd == 2 &&
              dims[0] == kiln_tensor_dim(x, 0) && dims[1] == 10,
          "output info for x's shape: %s", msg());
    CHECK(kiln_session_output_info(s, 1, &x, 3, &dt, &nd, dims) == KILN_ERR_INVALID_ARGUMENT, "output 3");

    /* by name, into the caller's tensor */
    kiln_tensor *y = NULL;
    CHECK(kiln_tensor_create(ctx, KILN_F32, kiln_tensor_ndim(want), (int64_t[]){kiln_tensor_dim(want, 0), 10}, &y) ==
              KILN_OK,
          "y");
    const char *in_names[] = {"x"}, *out_names[] = {"probs"};
    CHECK(kiln_session_run_named(s, 1, in_names, &x, 1, out_names, &y) == KILN_OK, "run_named: %s", msg());
    CHECK(max_diff(y, want) < 1e-4f, "run_named's output differs from the reference by %g", max_diff(y, want));
    const char *wrong[] = {"image"};
    CHECK(kiln_session_run_named(s, 1, wrong, &x, 1, out_names, &y) == KILN_ERR_INVALID_ARGUMENT &&
              strstr(msg(), "no input 'image'") && strstr(msg(), "'x'"),
          "an unknown input name: %s", msg());
    const char *wrong_out[] = {"logits"};
    CHECK(kiln_session_run_named(s, 1, in_names, &x, 1, wrong_out, &y) == KILN_ERR_INVALID_ARGUMENT &&
              strstr(msg(), "no output 'logits'") && strstr(msg(), "'probs'"),
          "an unknown output name: %s", msg());
    CHECK(kiln_session_run_named(s, 1, in_names, &x, 0, NULL, NULL) == KILN_OK, "no outputs asked: %s", msg());
    kiln_tensor *small = NULL;
    kiln_tensor_create(ctx, KILN_F32, 2, (int64_t[]){1, 10}, &small);
    CHECK(kiln_session_run_named(s, 1, in_names, &x, 1, out_names, &small) == KILN_ERR_SHAPE &&
              strstr(msg(), "probs") && strstr(msg(), "f32[1,10]"),
          "a wrong output shape: %s", msg());
    kiln_tensor_free(small);
    kiln_tensor_free(y);
    kiln_session_free(s);
}

/* ------------------------------------------------------------------- DLPack */

typedef struct producer {
    DLManagedTensor m;
    int64_t shape[4], strides[4];
    float *data;
    int *deleted;
} producer;

static void producer_delete(DLManagedTensor *m) {
    producer *p = m->manager_ctx;
    (*p->deleted)++;
    free(p->data);
    free(p);
}

/* A DLPack producer over a copy of t's floats, row-major or channels_last. */
static DLManagedTensor *produce(const kiln_tensor *t, int channels_last, int *deleted) {
    producer *p = calloc(1, sizeof *p);
    const int64_t N = kiln_tensor_dim(t, 0), C = kiln_tensor_dim(t, 1), H = kiln_tensor_dim(t, 2),
                  W = kiln_tensor_dim(t, 3);
    p->data = malloc(kiln_tensor_nbytes(t));
    const float *src = kiln_tensor_data(t);
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t w = 0; w < W; w++) {
                    const int64_t nchw = ((n * C + c) * H + h) * W + w, nhwc = ((n * H + h) * W + w) * C + c;
                    p->data[channels_last ? nhwc : nchw] = src[nchw];
                }
    p->shape[0] = N, p->shape[1] = C, p->shape[2] = H, p->shape[3] = W;
    if (channels_last) p->strides[0] = H * W * C, p->strides[1] = 1, p->strides[2] = W * C, p->strides[3] = C;
    else p->strides[0] = C * H * W, p->strides[1] = H * W, p->strides[2] = W, p->strides[3] = 1;
    p->deleted = deleted;
    DLTensor *x = &p->m.dl_tensor;
    x->data = p->data;
    x->device.device_type = kDLCPU;
    x->ndim = 4;
    x->dtype.code = kDLFloat;
    x->dtype.bits = 32;
    x->dtype.lanes = 1;
    x->shape = p->shape;
    x->strides = p->strides;
    p->m.manager_ctx = p;
    p->m.deleter = producer_delete;
    return &p->m;
}

static void test_dlpack(kiln_model *m, kiln_tensor *x, const kiln_tensor *want) {
    kiln_session *s = NULL;
    CHECK(kiln_session_create(m, NULL, &s) == KILN_OK, "session: %s", msg());
    if (!s) return;
    kiln_tensor *y = NULL;
    kiln_tensor_create(ctx, KILN_F32, 2, (int64_t[]){kiln_tensor_dim(want, 0), 10}, &y);
    for (int cl = 0; cl < 2; cl++) {
        int deleted = 0;
        DLManagedTensor *dm = produce(x, cl, &deleted);
        kiln_tensor *xd = NULL;
        CHECK(kiln_tensor_from_dlpack(ctx, dm, &xd) == KILN_OK, "from_dlpack (channels_last %d): %s", cl, msg());
        if (!xd) continue;
        CHECK(kiln_tensor_data(xd) == dm->dl_tensor.data, "no copy: kiln's pointer is the producer's");
        CHECK(kiln_tensor_format(xd) == (cl ? KILN_FORMAT_NHWC : KILN_FORMAT_NCHW), "channels_last strides are NHWC");
        CHECK(kiln_tensor_device(xd, NULL) == KILN_DEVICE_CPU, "kDLCPU is the host");
        CHECK(kiln_session_run_into(s, 1, &xd, 1, &y) == KILN_OK, "run from DLPack: %s", msg());
        CHECK(max_diff(y, want) < 1e-4f, "DLPack input (channels_last %d): output off by %g", cl, max_diff(y, want));
        CHECK(deleted == 0, "the deleter waits for kiln_tensor_free");
        kiln_tensor_free(xd);
        CHECK(deleted == 1, "kiln_tensor_free calls the producer's deleter once (%d)", deleted);
    }

    /* refusals leave the producer's tensor with the caller */
    int deleted = 0;
    DLManagedTensor *dm = produce(x, 0, &deleted);
    kiln_tensor *xd = NULL;
    int64_t saved = dm->dl_tensor.strides[3];
    dm->dl_tensor.strides[3] = 2; /* every other element */
    CHECK(kiln_tensor_from_dlpack(ctx, dm, &xd) == KILN_ERR_UNSUPPORTED && strstr(msg(), "contiguous") && !xd,
          "strided: %s", msg());
    dm->dl_tensor.strides[3] = saved;
    dm->dl_tensor.device.device_type = kDLROCM;
    CHECK(kiln_tensor_from_dlpack(ctx, dm, &xd) == KILN_ERR_UNSUPPORTED && strstr(msg(), "kDLROCM"),
          "a ROCm tensor: %s", msg());
    dm->dl_tensor.device.device_type = kDLCPU;
    dm->dl_tensor.dtype.code = kDLComplex;
    CHECK(kiln_tensor_from_dlpack(ctx, dm, &xd) == KILN_ERR_UNSUPPORTED && strstr(msg(), "dtype"),
          "complex: %s", msg());
    dm->dl_tensor.dtype.code = kDLFloat;
    dm->dl_tensor.dtype.lanes = 4;
    CHECK(kiln_tensor_from_dlpack(ctx, dm, &xd) == KILN_ERR_UNSUPPORTED, "vector lanes: %s", msg());
    dm->dl_tensor.dtype.lanes = 1;
    CHECK(deleted == 0, "a refused import does not delete");
    /* NULL strides are row-major; byte_offset is honoured */
    dm->dl_tensor.strides = NULL;
    CHECK(kiln_tensor_from_dlpack(ctx, dm, &xd) == KILN_OK, "NULL strides: %s", msg());
    if (xd) {
        CHECK(kiln_session_run_into(s, 1, &xd, 1, &y) == KILN_OK && max_diff(y, want) < 1e-4f, "NULL strides run");
        kiln_tensor_free(xd);
    }
    CHECK(deleted == 1, "deleted once");

    /* export: a reference on the tensor, freed in either order */
    for (int order = 0; order < 2; order++) {
        kiln_tensor *t = NULL;
        kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){1, 2, 3, 4}, &t);
        if (order) kiln_tensor_set_format(t, KILN_FORMAT_NHWC);
        for (int i = 0; i < 24; i++) ((float *)kiln_tensor_data(t))[i] = (float)i;
        DLManagedTensor *e = NULL;
        CHECK(kiln_tensor_to_dlpack(ctx, t, &e) == KILN_OK && e, "to_dlpack: %s", msg());
        if (!e) continue;
        CHECK(e->dl_tensor.data == kiln_tensor_data(t) && e->dl_tensor.ndim == 4 && e->dl_tensor.shape[3] == 4 &&
                  e->dl_tensor.dtype.code == kDLFloat && e->dl_tensor.dtype.bits == 32 &&
                  e->dl_tensor.device.device_type == kDLCPU,
              "the export views t");
        const int64_t *st = e->dl_tensor.strides;
        CHECK(order ? (st[0] == 24 && st[1] == 1 && st[2] == 8 && st[3] == 2) : (st[0] == 24 && st[1] == 12 && st[2] == 4 && st[3] == 1),
              "strides (NHWC %d): %lld %lld %lld %lld", order, (long long)st[0], (long long)st[1], (long long)st[2],
              (long long)st[3]);
        /* import the export back: kiln is then both producer and consumer */
        kiln_tensor *back = NULL;
        if (order == 0) {
            kiln_tensor_free(t); /* the export keeps the memory (ASan checks the reads) */
            float sum = 0;
            for (int i = 0; i < 24; i++) sum += ((float *)e->dl_tensor.data)[i];
            CHECK(sum == 276.0f, "the export still reads t's values after kiln_tensor_free(t): %g", sum);
            e->deleter(e);
        } else {
            CHECK(kiln_tensor_from_dlpack(ctx, e, &back) == KILN_OK && kiln_tensor_format(back) == KILN_FORMAT_NHWC,
                  "re-import: %s", msg());
            kiln_tensor_free(back);  /* calls e's deleter: one reference left, t's */
            CHECK(((float *)kiln_tensor_data(t))[23] == 23.0f, "t lives on");
            kiln_tensor_free(t);
        }
    }
    /* a session's own outputs are not exported */
    const kiln_tensor *owned = NULL;
    CHECK(kiln_session_run(s, 1, &x, 1, &owned) == KILN_OK, "run: %s", msg());
    DLManagedTensor *e = NULL;
    CHECK(kiln_tensor_to_dlpack(ctx, (kiln_tensor *)owned, &e) == KILN_ERR_INVALID_ARGUMENT && !e &&
              strstr(msg(), "run_into"),
          "a session's output is refused: %s", msg());
    kiln_tensor_free(y);
    kiln_session_free(s);
}

/* ------------------------------------------------------------ copies, devices */

static void test_copy_and_devices(void) {
    kiln_tensor *a = NULL, *b = NULL, *c = NULL;
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){2, 3, 2, 2}, &a);
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){2, 3, 2, 2}, &b);
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){2, 3, 2, 2}, &c);
    for (int i = 0; i < 24; i++) ((float *)kiln_tensor_data(a))[i] = (float)i;
    kiln_tensor_set_format(b, KILN_FORMAT_NHWC);
    CHECK(kiln_tensor_copy(ctx, a, b) == KILN_OK && kiln_tensor_copy(ctx, b, c) == KILN_OK, "copies: %s", msg());
    CHECK(max_diff(a, c) == 0, "NCHW -> NHWC -> NCHW gives the values back");
    CHECK(((float *)kiln_tensor_data(b))[1] == 4.0f, "b is NHWC (element 1 is c=1: %g)", ((float *)kiln_tensor_data(b))[1]);
    kiln_tensor *d = NULL;
    kiln_tensor_create(ctx, KILN_F16, 4, (int64_t[]){2, 3, 2, 2}, &d);
    CHECK(kiln_tensor_copy(ctx, a, d) == KILN_ERR_TYPE && strstr(msg(), "f16[2,3,2,2]"), "dtype mismatch: %s", msg());
    int idx = -1;
    CHECK(kiln_tensor_device(a, &idx) == KILN_DEVICE_CPU && idx == 0, "a host tensor");
    /* no device here (or no CUDA backend): a clear refusal, nothing made */
    kiln_tensor *g = NULL;
    kiln_status st = kiln_tensor_create_on(ctx, KILN_F32, 1, (int64_t[]){4}, KILN_DEVICE_CUDA, 0, &g);
    if (st == KILN_OK) {
        printf("(a CUDA device is present: tests/gpu/test_cuda_io.c covers device tensors)\n");
        kiln_tensor_free(g);
    } else {
        CHECK((st == KILN_ERR_UNSUPPORTED && strstr(msg(), "without the CUDA backend")) ||
                  (st == KILN_ERR_DEVICE && strstr(msg(), "no CUDA device")),
              "create_on(cuda) without a device: %s", msg());
        CHECK(!g, "nothing made");
    }
    CHECK(kiln_tensor_create_on(ctx, KILN_F32, 1, (int64_t[]){4}, KILN_DEVICE_CPU, 0, &g) == KILN_OK &&
              kiln_tensor_device(g, NULL) == KILN_DEVICE_CPU,
          "create_on(cpu)");
    kiln_tensor_free(g);
    CHECK(kiln_tensor_create_on(ctx, KILN_F32, 1, (int64_t[]){4}, (kiln_device)5, 0, &g) == KILN_ERR_INVALID_ARGUMENT,
          "an unknown device: %s", msg());
    kiln_tensor_free(a);
    kiln_tensor_free(b);
    kiln_tensor_free(c);
    kiln_tensor_free(d);
}

/* ---------------------------------------------------------------------- log */

typedef struct log_rec {
    int n[4];
    char last[4][2048];
} log_rec;

static void on_log(void *user, kiln_log_level level, const char *message) {
    log_rec *r = user;
    r->n[level]++;
    snprintf(r->last[level], sizeof r->last[level], "%s", message);
}

static void test_log(kiln_model *m, kiln_tensor *x) {
    log_rec r;
    memset(&r, 0, sizeof r);
    CHECK(kiln_context_set_log(ctx, KILN_LOG_INFO, on_log, &r) == KILN_OK, "set_log");
    CHECK(kiln_context_set_log(ctx, (kiln_log_level)9, on_log, &r) == KILN_ERR_INVALID_ARGUMENT, "level 9");
    kiln_session *s = NULL;
    const kiln_tensor *y = NULL;
    CHECK(kiln_session_create(m, NULL, &s) == KILN_OK && kiln_session_run(s, 1, &x, 1, &y) == KILN_OK, "run: %s",
          msg());
    CHECK(r.n[KILN_LOG_INFO] == 1 && strstr(r.last[KILN_LOG_INFO], "plan on cpu for x f32[") &&
              strstr(r.last[KILN_LOG_INFO], "nodes"),
          "one INFO line for the plan built (%d): %s", r.n[KILN_LOG_INFO], r.last[KILN_LOG_INFO]);
    CHECK(kiln_session_run(s, 1, &x, 1, &y) == KILN_OK && r.n[KILN_LOG_INFO] == 1, "a reused plan logs nothing");
    CHECK(r.n[KILN_LOG_ERROR] == 0 && r.n[KILN_LOG_DEBUG] == 0, "no errors, no debug at INFO");
    kiln_tensor *bad = NULL;
    kiln_tensor_create(ctx, KILN_F32, 4, (int64_t[]){1, 4, 32, 32}, &bad);
    CHECK(kiln_session_run(s, 1, &bad, 1, &y) == KILN_ERR_SHAPE, "wrong shape");
    CHECK(r.n[KILN_LOG_ERROR] == 1 && strstr(r.last[KILN_LOG_ERROR], msg()) && strstr(r.last[KILN_LOG_ERROR], "shape error"),
          "the failure's message as an ERROR (%d): '%s' vs '%s'", r.n[KILN_LOG_ERROR], r.last[KILN_LOG_ERROR], msg());
    kiln_session *s2 = NULL;
    CHECK(kiln_context_set_log(ctx, KILN_LOG_DEBUG, on_log, &r) == KILN_OK, "set_log debug");
    CHECK(kiln_session_create(m, NULL, &s2) == KILN_OK, "session: %s", msg());
    CHECK(r.n[KILN_LOG_DEBUG] > 0 && strstr(r.last[KILN_LOG_DEBUG], "pass ") && strstr(r.last[KILN_LOG_DEBUG], "nodes"),
          "DEBUG lines for the passes (%d): %s", r.n[KILN_LOG_DEBUG], r.last[KILN_LOG_DEBUG]);
    kiln_session_free(s2);
    CHECK(kiln_context_set_log(ctx, KILN_LOG_ERROR, NULL, NULL) == KILN_OK, "log off");
    CHECK(kiln_session_run(s, 1, &bad, 1, &y) == KILN_ERR_SHAPE && r.n[KILN_LOG_ERROR] == 1, "nothing logged when off");
    kiln_tensor_free(bad);
    kiln_session_free(s);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_embed EXAMPLES_DIR\n");
        return 2;
    }
    char path[4096];
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    kiln_model *m = NULL;
    kiln_tensor *x = NULL, *want = NULL;
    snprintf(path, sizeof path, "%s/tiny_cnn.onnx", argv[1]);
    if (kiln_model_load_onnx(ctx, path, &m) != KILN_OK) {
        printf("FAIL %s\n", msg());
        return 1;
    }
    snprintf(path, sizeof path, "%s/tiny_cnn_x.npy", argv[1]);
    if (kiln_tensor_load_npy(ctx, path, &x) != KILN_OK) return printf("FAIL %s\n", msg()), 1;
    snprintf(path, sizeof path, "%s/tiny_cnn_expected.npy", argv[1]);
    if (kiln_tensor_load_npy(ctx, path, &want) != KILN_OK) return printf("FAIL %s\n", msg()), 1;

    test_options(m);
    test_names(m, x, want);
    test_dlpack(m, x, want);
    test_copy_and_devices();
    test_log(m, x);

    kiln_tensor_free(x);
    kiln_tensor_free(want);
    kiln_model_free(m);
    kiln_context_free(ctx);
    if (fails) {
        printf("%d check(s) failed\n", fails);
        return 1;
    }
    printf("ok: options, names, output info, DLPack, copies, log\n");
    return 0;
}
