/*
 * nvjpeg.c — JPEG decoding on the GPU for streamed image folders (data.h, "GPU JPEG
 * decoding"): nvJPEG, loaded at run time, decodes a batch's files with its batched API
 * (the hardware backend, the A100/H100 JPEG engines, where nvjpegCreateEx takes it; else
 * the GPU-assisted hybrid backend) into one device arena, interleaved RGB; then one kernel
 * (jpeg_augment.cu) resamples each image's box, flips and normalizes it into the batch.
 *
 * Everything runs on a stream of our own; a run returns once its batch is complete, so
 * the host buffers it read (files, the item table, the workers' CPU-decoded images) are
 * free again. The batch goes to one of three device buffers, each reused only after the
 * consumer's stream passed the point where the batch was released (an event), so decoding
 * batch i+1 overlaps the training step of batch i on the GPU.
 *
 * The library: KILN_NVJPEG_LIB (the file, or the folder holding libnvjpeg.so.13), the
 * loader's path, then the folder the build found the pip package in, then pip packages
 * (nvidia/cu13/lib) under the usual site-packages folders. The declarations used are
 * kiln's own (so the build needs no nvjpeg.h); where the build found nvjpeg.h, they are
 * checked against it at compile time.
 *
 * Failures: a file nvJPEG's batched path does not take (nvjpegDecodeBatchedSupported, or
 * the whole batch's decode failing, e.g. a damaged file) sends the batch's images through
 * the CPU path (cpu_fallback), whose error names the file. KILN_NVJPEG_LOG=1 prints the
 * backend chosen and each batch's timings to stderr; KILN_NVJPEG_BACKEND=hardware|hybrid|
 * default forces a backend.
 */
#include "../data/data.h"
#include "jpeg_gpu.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#ifdef KILN_HAVE_NVJPEG_H
#include <nvjpeg.h>
typedef nvjpegHandle_t kj_handle;
typedef nvjpegJpegState_t kj_state;
typedef nvjpegJpegStream_t kj_jstream;
typedef nvjpegImage_t kj_image;
typedef nvjpegStatus_t kj_status;
typedef nvjpegBackend_t kj_backend;
typedef nvjpegOutputFormat_t kj_format;
typedef nvjpegDevAllocator_t kj_dev_alloc;
typedef nvjpegPinnedAllocator_t kj_pin_alloc;
#define KJ_SAME(fn, type) _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), type), #fn " differs from nvjpeg.h");
_Static_assert(NVJPEG_BACKEND_HARDWARE == 3 && NVJPEG_BACKEND_GPU_HYBRID == 2 && NVJPEG_OUTPUT_RGBI == 5 &&
                   NVJPEG_STATUS_SUCCESS == 0,
               "nvjpeg.h's values differ from kiln's");
#else
typedef struct kj_handle_s *kj_handle;
typedef struct kj_state_s *kj_state;
typedef struct kj_jstream_s *kj_jstream;
typedef struct {
    unsigned char *channel[4];
    size_t pitch[4];
} kj_image;
typedef int kj_status;
typedef int kj_backend;
typedef int kj_format;
typedef struct kj_dev_alloc_s kj_dev_alloc;
typedef struct kj_pin_alloc_s kj_pin_alloc;
#define KJ_SAME(fn, type)
#endif

enum { KJ_BACKEND_DEFAULT = 0, KJ_BACKEND_GPU_HYBRID = 2, KJ_BACKEND_HARDWARE = 3, KJ_OUTPUT_RGBI = 5 };

typedef kj_status (*kj_get_property_fn)(int, int *);
typedef kj_status (*kj_create_ex_fn)(kj_backend, kj_dev_alloc *, kj_pin_alloc *, unsigned int, kj_handle *);
typedef kj_status (*kj_destroy_fn)(kj_handle);
typedef kj_status (*kj_state_create_fn)(kj_handle, kj_state *);
typedef kj_status (*kj_state_destroy_fn)(kj_state);
typedef kj_status (*kj_batched_init_fn)(kj_handle, kj_state, int, int, kj_format);
typedef kj_status (*kj_batched_fn)(kj_handle, kj_state, const unsigned char *const *, const size_t *, kj_image *,
                                   cudaStream_t);
