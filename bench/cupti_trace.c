/* cupti_trace.c — every GPU kernel a CUDA program runs, with its start, end and stream, as
 * a CSV that bench/overlap.py reads (the columns of `nsys stats --report cuda_gpu_trace`).
 * For machines without Nsight Systems: it is a CUPTI injection library, loaded by the CUDA
 * driver into any program (kiln, or PyTorch) without a change to it:
 *
 *     CUDA_INJECTION64_PATH=/path/libkiln_cupti_trace.so KILN_CUPTI_TRACE=trace_%r.csv \
 *         kiln launch --nproc 2 -- kiln train resnet50 ...
 *     python3 bench/overlap.py trace_0.csv
 *
 * %r in KILN_CUPTI_TRACE becomes the process's RANK (torchrun's and kiln launch's
 * variable; else its pid). Kernels inside CUDA graphs are recorded node by node. The
 * records are kept in memory and written when the process exits; KILN_CUPTI_MAX (default
 * 4,000,000) bounds how many are kept (the first ones). KILN_CUPTI_MEM=1 also records memsets
 * and memory copies, named "[CUDA memset N B]" / "[CUDA memcpy N B]" (the gaps between
 * kernels that they fill; bench/overlap.py leaves them out). Needs libcupti at run time
 * (the CUDA toolkit's, or a PyTorch wheel's nvidia/cu13/lib).
 */
#include <cupti.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    uint64_t start, end;
    uint32_t device, stream;
    char *name; /* interned */
} record;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static record *recs;
static size_t n_recs, cap_recs, max_recs = 4000000, dropped;
static char **names;
static size_t n_names, cap_names;
static char out_path[4096];

static void warn_cupti(const char *what, CUptiResult r) {
    const char *msg = NULL;
    cuptiGetResultString(r, &msg);
    fprintf(stderr, "cupti_trace: %s: %s\n", what, msg ? msg : "unknown CUPTI error");
}

/* Kernel names repeat (every step runs the same ones): one copy of each. */
static char *intern(const char *s) {
    if (!s) s = "?";
    for (size_t i = n_names; i-- > 0;)
        if (!strcmp(names[i], s)) return names[i];
    if (n_names == cap_names) {
        size_t c = cap_names ? 2 * cap_names : 256;
        char **p = realloc(names, c * sizeof *p);
        if (!p) return NULL;
        names = p;
        cap_names = c;
    }
    char *d = strdup(s);
    if (d) names[n_names++] = d;
    return d;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity *a = NULL;
    pthread_mutex_lock(&mu);
    while (cuptiActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS) {
        record rec;
        char mem[64];
        if (a->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || a->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
            rec = (record){k->start, k->end, k->deviceId, k->streamId, intern(k->name)};
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)a;
            snprintf(mem, sizeof mem, "[CUDA memset %llu B]", (unsigned long long)m->bytes);
            rec = (record){m->start, m->end, m->deviceId, m->streamId, intern(mem)};
        } else if (a->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)a;
            snprintf(mem, sizeof mem, "[CUDA memcpy %llu B]", (unsigned long long)m->bytes);
            rec = (record){m->start, m->end, m->deviceId, m->streamId, intern(mem)};
        } else {
            continue;
        }
        if (n_recs >= max_recs) {
            dropped++;
            continue;
        }
        if (n_recs == cap_recs) {
            size_t c = cap_recs ? 2 * cap_recs : 65536;
            record *p = realloc(recs, c * sizeof *p);
            if (!p) {
                dropped++;
                continue;
            }
            recs = p;
            cap_recs = c;
        }
        recs[n_recs++] = rec;
    }
    size_t lost = 0;
    cuptiActivityGetNumDroppedRecords(ctx, stream, &lost);
    dropped += lost;
    pthread_mutex_unlock(&mu);
    free(buffer);
}

/* CSV quoting: names hold commas (C++ signatures). */
static void put_name(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void write_out(void) {
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    pthread_mutex_lock(&mu);
    FILE *f = fopen(out_path, "w");
    if (!f) {
        fprintf(stderr, "cupti_trace: cannot write %s\n", out_path);
    } else {
        fprintf(f, "Start (ns),Duration (ns),Device,Strm,Name\n");
        for (size_t i = 0; i < n_recs; i++) {
            const record *r = &recs[i];
            fprintf(f, "%llu,%llu,%u,%u,", (unsigned long long)r->start,
                    (unsigned long long)(r->end > r->start ? r->end - r->start : 0), r->device, r->stream);
            put_name(f, r->name);
            fputc('\n', f);
        }
        if (fclose(f)) fprintf(stderr, "cupti_trace: writing %s failed\n", out_path);
        else
            fprintf(stderr, "cupti_trace: %zu records written to %s%s\n", n_recs, out_path,
                    dropped ? " (some records were dropped: raise KILN_CUPTI_MAX)" : "");
    }
    pthread_mutex_unlock(&mu);
}

/* Called by the CUDA driver when CUDA_INJECTION64_PATH names this library. */
int InitializeInjection(void);
int InitializeInjection(void) {
    const char *pat = getenv("KILN_CUPTI_TRACE"), *mx = getenv("KILN_CUPTI_MAX"), *rank = getenv("RANK");
    if (!pat || !*pat) pat = "cupti_trace_%r.csv";
    if (mx && atol(mx) > 0) max_recs = (size_t)atol(mx);
    char id[32];
    if (rank && *rank) snprintf(id, sizeof id, "%s", rank);
    else snprintf(id, sizeof id, "%ld", (long)getpid());
    size_t o = 0;
    for (const char *p = pat; *p && o + 32 < sizeof out_path; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            o += (size_t)snprintf(out_path + o, sizeof out_path - o, "%s", id);
            p++;
        } else {
            out_path[o++] = *p;
        }
    }
    out_path[o] = 0;
    CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r == CUPTI_SUCCESS) r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (r != CUPTI_SUCCESS) {
        warn_cupti("enabling kernel records", r);
        return 0;
    }
    const char *mem = getenv("KILN_CUPTI_MEM");
    if (mem && *mem && strcmp(mem, "0")) {
        r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
        if (r == CUPTI_SUCCESS) r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
        if (r != CUPTI_SUCCESS) warn_cupti("enabling memset and memcpy records", r);
    }
    atexit(write_out);
    return 1;
}
