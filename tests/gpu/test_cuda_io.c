/* test_cuda_io.c — device IO binding on a CUDA device (ctest label gpu): inputs and outputs
 * in device memory (kiln_tensor_create_on, _wrap_on, DLPack kDLCUDA) give the host run's
 * outputs; with the caller's stream a run is ordered after the work already on it, returns
 * before the GPU is done (so nothing went through the host) and the stream waits for it;
 * a device index the machine lacks, device tensors given to a CPU session and host-only
 * calls given device tensors are refused with messages naming them.
 *
 *   test_cuda_io EXAMPLES_DIR
 */
#include "kiln.h"
#include "kiln_tools.h"

#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fails;
#define CHECK(cond, ...)                                                                                   \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fails++;                                                                                       \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                    \
            printf(__VA_ARGS__);                                                                           \
            printf("\n");                                                                                  \
        } else {                                                                                           \
            printf("ok   ");                                                                               \
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

/* A host function on the stream: holds it for 100 ms. */
static void CUDART_CB hold(void *arg) {
    (void)arg;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static void noop_delete(DLManagedTensor *m) { (void)m; }

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --bench MODEL.onnx BATCH: device IO binding against kiln_session_bench in one process
 * (fp16): runs queued on a caller's stream with an event after each, the median interval,
 * beside the bench's GPU median of the same session. */
static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int bench(const char *path, int64_t batch) {
    kiln_context_create(&ctx);
    kiln_model *m = NULL;
    if (kiln_model_load_onnx(ctx, path, &m)) return printf("FAIL %s\n", msg()), 1;
    kiln_dtype dt;
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    kiln_model_input_info(m, 0, &dt, &nd, dims);
    dims[0] = batch;
    cudaStream_t us;
    cudaStreamCreateWithFlags(&us, cudaStreamNonBlocking);
    const int iters = 500;
    for (int mode = 0; mode < 2; mode++) {
        kiln_session *s = NULL;
        kiln_session_options o = {.device = KILN_DEVICE_CUDA, .precision = KILN_PRECISION_FP16, .stream = mode ? us : NULL};
        if (kiln_session_create(m, &o, &s)) return printf("FAIL %s\n", msg()), 1;
        kiln_tensor *xh = NULL, *xd = NULL, *yd = NULL;
        kiln_tensor_create(ctx, dt, nd, dims, &xh);
        for (int64_t i = 0; i < kiln_tensor_numel(xh) && dt == KILN_F32; i++)
            ((float *)kiln_tensor_data(xh))[i] = (float)((i * 7919) % 1000) / 1000.f;
        kiln_tensor_create_on(ctx, dt, nd, dims, KILN_DEVICE_CUDA, 0, &xd);
        kiln_tensor_copy(ctx, xh, xd);
        kiln_dtype ydt;
        int ynd;
        int64_t ydims[KILN_MAX_DIMS];
        if (kiln_session_output_info(s, 1, &xd, 0, &ydt, &ynd, ydims)) return printf("FAIL %s\n", msg()), 1;
        kiln_tensor_create_on(ctx, ydt, ynd, ydims, KILN_DEVICE_CUDA, 0, &yd);
        for (int i = 0; i < 50; i++) kiln_session_run_into(s, 1, &xd, 1, &yd);
        cudaStream_t q = (cudaStream_t)kiln_session_stream(s);
        cudaStreamSynchronize(q);
        cudaEvent_t ev[501];
        for (int i = 0; i <= iters; i++) cudaEventCreate(&ev[i]);
        cudaEventRecord(ev[0], q);
        for (int i = 0; i < iters; i++) {
            if (kiln_session_run_into(s, 1, &xd, 1, &yd)) return printf("FAIL %s\n", msg()), 1;
            cudaEventRecord(ev[i + 1], q);
        }
        cudaStreamSynchronize(q);
        float t[500];
        for (int i = 0; i < iters; i++) cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]);
        qsort(t, (size_t)iters, sizeof t[0], cmp_f);
        kiln_bench_times bt = {.run_ms = calloc(iters, sizeof(double)), .compute_ms = calloc(iters, sizeof(double))};
        if (kiln_session_bench(s, 1, &xh, 10, iters, &bt)) return printf("FAIL %s\n", msg()), 1;
        qsort(bt.compute_ms, (size_t)iters, sizeof(double), cmp_d);
        printf("%s: device IO %s, median %.4f ms a run (min %.4f); kiln_session_bench GPU median %.4f ms (ratio %.3f)\n",
               path, mode ? "on the caller's stream" : "on kiln's stream (each run waited for)", t[iters / 2], t[0],
               bt.compute_ms[iters / 2], t[iters / 2] / bt.compute_ms[iters / 2]);
        for (int i = 0; i <= iters; i++) cudaEventDestroy(ev[i]);
        free(bt.run_ms);
        free(bt.compute_ms);
        kiln_tensor_free(xh);
        kiln_tensor_free(xd);
        kiln_tensor_free(yd);
        kiln_session_free(s);
    }
    kiln_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--bench")) return bench(argv[2], atoll(argv[3]));
    if (argc != 2) return fprintf(stderr, "usage: test_cuda_io EXAMPLES_DIR | --bench MODEL.onnx BATCH\n"), 2;
    char path[4096];
    kiln_context_create(&ctx);
    kiln_model *m = NULL;
    kiln_tensor *x = NULL, *want = NULL;
    snprintf(path, sizeof path, "%s/tiny_cnn.onnx", argv[1]);
    if (kiln_model_load_onnx(ctx, path, &m)) return printf("FAIL %s\n", msg()), 1;
    snprintf(path, sizeof path, "%s/tiny_cnn_x.npy", argv[1]);
    if (kiln_tensor_load_npy(ctx, path, &x)) return printf("FAIL %s\n", msg()), 1;
    snprintf(path, sizeof path, "%s/tiny_cnn_expected.npy", argv[1]);
    if (kiln_tensor_load_npy(ctx, path, &want)) return printf("FAIL %s\n", msg()), 1;
    const int64_t N = kiln_tensor_dim(x, 0);
    const int64_t ydims[2] = {N, 10};

    /* device tensors: x copied in, y written on the device, copied out */
    kiln_tensor *xd = NULL, *yd = NULL, *yh = NULL;
    CHECK(kiln_tensor_create_on(ctx, KILN_F32, 4, (int64_t[]){N, 3, 32, 32}, KILN_DEVICE_CUDA, 0, &xd) == KILN_OK &&
              kiln_tensor_create_on(ctx, KILN_F32, 2, ydims, KILN_DEVICE_CUDA, 0, &yd) == KILN_OK,
          "create_on(cuda:0) %s", msg());
    kiln_tensor_create(ctx, KILN_F32, 2, ydims, &yh);
    if (!xd || !yd) return 1;
    int idx = -1;
    CHECK(kiln_tensor_device(xd, &idx) == KILN_DEVICE_CUDA && idx == 0, "a CUDA tensor on device 0");
    struct cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, kiln_tensor_data(xd)) == cudaSuccess && pa.type == cudaMemoryTypeDevice,
          "its data is device memory");
    CHECK(kiln_tensor_copy(ctx, x, xd) == KILN_OK, "host -> device copy %s", msg());

    kiln_session *s = NULL;
    kiln_session_options o = {.device = KILN_DEVICE_CUDA, .strict_fp32 = 1};
    CHECK(kiln_session_create(m, &o, &s) == KILN_OK, "CUDA session %s", msg());
    if (!s) return 1;
    CHECK(kiln_session_stream(s) != NULL, "kiln_session_stream gives kiln's stream");
    CHECK(kiln_session_run_into(s, 1, &xd, 1, &yd) == KILN_OK, "run_into with device input and output %s", msg());
    CHECK(kiln_tensor_copy(ctx, yd, yh) == KILN_OK && max_diff(yh, want) < 1e-4f,
          "device IO gives the reference (max diff %g)", max_diff(yh, want));
    /* mixed: device input, host output; host input, device output */
    memset(kiln_tensor_data(yh), 0, kiln_tensor_nbytes(yh));
    CHECK(kiln_session_run_into(s, 1, &xd, 1, &yh) == KILN_OK && max_diff(yh, want) < 1e-4f,
          "device input, host output %s", msg());
    CHECK(cudaMemset(kiln_tensor_data(yd), 0, kiln_tensor_nbytes(yd)) == cudaSuccess &&
              kiln_session_run_into(s, 1, &x, 1, &yd) == KILN_OK && kiln_tensor_copy(ctx, yd, yh) == KILN_OK &&
              max_diff(yh, want) < 1e-4f,
          "host input, device output %s", msg());
    const kiln_tensor *owned = NULL;
    CHECK(kiln_session_run(s, 1, &xd, 1, &owned) == KILN_OK && max_diff(owned, want) < 1e-4f,
          "kiln_session_run from a device input %s", msg());
    /* the device-IO graph re-pointed: other device tensors, same values */
    {
        kiln_tensor *x2 = NULL, *y2 = NULL;
        kiln_tensor_create_on(ctx, KILN_F32, 4, (int64_t[]){N, 3, 32, 32}, KILN_DEVICE_CUDA, 0, &x2);
        kiln_tensor_create_on(ctx, KILN_F32, 2, ydims, KILN_DEVICE_CUDA, 0, &y2);
        kiln_tensor_copy(ctx, x, x2);
        for (int r = 0; r < 3; r++) {
            kiln_tensor *xi = r % 2 ? x2 : xd, *yo = r % 2 ? yd : y2;
            cudaMemset(kiln_tensor_data(yo), 0, kiln_tensor_nbytes(yo));
            memset(kiln_tensor_data(yh), 0, kiln_tensor_nbytes(yh));
            CHECK(kiln_session_run_into(s, 1, &xi, 1, &yo) == KILN_OK && kiln_tensor_copy(ctx, yo, yh) == KILN_OK &&
                      max_diff(yh, want) < 1e-4f,
                  "run %d with other device buffers (max diff %g) %s", r, max_diff(yh, want), msg());
        }
        kiln_tensor_free(x2);
        kiln_tensor_free(y2);
    }
    /* by name */
    const char *in_names[] = {"x"}, *out_names[] = {"probs"};
    CHECK(kiln_session_run_named(s, 1, in_names, &xd, 1, out_names, &yd) == KILN_OK, "run_named on the device %s",
          msg());
    /* a wrong device output shape */
    kiln_tensor *ybad = NULL;
    kiln_tensor_create_on(ctx, KILN_F32, 2, (int64_t[]){N, 9}, KILN_DEVICE_CUDA, 0, &ybad);
    CHECK(kiln_session_run_into(s, 1, &xd, 1, &ybad) == KILN_ERR_SHAPE && strstr(msg(), "probs"),
          "a device output of the wrong shape: %s", msg());
    kiln_tensor_free(ybad);

    /* DLPack over cudaMalloc'd memory */
    float *raw = NULL;
    cudaMalloc((void **)&raw, kiln_tensor_nbytes(x));
    cudaMemcpy(raw, kiln_tensor_data(x), kiln_tensor_nbytes(x), cudaMemcpyHostToDevice);
    int64_t shape[4] = {N, 3, 32, 32};
    DLManagedTensor dm = {.dl_tensor = {.data = raw,
                                        .device = {.device_type = kDLCUDA, .device_id = 0},
                                        .ndim = 4,
                                        .dtype = {.code = kDLFloat, .bits = 32, .lanes = 1},
                                        .shape = shape},
                          .deleter = noop_delete};
    kiln_tensor *xdl = NULL;
    CHECK(kiln_tensor_from_dlpack(ctx, &dm, &xdl) == KILN_OK && kiln_tensor_data(xdl) == raw &&
              kiln_tensor_device(xdl, NULL) == KILN_DEVICE_CUDA,
          "kDLCUDA imported without a copy %s", msg());
    memset(kiln_tensor_data(yh), 0, kiln_tensor_nbytes(yh));
    CHECK(kiln_session_run_into(s, 1, &xdl, 1, &yh) == KILN_OK && max_diff(yh, want) < 1e-4f,
          "run from the DLPack device tensor %s", msg());
    DLManagedTensor *ex = NULL;
    CHECK(kiln_tensor_to_dlpack(ctx, yd, &ex) == KILN_OK && ex->dl_tensor.device.device_type == kDLCUDA &&
              ex->dl_tensor.data == kiln_tensor_data(yd),
          "a device tensor exports as kDLCUDA at the same pointer %s", msg());
    if (ex) ex->deleter(ex);
    kiln_tensor_free(xdl);

    /* refusals */
    CHECK(kiln_tensor_save_npy(ctx, yd, "/tmp/never.npy") == KILN_ERR_UNSUPPORTED && strstr(msg(), "cuda:0"),
          "save_npy of a device tensor: %s", msg());
    kiln_session *cpu = NULL;
    kiln_session_create(m, NULL, &cpu);
    const kiln_tensor *cy = NULL;
    CHECK(kiln_session_run(cpu, 1, &xd, 1, &cy) == KILN_ERR_INVALID_ARGUMENT && strstr(msg(), "cuda:0") &&
              strstr(msg(), "CPU"),
          "a CPU session refuses a device input: %s", msg());
    kiln_session_free(cpu);
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    kiln_session *far = NULL;
    kiln_session_options of = {.device = KILN_DEVICE_CUDA, .device_index = ndev};
    CHECK(kiln_session_create(m, &of, &far) == KILN_ERR_DEVICE && strstr(msg(), "no CUDA device") && !far,
          "device_index %d (this machine has %d): %s", ndev, ndev, msg());
    kiln_tensor *nod = NULL;
    CHECK(kiln_tensor_create_on(ctx, KILN_F32, 1, (int64_t[]){1}, KILN_DEVICE_CUDA, ndev, &nod) == KILN_ERR_DEVICE,
          "a tensor on device %d: %s", ndev, msg());

    /* the caller's stream: a run ordered after the stream's work, returning before it */
    cudaStream_t us = NULL;
    cudaStreamCreateWithFlags(&us, cudaStreamNonBlocking);
    kiln_session *ss = NULL;
    kiln_session_options os = {.device = KILN_DEVICE_CUDA, .strict_fp32 = 1, .stream = us};
    CHECK(kiln_session_create(m, &os, &ss) == KILN_OK && kiln_session_stream(ss) == (void *)us,
          "a session on the caller's stream %s", msg());
    float *pinned = NULL;
    cudaMallocHost((void **)&pinned, kiln_tensor_nbytes(x));
    memcpy(pinned, kiln_tensor_data(x), kiln_tensor_nbytes(x));
    /* warm: plan, autotune, capture */
    for (int i = 0; i < 3; i++) kiln_session_run_into(ss, 1, &xd, 1, &yd);
    cudaStreamSynchronize(us);
    cudaMemset(kiln_tensor_data(xd), 0, kiln_tensor_nbytes(xd));
    cudaMemset(kiln_tensor_data(yd), 0, kiln_tensor_nbytes(yd));
    cudaDeviceSynchronize();
    /* on the stream: 100 ms on hold, then x's values arrive; kiln must read them after */
    cudaLaunchHostFunc(us, hold, NULL);
    cudaMemcpyAsync(kiln_tensor_data(xd), pinned, kiln_tensor_nbytes(x), cudaMemcpyHostToDevice, us);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kiln_status st = kiln_session_run_into(ss, 1, &xd, 1, &yd);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    const cudaError_t pending = cudaStreamQuery(us);
    CHECK(st == KILN_OK && ms < 50 && pending == cudaErrorNotReady,
          "with the caller's stream the run returned in %.2f ms, the stream still busy (%s): no host wait, no host "
          "copy %s",
          ms, cudaGetErrorName(pending), msg());
    cudaStreamSynchronize(us);
    CHECK(kiln_tensor_copy(ctx, yd, yh) == KILN_OK && max_diff(yh, want) < 1e-4f,
          "and it read x after the stream's copy (max diff %g)", max_diff(yh, want));
    cudaFreeHost(pinned);
    kiln_session_free(ss);
    cudaStreamDestroy(us);

    kiln_session_free(s);
    cudaFree(raw);
    kiln_tensor_free(xd);
    kiln_tensor_free(yd);
    kiln_tensor_free(yh);
    kiln_tensor_free(x);
    kiln_tensor_free(want);
    kiln_model_free(m);
    kiln_context_free(ctx);
    printf("%s\n", fails ? "FAILED" : "ok: device IO binding");
    return fails ? 1 : 0;
}