typedef kj_status (*kj_stream_create_fn)(kj_handle, kj_jstream *);
typedef kj_status (*kj_stream_destroy_fn)(kj_jstream);
typedef kj_status (*kj_parse_header_fn)(kj_handle, const unsigned char *, size_t, kj_jstream);
typedef kj_status (*kj_batched_supported_fn)(kj_handle, kj_jstream, int *);

#ifdef KILN_HAVE_NVJPEG_H
KJ_SAME(nvjpegCreateEx, kj_create_ex_fn)
KJ_SAME(nvjpegDestroy, kj_destroy_fn)
KJ_SAME(nvjpegJpegStateCreate, kj_state_create_fn)
KJ_SAME(nvjpegJpegStateDestroy, kj_state_destroy_fn)
KJ_SAME(nvjpegDecodeBatchedInitialize, kj_batched_init_fn)
KJ_SAME(nvjpegDecodeBatched, kj_batched_fn)
KJ_SAME(nvjpegJpegStreamCreate, kj_stream_create_fn)
KJ_SAME(nvjpegJpegStreamDestroy, kj_stream_destroy_fn)
KJ_SAME(nvjpegJpegStreamParseHeader, kj_parse_header_fn)
KJ_SAME(nvjpegDecodeBatchedSupported, kj_batched_supported_fn)
_Static_assert(sizeof(kj_image) == 4 * sizeof(void *) + 4 * sizeof(size_t), "nvjpegImage_t's size");
#endif

static struct {
    bool ok;
    char why[700], path[640];
    int version[3];
    kj_get_property_fn get_property;
    kj_create_ex_fn create_ex;
    kj_destroy_fn destroy;
    kj_state_create_fn state_create;
    kj_state_destroy_fn state_destroy;
    kj_batched_init_fn batched_init;
    kj_batched_fn batched;
    kj_stream_create_fn stream_create;       /* optional (with the two below): the */
    kj_stream_destroy_fn stream_destroy;     /* hardware backend's per-file check */
    kj_parse_header_fn parse_header;
    kj_batched_supported_fn batched_supported;
} nj;
static pthread_once_t nj_once = PTHREAD_ONCE_INIT;

static bool log_on(void) {
    const char *e = getenv("KILN_NVJPEG_LOG");
    return e && *e && strcmp(e, "0") != 0;
}

static void *try_open(const char *path, char *tried, size_t n) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    size_t at = strlen(tried);
    if (!h && at + 4 < n) snprintf(tried + at, n - at, "%s%s", at ? ", " : "", path);
    if (h) snprintf(nj.path, sizeof nj.path, "%s", path);
    return h;
}

/* libnvjpeg.so.13 in the pip packages' folders (nvidia/cu13/lib), first match */
static void *try_glob(const char *pattern, char *tried, size_t n) {
    glob_t g;
    void *h = NULL;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && !h; i++) h = try_open(g.gl_pathv[i], tried, n);
        globfree(&g);
    }
    return h;
}

static void nj_load(void) {
    char tried[1024] = "";
    void *h = NULL;
    const char *env = getenv("KILN_NVJPEG_LIB");
    if (env && *env) {
        struct stat sb;
        char p[600];
        if (stat(env, &sb) == 0 && S_ISDIR(sb.st_mode)) {
            snprintf(p, sizeof p, "%s/libnvjpeg.so.13", env);
            h = try_open(p, tried, sizeof tried);
            if (!h) {
                snprintf(p, sizeof p, "%s/nvidia/cu13/lib/libnvjpeg.so.13", env); /* an unpacked wheel */
                h = try_open(p, tried, sizeof tried);
            }
        } else {
            h = try_open(env, tried, sizeof tried);
        }
    }
    if (!h) h = try_open("libnvjpeg.so.13", tried, sizeof tried);
#ifdef KILN_NVJPEG_LIB_DIR
    if (!h) h = try_open(KILN_NVJPEG_LIB_DIR "/libnvjpeg.so.13", tried, sizeof tried);
#endif
    const char *venv = getenv("VIRTUAL_ENV"), *home = getenv("HOME");
    char pat[600];
    if (!h && venv) {
        snprintf(pat, sizeof pat, "%s/lib/python3*/site-packages/nvidia/cu13/lib/libnvjpeg.so.13", venv);
        h = try_glob(pat, tried, sizeof tried);
    }
    if (!h && home) {
        snprintf(pat, sizeof pat, "%s/.local/lib/python3*/site-packages/nvidia/cu13/lib/libnvjpeg.so.13", home);
        h = try_glob(pat, tried, sizeof tried);
    }
    if (!h) h = try_glob("/usr/local/lib/python3*/dist-packages/nvidia/cu13/lib/libnvjpeg.so.13", tried, sizeof tried);
    if (!h) h = try_glob("/usr/lib/python3*/dist-packages/nvidia/cu13/lib/libnvjpeg.so.13", tried, sizeof tried);
    if (!h) h = try_glob("/usr/local/lib/python3*/site-packages/nvidia/cu13/lib/libnvjpeg.so.13", tried, sizeof tried);
    if (!h) {
        snprintf(nj.why, sizeof nj.why, "nvJPEG not found (tried KILN_NVJPEG_LIB, libnvjpeg.so.13 and pip's "
                                        "nvidia/cu13/lib; pip install nvidia-nvjpeg, or KILN_NVJPEG_LIB=<its lib folder>)");
        return;
    }
#define NJ_SYM(field, name) (nj.field = (__typeof__(nj.field))dlsym(h, name))
    bool ok = NJ_SYM(create_ex, "nvjpegCreateEx") && NJ_SYM(destroy, "nvjpegDestroy") &&
              NJ_SYM(state_create, "nvjpegJpegStateCreate") && NJ_SYM(state_destroy, "nvjpegJpegStateDestroy") &&
              NJ_SYM(batched_init, "nvjpegDecodeBatchedInitialize") && NJ_SYM(batched, "nvjpegDecodeBatched");
    NJ_SYM(get_property, "nvjpegGetProperty");
    if (!(NJ_SYM(stream_create, "nvjpegJpegStreamCreate") && NJ_SYM(stream_destroy, "nvjpegJpegStreamDestroy") &&
          NJ_SYM(parse_header, "nvjpegJpegStreamParseHeader") && NJ_SYM(batched_supported, "nvjpegDecodeBatchedSupported")))
        nj.batched_supported = NULL;
#undef NJ_SYM
    if (!ok) {
        snprintf(nj.why, sizeof nj.why, "nvJPEG at %s lacks the batched decoding API", nj.path);
        dlclose(h);
        return;
    }
    for (int i = 0; i < 3 && nj.get_property; i++) nj.get_property(i, &nj.version[i]);
    nj.ok = true;
}

bool kiln_nvjpeg_load(char *why, size_t n) {
    pthread_once(&nj_once, nj_load);
    int count = 0;
    if (nj.ok && (cudaGetDeviceCount(&count) != cudaSuccess || count < 1)) {
        if (why && n) snprintf(why, n, "no CUDA device");
        return false;
    }
    if (!nj.ok && why && n) snprintf(why, n, "%s", nj.why);
    return nj.ok;
}

/* ------------------------------------------------------------------ decoder */

enum { NBUF = 3 };
/* The decoded images of one batch at most (ImageNet's batch of 256: ~100 MB) */
#define ARENA_MAX ((size_t)1 << 30)

struct kiln_jpeg_gpu {
    int device;
    int64_t batch;
    int size;
    float scale[3], shift[3];
    kj_handle h;
    kj_state state;
    kj_jstream js;
    int backend;             /* KJ_BACKEND_* in use */
    bool any_ok;             /* a batch decoded: the backend works */
    bool warned;             /* a refused batch was reported */
    cudaStream_t stream;
    cudaEvent_t ev[3];       /* start (after the wait for a buffer), decoded, done */
    float *buf[NBUF];        /* (batch, 3, size, size) */
    cudaEvent_t done[NBUF];  /* the consumer released buf[k] */
    bool held[NBUF], recorded[NBUF];
    int next_buf;
    unsigned char *arena;    /* the decoded images */
    size_t arena_cap;
    kiln_jpeg_item *items_h; /* (batch) pinned */
    kiln_jpeg_item *items_d; /* (batch) */
    const unsigned char **ptrs;
    size_t *lens;
    kj_image *dests;
    int64_t *pick;           /* (batch) the job of each nvJPEG image */
    bool *host_done;         /* (batch) job decoded on the host */
    void *consumer;          /* cudaStream_t */
    pthread_mutex_t mu;      /* held/recorded/consumer/stats against kiln_jpeg_gpu_done */
    kiln_jpeg_gpu_stats st;
    int64_t batches;
};

static const char *backend_name(int b) {
    return b == KJ_BACKEND_HARDWARE ? "hardware" : b == KJ_BACKEND_GPU_HYBRID ? "GPU hybrid" : "default";
}

static kiln_status cu_fail(kiln_context *ctx, cudaError_t e, const char *what) {
    return kiln_fail(ctx, e == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_DEVICE,
                     "GPU JPEG decoding: %s: %s", what, cudaGetErrorString(e));
}

static void destroy_handle(kiln_jpeg_gpu *g) {
    if (g->js) nj.stream_destroy(g->js);
    if (g->state) nj.state_destroy(g->state);
    if (g->h) nj.destroy(g->h);
    g->js = NULL;
    g->state = NULL;
    g->h = NULL;
}

/* A handle and state on the first backend of `order` that nvjpegCreateEx takes. */
static kiln_status create_handle(kiln_jpeg_gpu *g, kiln_context *ctx, const int *order, int n) {
    kj_status last = 0;
    for (int i = 0; i < n; i++) {
        kj_handle h = NULL;
        last = nj.create_ex((kj_backend)order[i], NULL, NULL, 0, &h);
        if (log_on())
            fprintf(stderr, "kiln nvjpeg: nvjpegCreateEx(%s) = %d\n", backend_name(order[i]), (int)last);
        if (last != 0 || !h) continue;
        kj_state s = NULL;
        last = nj.state_create(h, &s);
        if (last != 0) {
            nj.destroy(h);
            continue;
        }
        g->h = h;
        g->state = s;
        g->backend = order[i];
        if (nj.batched_supported && order[i] == KJ_BACKEND_HARDWARE && nj.stream_create(h, &g->js) != 0) g->js = NULL;
        snprintf(g->st.backend, sizeof g->st.backend, "%s", backend_name(order[i]));
        return KILN_OK;
    }
    return kiln_fail(ctx, KILN_ERR_DEVICE, "GPU JPEG decoding: nvjpegCreateEx failed for every backend (status %d)",
                     (int)last);
}

void kiln_jpeg_gpu_free(kiln_jpeg_gpu *g) {
    if (!g) return;
    cudaSetDevice(g->device);
    if (g->stream) cudaStreamSynchronize(g->stream);
    destroy_handle(g);
    for (int k = 0; k < NBUF; k++) {
        if (g->buf[k]) cudaFree(g->buf[k]);
        if (g->done[k]) cudaEventDestroy(g->done[k]);
    }
    for (int k = 0; k < 3; k++)
        if (g->ev[k]) cudaEventDestroy(g->ev[k]);
    if (g->arena) cudaFree(g->arena);
    if (g->items_d) cudaFree(g->items_d);
    if (g->items_h) cudaFreeHost(g->items_h);
    if (g->stream) cudaStreamDestroy(g->stream);
    free(g->ptrs);
    free(g->lens);
    free(g->dests);
    free(g->pick);
    free(g->host_done);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

kiln_status kiln_jpeg_gpu_create(kiln_context *ctx, int device_index, int64_t batch, int size, const float mean[3],
                                 const float std[3], kiln_jpeg_gpu **out) {
    *out = NULL;
    char why[400];
    if (!kiln_nvjpeg_load(why, sizeof why)) return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s", why);
    if (batch < 1 || size < 1) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "GPU JPEG decoding: batch and size >= 1");
    kiln_jpeg_gpu *g = kiln_calloc(ctx, 1, sizeof *g, "the GPU JPEG decoder");
    if (!g) return KILN_ERR_OUT_OF_MEMORY;
    if (pthread_mutex_init(&g->mu, NULL)) {
        free(g);
        return kiln_fail(ctx, KILN_ERR_INTERNAL, "GPU JPEG decoding: cannot create a lock");
    }
    g->device = device_index;
    g->batch = batch;
    g->size = size;
    for (int c = 0; c < 3; c++) { /* as store_to computes them */
        g->scale[c] = 1.f / (255.f * std[c]);
        g->shift[c] = mean[c] / std[c];
    }
    kiln_status st = KILN_OK;
    cudaError_t ce = cudaSetDevice(device_index);
    if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    for (int k = 0; k < 3 && ce == cudaSuccess; k++) ce = cudaEventCreate(&g->ev[k]);
    const size_t bytes = sizeof(float) * 3 * (size_t)size * (size_t)size * (size_t)batch;
    for (int k = 0; k < NBUF && ce == cudaSuccess; k++) {
        ce = cudaMalloc((void **)&g->buf[k], bytes);
        if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&g->done[k], cudaEventDisableTiming);
    }
    if (ce == cudaSuccess) ce = cudaMalloc((void **)&g->items_d, sizeof(kiln_jpeg_item) * (size_t)batch);
    if (ce == cudaSuccess) ce = cudaHostAlloc((void **)&g->items_h, sizeof(kiln_jpeg_item) * (size_t)batch, 0);
    if (ce != cudaSuccess) st = cu_fail(ctx, ce, "setting up");
    if (!st) {
        g->ptrs = calloc((size_t)batch, sizeof *g->ptrs);
        g->lens = calloc((size_t)batch, sizeof *g->lens);
        g->dests = calloc((size_t)batch, sizeof *g->dests);
        g->pick = calloc((size_t)batch, sizeof *g->pick);
        g->host_done = calloc((size_t)batch, sizeof *g->host_done);
        if (!g->ptrs || !g->lens || !g->dests || !g->pick || !g->host_done)
            st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "GPU JPEG decoding: out of memory");
    }
    if (!st) {
        const char *fb = getenv("KILN_NVJPEG_BACKEND");
        const int all[] = {KJ_BACKEND_HARDWARE, KJ_BACKEND_GPU_HYBRID, KJ_BACKEND_DEFAULT};
        int one[1];
        const int *order = all;
        int n = 3;
        if (fb && *fb) {
            one[0] = !strcmp(fb, "hardware") ? KJ_BACKEND_HARDWARE : !strcmp(fb, "hybrid") ? KJ_BACKEND_GPU_HYBRID
                                                                                            : KJ_BACKEND_DEFAULT;
            order = one;
            n = 1;
        }
        st = create_handle(g, ctx, order, n);
    }
    if (st) {
        kiln_jpeg_gpu_free(g);
        return st;
    }
    if (log_on())
        fprintf(stderr, "kiln nvjpeg: %s (version %d.%d.%d), backend %s, device %d, batch %lld, %dx%d, %s check\n",
                nj.path, nj.version[0], nj.version[1], nj.version[2], g->st.backend, device_index, (long long)batch, size,
                size, g->js ? "per-file hardware" : "no per-file");
    *out = g;
    return KILN_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* nvJPEG's batched decode of the m files picked, into the arena. */
static kj_status decode(kiln_jpeg_gpu *g, int m) {
    kj_status s = nj.batched_init(g->h, g->state, m, 1, (kj_format)KJ_OUTPUT_RGBI);
    if (s == 0) s = nj.batched(g->h, g->state, g->ptrs, g->lens, g->dests, g->stream);
    return s;
}

kiln_status kiln_jpeg_gpu_run(kiln_jpeg_gpu *g, kiln_context *ctx, const unsigned char *bytes, const kiln_jpeg_job *jobs,
                              int64_t n, float *host,
                              kiln_status (*cpu_fallback)(void *arg, kiln_context *ctx, int64_t i, float *dst),
                              void *arg, float **out) {
    *out = NULL;
    if (n < 1 || n > g->batch) return kiln_fail(ctx, KILN_ERR_INTERNAL, "GPU JPEG decoding: a batch of %lld", (long long)n);
    const double t0 = now_s();
    const size_t per = 3 * (size_t)g->size * (size_t)g->size;
    cudaError_t ce = cudaSetDevice(g->device);
    if (ce != cudaSuccess) return cu_fail(ctx, ce, "cudaSetDevice");
    kiln_status st = KILN_OK;
    /* the files nvJPEG takes; hardware: each checked by nvjpegDecodeBatchedSupported (0 = yes) */
    int m = 0;
    size_t need = 0;
    int64_t host_n = 0, unsupported = 0;
    for (int64_t i = 0; i < n; i++) {
        g->host_done[i] = jobs[i].size == 0;
        if (g->host_done[i]) {
            host_n++;
            continue;
        }
        const size_t bytes_i = ((size_t)jobs[i].w * 3 * (size_t)jobs[i].h + 255) & ~(size_t)255;
        if (need + bytes_i > ARENA_MAX) {
            /* a batch of very large images: those past the arena's bound decode on the host */
            unsupported++;
            st = cpu_fallback(arg, ctx, i, host + (size_t)i * per);
            if (st) return st;
            g->host_done[i] = true;
            continue;
        }
        if (g->js) {
            int unsup = 1;
            if (nj.parse_header(g->h, bytes + jobs[i].offset, jobs[i].size, g->js) != 0 ||
                nj.batched_supported(g->h, g->js, &unsup) != 0 || unsup != 0) {
                unsupported++;
                st = cpu_fallback(arg, ctx, i, host + (size_t)i * per);
                if (st) return st;
                g->host_done[i] = true;
                continue;
            }
        }
        g->pick[m++] = i;
        need += bytes_i;
    }
    if (need > g->arena_cap) {
        /* grown (rarely): the previous batch's kernel may still read the old arena */
        cudaStreamSynchronize(g->stream);
        if (g->arena) cudaFree(g->arena);
        g->arena = NULL;
        g->arena_cap = 0;
        const size_t cap = need + need / 4;
        ce = cudaMalloc((void **)&g->arena, cap);
        if (ce != cudaSuccess) return cu_fail(ctx, ce, "the decoded images' memory");
        g->arena_cap = cap;
    }
    size_t at = 0;
    for (int k = 0; k < m; k++) {
        const kiln_jpeg_job *j = &jobs[g->pick[k]];
        g->ptrs[k] = bytes + j->offset;
        g->lens[k] = j->size;
        memset(&g->dests[k], 0, sizeof g->dests[k]);
        g->dests[k].channel[0] = g->arena + at;
        g->dests[k].pitch[0] = (size_t)j->w * 3;
        at += ((size_t)j->w * 3 * (size_t)j->h + 255) & ~(size_t)255;
    }
    /* the output buffer: one the consumer has released, after its stream passed that point */
    pthread_mutex_lock(&g->mu);
    int k = -1;
    for (int t = 0; t < NBUF && k < 0; t++)
        if (!g->held[(g->next_buf + t) % NBUF]) k = (g->next_buf + t) % NBUF;
    if (k >= 0) {
        g->held[k] = true;
        g->next_buf = (k + 1) % NBUF;
        if (g->recorded[k]) ce = cudaStreamWaitEvent(g->stream, g->done[k], 0);
    }
    pthread_mutex_unlock(&g->mu);
    if (k < 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "GPU JPEG decoding: %d batches are held; release one first", NBUF);
    if (ce != cudaSuccess) st = cu_fail(ctx, ce, "cudaStreamWaitEvent");
    const bool lg = log_on();
    const double t_parse = now_s() - t0; /* the host's part before any GPU work (the hardware checks) */
    if (!st && (ce = cudaEventRecord(g->ev[0], g->stream)) != cudaSuccess) st = cu_fail(ctx, ce, "cudaEventRecord");
    kj_status ds = 0;
    if (!st && m > 0) {
        ds = decode(g, m);
        if (ds != 0 && g->backend == KJ_BACKEND_HARDWARE && !g->any_ok && ds != 3 && ds != 4 && ds != 10) {
            /* the hardware backend failing on its first batch (not a file's fault): the
             * hybrid backend from here on */
            fprintf(stderr, "kiln: nvJPEG's hardware backend failed (status %d); using its GPU hybrid backend\n",
                    (int)ds);
            cudaStreamSynchronize(g->stream);
            destroy_handle(g);
            const int order[] = {KJ_BACKEND_GPU_HYBRID, KJ_BACKEND_DEFAULT};
            st = create_handle(g, ctx, order, 2);
            if (!st) ds = decode(g, m);
        }
        if (!st && ds != 0) {
            /* a file it rejects (damaged, or a kind the probe let through): the batch's
             * files on the CPU path, whose error names a bad file */
            if (lg || !g->warned)
                fprintf(stderr, "kiln: nvJPEG (%s) refused a batch (status %d): its %d images decode on the CPU%s\n",
                        g->st.backend, (int)ds, m, lg ? "" : " (said once; KILN_NVJPEG_LOG=1 for every batch)");
            g->warned = true;
            cudaStreamSynchronize(g->stream);
            cudaGetLastError();
            for (int q = 0; q < m && !st; q++) {
                st = cpu_fallback(arg, ctx, g->pick[q], host + (size_t)g->pick[q] * per);
                g->host_done[g->pick[q]] = true;
            }
            unsupported += m;
            m = 0;
        }
        if (!st && ds == 0) g->any_ok = true;
    }
    if (!st && (ce = cudaEventRecord(g->ev[1], g->stream)) != cudaSuccess) st = cu_fail(ctx, ce, "cudaEventRecord");
    /* the item table, the kernel, then the images decoded on the host into their places */
    if (!st) {
        int q = 0;
        for (int64_t i = 0; i < n; i++) {
            kiln_jpeg_item *it = &g->items_h[i];
            memset(it, 0, sizeof *it);
            if (g->host_done[i]) continue;
            const kiln_jpeg_job *j = &jobs[i];
            it->src = g->dests[q++].channel[0];
            it->w = j->w, it->h = j->h;
            it->x0 = j->box.x0, it->y0 = j->box.y0, it->cw = j->box.cw, it->ch = j->box.ch;
            it->flip = j->box.flip;
        }
        ce = cudaMemcpyAsync(g->items_d, g->items_h, sizeof(kiln_jpeg_item) * (size_t)n, cudaMemcpyHostToDevice, g->stream);
        if (ce == cudaSuccess && m > 0)
            ce = (cudaError_t)kiln_cuda_jpeg_augment(g->stream, g->items_d, (int)n, g->size, g->scale, g->shift, g->buf[k]);
        for (int64_t i = 0; i < n && ce == cudaSuccess; i++)
            if (g->host_done[i])
                ce = cudaMemcpyAsync(g->buf[k] + (size_t)i * per, host + (size_t)i * per, sizeof(float) * per,
                                     cudaMemcpyHostToDevice, g->stream);
        if (ce == cudaSuccess) ce = cudaEventRecord(g->ev[2], g->stream);
        if (ce == cudaSuccess) ce = cudaEventSynchronize(g->ev[2]);
        if (ce != cudaSuccess) st = cu_fail(ctx, ce, "decoding a batch");
    }
    const double t1 = now_s();
    /* GPU time from the start of this batch's work (not its wait for a free buffer) */
    float dms = 0, tms = 0;
    if (!st) {
        cudaEventElapsedTime(&dms, g->ev[0], g->ev[1]);
        cudaEventElapsedTime(&tms, g->ev[1], g->ev[2]);
    }
    pthread_mutex_lock(&g->mu);
    if (st) {
        g->held[k] = false;
    } else {
        g->st.gpu_images += m;
        g->st.cpu_images += unsupported;
        g->st.batches++;
        g->st.decode_s += t_parse + 1e-3 * (dms + tms);
    }
    const int64_t b = g->batches++;
    pthread_mutex_unlock(&g->mu);
    if (lg && !st) {
        size_t in = 0;
        for (int q = 0; q < m; q++) in += g->lens[q];
        fprintf(stderr,
                "kiln nvjpeg: batch %lld: %d on the GPU (%.1f MB of files, %.1f MB decoded), %lld decoded by workers, "
                "%lld sent back to the CPU; checks %.2f ms, decode %.2f ms, transform+copies %.2f ms, in all (with "
                "the wait for a buffer) %.2f ms\n",
                (long long)b, m, in / 1e6, at / 1e6, (long long)host_n, (long long)unsupported, t_parse * 1e3, dms, tms,
                (t1 - t0) * 1e3);
    }
    if (st) return st;
    *out = g->buf[k];
    return KILN_OK;
}

void kiln_jpeg_gpu_done(kiln_jpeg_gpu *g, const float *out) {
    if (!g || !out) return;
    pthread_mutex_lock(&g->mu);
    for (int k = 0; k < NBUF; k++)
        if (g->buf[k] == out && g->held[k]) {
            g->recorded[k] = false;
            if (g->consumer) {
                cudaSetDevice(g->device);
                g->recorded[k] = cudaEventRecord(g->done[k], (cudaStream_t)g->consumer) == cudaSuccess;
            }
            g->held[k] = false;
        }
    pthread_mutex_unlock(&g->mu);
}

void kiln_jpeg_gpu_set_stream(kiln_jpeg_gpu *g, void *stream) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->consumer = stream;
    pthread_mutex_unlock(&g->mu);
}

void kiln_jpeg_gpu_stats_get(kiln_jpeg_gpu *g, kiln_jpeg_gpu_stats *out, bool reset) {
    memset(out, 0, sizeof *out);
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    *out = g->st;
    if (reset) {
        g->st.gpu_images = g->st.cpu_images = g->st.batches = 0;
        g->st.decode_s = 0;
    }
    pthread_mutex_unlock(&g->mu);
}
