/*
 * cuda_plan.c — a plan lowered onto the CUDA backend.
 *
 * The host plan (shape inference, folding, the memory layout) is built as for the CPU,
 * without a host arena. Here:
 *   - one device allocation holds the activation arena at the plan's offsets, the
 *     constants the run list reads, and a slot for each graph input;
 *   - every run-list node gets an op context whose tensors point at device memory, and
 *     must have a CUDA kernel (kiln_cuda_supports): no silent fallback to the CPU;
 *   - the first run executes the kernels one by one (cuDNN's algorithm search happens
 *     then), after which the kernel sequence is captured into a CUDA graph and every
 *     later run replays it: one launch, no host synchronization until outputs are read.
 * Inputs are uploaded through pinned staging; outputs are downloaded into host buffers
 * the plan owns (valid until the next run).
 *
 * Kernels with one-time work per shape (NVRTC compilation of generated kernels) do it in
 * kiln_cuda_prepare when the plan is created: never inside a capture or a timed run.
 *
 * Profiling: kiln_cuda_plan_profile runs the nodes one by one (no graph) with an event
 * pair around each (and around the prologue and epilogue when asked). With KILN_NVTX=1 in
 * the environment (read when the plan is created) every node's launch in eager runs,
 * captures and profiles is an NVTX range named "<op> <node>", for Nsight Systems;
 * otherwise no NVTX call is made.
 */
#include "cuda_internal.h"
#include "../core/plan.h"
#include "cuda_plan.h"

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEV_ALIGN 256

struct kiln_cuda_plan {
    kiln_cuda *cu;
    kiln_plan *p;           /* owned */
    const kiln_model *m;
    void *dev;              /* one cudaMalloc: arena | constants | inputs */
    size_t dev_bytes;
    kiln_tensor *dvt;       /* (n_values) device views */
    kiln_tensor **ptrs;
    kiln_op_ctx *ctx;       /* (n_exec) */
    int n_exec;
    size_t workspace;
    kiln_tensor *host_out;  /* (n_outputs) host copies of the outputs */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    /* Runs with every input and output in device memory: the copies in, the run list and the
     * copies out captured as one graph (run_on_device). io_node[k] is the copy kernel's node of
     * input k (k < n_inputs) or output k - n_inputs (NULL: none), io_ptr[k] the caller's
     * pointer it copies now (changed in place with cudaGraphExecKernelNodeSetParams). */
    cudaGraph_t io_graph;
    cudaGraphExec_t io_exec;
    cudaGraphNode_t *io_node;
    void **io_ptr;
    int io_nout;
    int runs;
    bool nvtx;              /* NVTX ranges around node launches (KILN_NVTX=1) */
    bool use_graph;
    void **bound;           /* (n_inputs) resident device memory of bound inputs, or NULL */
    kiln_status (*epilogue)(void *arg);
    void *epilogue_arg;
    kiln_status (*prologue)(void *arg);
    void *prologue_arg;
    /* Side streams (kiln_plan_build_ex): captures run node e on stream[e], after the
     * events of the nodes it waits for; ev[e] is recorded after a node others wait for. */
    int n_streams;
    cudaEvent_t *ev;        /* (n_exec), NULL where no node waits */
    cudaEvent_t ev_start, ev_end[KILN_CUDA_MAX_SIDE_STREAMS];
};

_Static_assert(KILN_PLAN_MAX_SIDE_STREAMS >= KILN_CUDA_MAX_SIDE_STREAMS, "a plan takes every side stream a context has");

static size_t up(size_t n) { return (n + DEV_ALIGN - 1) & ~(size_t)(DEV_ALIGN - 1); }

void kiln_cuda_plan_free(kiln_cuda_plan *cp) {
    if (!cp) return;
    if (cp->exec) cudaGraphExecDestroy(cp->exec);
    if (cp->graph) cudaGraphDestroy(cp->graph);
    if (cp->io_exec) cudaGraphExecDestroy(cp->io_exec);
    if (cp->io_graph) cudaGraphDestroy(cp->io_graph);
    free(cp->io_node);
    free(cp->io_ptr);
    if (cp->dev) {
        cudaStreamSynchronize((cudaStream_t)kiln_cuda_stream(cp->cu));
        cudaFree(cp->dev);
    }
    for (int e = 0; cp->ev && e < cp->n_exec; e++)
        if (cp->ev[e]) cudaEventDestroy(cp->ev[e]);
    free(cp->ev);
    if (cp->ev_start) cudaEventDestroy(cp->ev_start);
    for (int i = 0; i < KILN_CUDA_MAX_SIDE_STREAMS; i++)
        if (cp->ev_end[i]) cudaEventDestroy(cp->ev_end[i]);
    if (cp->host_out)
        for (int i = 0; i < cp->m->n_outputs; i++) free(cp->host_out[i].data);
    free(cp->host_out);
    free(cp->bound);
    free(cp->dvt);
    free(cp->ptrs);
    free(cp->ctx);
    kiln_plan_free(cp->p);
    free(cp);
}

/* Events for a capture over side streams: one after each node another stream waits for,
 * one for the run's start, one per side stream for its end. */
static kiln_status create_events(kiln_cuda_plan *cp, const kiln_plan_view_t *v) {
    kiln_context *ctx = cp->m->ctx;
    cp->ev = kiln_calloc(ctx, (size_t)v->n_exec + 1, sizeof *cp->ev, "CUDA plan events");
    if (!cp->ev) return KILN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < v->wait_at[v->n_exec]; i++) {
        cudaEvent_t *e = &cp->ev[v->waits[i]];
        if (!*e) KILN_CUDA_CHECK(ctx, cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    }
    KILN_CUDA_CHECK(ctx, cudaEventCreateWithFlags(&cp->ev_start, cudaEventDisableTiming));
    for (int i = 0; i < v->n_streams - 1; i++)
        KILN_CUDA_CHECK(ctx, cudaEventCreateWithFlags(&cp->ev_end[i], cudaEventDisableTiming));
    return KILN_OK;
}

kiln_status kiln_cuda_plan_create(kiln_cuda *cu, kiln_model *m, kiln_tensor *const *inputs, bool fold,
                                  kiln_cuda_plan **out) {
    return kiln_cuda_plan_create_bound(cu, m, inputs, fold, NULL, true, out);
}

kiln_status kiln_cuda_plan_create_bound(kiln_cuda *cu, kiln_model *m, kiln_tensor *const *inputs, bool fold,
                                        void *const *bound, bool use_graph, kiln_cuda_plan **out) {
    kiln_context *ctx = m->ctx;
    *out = NULL;
    for (int i = 0; i < m->n_inputs; i++)
        if (inputs[i]->ndim == 4 && inputs[i]->format == KILN_FORMAT_NHWC)
            return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "input '%s': NHWC inputs are not supported on cuda yet; pass NCHW",
                             m->values[m->inputs[i]].name);
    kiln_cuda_plan *cp = kiln_calloc(ctx, 1, sizeof *cp, "a CUDA plan");
    if (!cp) return KILN_ERR_OUT_OF_MEMORY;
    cp->cu = cu;
    cp->m = m;
    const char *nvtx = getenv("KILN_NVTX");
    cp->nvtx = nvtx && nvtx[0] && strcmp(nvtx, "0") != 0;
    cp->use_graph = use_graph;
    cp->bound = kiln_calloc(ctx, (size_t)m->n_inputs + 1, sizeof *cp->bound, "a CUDA plan");
    if (!cp->bound) {
        free(cp);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; bound && i < m->n_inputs; i++) cp->bound[i] = bound[i];
    /* side streams only pay off in a captured graph: eager runs go one node at a time */
    kiln_status st = kiln_plan_build_ex(m, inputs, fold, false, use_graph ? kiln_cuda_side_streams(cu) : 0, &cp->p);
    if (st) {
        free(cp->bound);
        free(cp);
        return st;
    }
    kiln_plan_view_t v;
    kiln_plan_view(cp->p, &v);
    const int nv = v.n_values;
    cp->n_exec = v.n_exec;
    cp->dvt = kiln_calloc(ctx, (size_t)nv + 1, sizeof *cp->dvt, "CUDA plan values");
    cp->ctx = kiln_calloc(ctx, (size_t)v.n_exec + 1, sizeof *cp->ctx, "CUDA plan nodes");
    cp->host_out = kiln_calloc(ctx, (size_t)m->n_outputs + 1, sizeof *cp->host_out, "CUDA plan outputs");
    size_t nptr = 0;
    for (int e = 0; e < v.n_exec; e++) {
        const kiln_op_ctx *hc = kiln_plan_exec_op_ctx(&v, e);
        nptr += (size_t)(hc->n_in + hc->n_out);
    }
    cp->ptrs = kiln_calloc(ctx, nptr + 1, sizeof *cp->ptrs, "CUDA plan operands");
    if (!cp->dvt || !cp->ctx || !cp->host_out || !cp->ptrs) {
        kiln_cuda_plan_free(cp);
        return KILN_ERR_OUT_OF_MEMORY;
    }
    /* Every run-list node must have a CUDA kernel for its dtypes, shapes and attributes. */
    for (int e = 0; e < v.n_exec && !st; e++) {
        kiln_op_ctx hc = *kiln_plan_exec_op_ctx(&v, e);
        st = kiln_cuda_supports(&hc);
    }
    /* Device views of every value (data set once the layout is allocated), and the op
     * contexts over them: the workspace each kernel needs follows from the shapes. */
    for (int x = 0; x < nv; x++) {
        cp->dvt[x] = v.vt[x];
        cp->dvt[x].owns_data = false;
        cp->dvt[x].data = NULL;
    }
    size_t used = 0;
    for (int e = 0; e < v.n_exec && !st; e++) {
        const kiln_op_ctx *hc = kiln_plan_exec_op_ctx(&v, e);
        const kiln_node *n = hc->node;
        kiln_op_ctx *c = &cp->ctx[e];
        *c = *hc;
        c->host_in = hc->in; /* the host plan's tensors: constants keep their host data */
        c->in = cp->ptrs + used;
        c->out = cp->ptrs + used + n->n_in;
        used += (size_t)(n->n_in + n->n_out);
        for (int k = 0; k < n->n_in; k++) c->in[k] = n->in[k] >= 0 ? &cp->dvt[n->in[k]] : NULL;
        for (int k = 0; k < n->n_out; k++) c->out[k] = &cp->dvt[n->out[k]];
        size_t ws = 0;
        st = kiln_cuda_workspace_size(cu, c, &ws);
        if (ws > cp->workspace) cp->workspace = ws;
        /* one-time work per shape (NVRTC compilation) now, not in a capture or timed run */
        if (!st) st = kiln_cuda_prepare(cu, c);
    }
    /* Device layout: arena, this plan's own workspace (a captured graph keeps pointing at
     * it, so it is never shared or regrown), constants read by the run list, inputs. */
    bool *needed = kiln_calloc(ctx, (size_t)nv + 1, sizeof(bool), "CUDA plan");
    size_t *coff = kiln_calloc(ctx, (size_t)nv + 1, sizeof(size_t), "CUDA plan");
    if (!st && (!needed || !coff)) st = KILN_ERR_OUT_OF_MEMORY;
    /* one workspace per stream: nodes of different streams may run at once */
    cp->n_streams = v.n_streams;
    size_t total = up(v.arena_bytes), ws_off = total;
    total += up(cp->workspace) * (size_t)v.n_streams;
    for (int e = 0; e < v.n_exec && !st; e++) {
        const kiln_op_ctx *hc = kiln_plan_exec_op_ctx(&v, e);
        const kiln_node *n = hc->node;
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] >= 0 && v.known[n->in[k]]) needed[n->in[k]] = true;
    }
    for (int i = 0; i < m->n_outputs && !st; i++)
        if (v.known[m->outputs[i]]) needed[m->outputs[i]] = true;
    for (int x = 0; x < nv && !st; x++)
        if (needed[x]) {
            coff[x] = total;
            total += up(kiln_tensor_nbytes(&v.vt[x]));
        }
    for (int i = 0; i < m->n_inputs && !st; i++) {
        if (cp->bound[i]) continue;
        coff[m->inputs[i]] = total;
        total += up(kiln_tensor_nbytes(&v.vt[m->inputs[i]]));
    }
    if (!st) {
        cudaError_t ce = cudaMalloc(&cp->dev, total ? total : DEV_ALIGN);
        if (ce != cudaSuccess) {
            cp->dev = NULL;
            st = kiln_fail(ctx, ce == cudaErrorMemoryAllocation ? KILN_ERR_OUT_OF_MEMORY : KILN_ERR_DEVICE,
                           "cudaMalloc of the plan's %zu bytes (arena %zu) failed: %s", total, v.arena_bytes,
                           cudaGetErrorString(ce));
        }
        cp->dev_bytes = total;
    }
    /* Bind device memory, then upload the constants once: host constants are NCHW bytes,
     * converted for those the layout pass made NHWC (conv weights, folded values). */
    for (int i = 0; i < m->n_inputs && !st; i++)
        if (cp->bound[i]) cp->dvt[m->inputs[i]].data = cp->bound[i];
    for (int x = 0; x < nv && !st; x++) {
        if (cp->dvt[x].data) continue; /* a bound input */
        if (v.offset[x] != SIZE_MAX) cp->dvt[x].data = (char *)cp->dev + v.offset[x];
        else if (needed[x] || v.m->values[x].is_input) cp->dvt[x].data = (char *)cp->dev + coff[x];
        const size_t nb = kiln_tensor_nbytes(&v.vt[x]);
        if (!needed[x] || !nb) continue;
        if (v.vt[x].ndim == 4 && v.vt[x].format == KILN_FORMAT_NHWC) {
            void *tmp = kiln_malloc(ctx, nb, "an NHWC copy of a constant");
            if (!tmp) {
                st = KILN_ERR_OUT_OF_MEMORY;
                break;
            }
            kiln_layout_convert(&v.vt[x], tmp, KILN_FORMAT_NHWC);
            st = kiln_cuda_upload(cu, cp->dvt[x].data, tmp, nb);
            free(tmp);
        } else {
            st = kiln_cuda_upload(cu, cp->dvt[x].data, v.vt[x].data, nb);
        }
    }
    free(needed);
    free(coff);
    for (int e = 0; e < v.n_exec && !st; e++) {
        const size_t own = v.stream ? up(cp->workspace) * (size_t)v.stream[e] : 0;
        cp->ctx[e].workspace = cp->workspace ? (char *)cp->dev + ws_off + own : NULL;
        cp->ctx[e].workspace_size = cp->workspace;
    }
    if (!st && v.n_streams > 1) st = create_events(cp, &v);
    for (int i = 0; i < m->n_outputs && !st; i++) {
        kiln_tensor *h = &cp->host_out[i];
        *h = v.vt[m->outputs[i]];
        h->owns_data = false;
        h->data = kiln_malloc(ctx, kiln_tensor_nbytes(h) + 1, "an output buffer");
        if (!h->data) st = KILN_ERR_OUT_OF_MEMORY;
    }
    if (!st) st = kiln_cuda_sync(cu);
    if (st) {
        kiln_cuda_plan_free(cp);
        return st;
    }
    *out = cp;
    return KILN_OK;
}

static void range_push(const kiln_cuda_plan *cp, int e) {
    if (!cp->nvtx) return;
    char label[256];
    snprintf(label, sizeof label, "%s %s", cp->ctx[e].node->op_type, cp->ctx[e].node->name);
    nvtxRangePushA(label);
}

static void range_pop(const kiln_cuda_plan *cp) {
    if (cp->nvtx) nvtxRangePop();
}

/* The run list over the plan's streams, for a capture: every side stream forks from the
 * main one after the prologue, each node first waits for the events of the nodes on other
 * streams it needs (kiln_plan_view_t.waits), and every side stream joins the main one
 * before the epilogue. In the captured graph these become edges: parallel branches. */
static kiln_status launch_streams(kiln_cuda_plan *cp) {
    kiln_context *ctx = cp->m->ctx;
    kiln_cuda *cu = cp->cu;
    kiln_plan_view_t v;
    kiln_plan_view(cp->p, &v);
    const int side = cp->n_streams - 1;
    KILN_CUDA_CHECK(ctx, cudaEventRecord(cp->ev_start, cu->main_stream));
    for (int i = 1; i <= side; i++)
        KILN_CUDA_CHECK(ctx, cudaStreamWaitEvent(cu->side[i - 1], cp->ev_start, 0));
    kiln_status st = KILN_OK;
    for (int e = 0; e < cp->n_exec && !st; e++) {
        cudaStream_t s = v.stream[e] ? cu->side[v.stream[e] - 1] : cu->main_stream;
        for (int w = v.wait_at[e]; w < v.wait_at[e + 1]; w++) {
            cudaError_t ce = cudaStreamWaitEvent(s, cp->ev[v.waits[w]], 0);
            if (ce != cudaSuccess) st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaStreamWaitEvent: %s", cudaGetErrorString(ce));
        }
        if (!st) st = kiln_cuda_use_stream(cu, v.stream[e]);
        range_push(cp, e);
        if (!st) st = kiln_cuda_run(cu, &cp->ctx[e]);
        range_pop(cp);
        if (!st && v.stream[e]) cu->stats.side_captured++;
        const kiln_status back = kiln_cuda_use_stream(cu, 0);
        if (!st) st = back;
        if (!st && cp->ev[e]) {
            cudaError_t ce = cudaEventRecord(cp->ev[e], s);
            if (ce != cudaSuccess) st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaEventRecord: %s", cudaGetErrorString(ce));
        }
    }
    /* joined even after a failure, so that the capture ends cleanly */
    for (int i = 1; i <= side; i++) {
        cudaError_t ce = cudaEventRecord(cp->ev_end[i - 1], cu->side[i - 1]);
        if (ce == cudaSuccess)
            ce = cudaStreamWaitEvent(cu->main_stream, cp->ev_end[i - 1], 0);
        if (ce != cudaSuccess && !st)
            st = kiln_fail(ctx, KILN_ERR_DEVICE, "joining side stream %d: %s", i, cudaGetErrorString(ce));
    }
    return st;
}

/* concurrent: over the plan's streams (captures only); else one node after another on
 * the main stream. */
static kiln_status launch_all(kiln_cuda_plan *cp, bool concurrent) {
    if (cp->prologue) {
        kiln_status st = cp->prologue(cp->prologue_arg);
        if (st) return st;
    }
    if (concurrent && cp->n_streams > 1) {
        kiln_status st = launch_streams(cp);
        if (st) return st;
    } else {
        for (int e = 0; e < cp->n_exec; e++) {
            range_push(cp, e);
            kiln_status st = kiln_cuda_run(cp->cu, &cp->ctx[e]);
            range_pop(cp);
            if (st) return st;
        }
    }
    return cp->epilogue ? cp->epilogue(cp->epilogue_arg) : KILN_OK;
}

void *kiln_cuda_plan_value_ptr(kiln_cuda_plan *cp, int v) {
    kiln_plan_view_t pv;
    kiln_plan_view(cp->p, &pv);
    return v >= 0 && v < pv.n_values ? cp->dvt[v].data : NULL;
}

void kiln_cuda_plan_set_epilogue(kiln_cuda_plan *cp, kiln_status (*fn)(void *arg), void *arg) {
    cp->epilogue = fn;
    cp->epilogue_arg = arg;
}

void kiln_cuda_plan_set_prologue(kiln_cuda_plan *cp, kiln_status (*fn)(void *arg), void *arg) {
    cp->prologue = fn;
    cp->prologue_arg = arg;
}

/* Record the run list into a CUDA graph (nothing executes while capturing). */
static kiln_status capture(kiln_cuda_plan *cp) {
    kiln_context *ctx = cp->m->ctx;
    cudaStream_t s = (cudaStream_t)kiln_cuda_stream(cp->cu);
    cudaError_t ce = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (ce != cudaSuccess)
        return kiln_fail(ctx, KILN_ERR_DEVICE, "cudaStreamBeginCapture: %s", cudaGetErrorString(ce));
    kiln_status st = launch_all(cp, true);
    cudaGraph_t g = NULL;
    ce = cudaStreamEndCapture(s, &g);
    if (st) {
        if (g) cudaGraphDestroy(g);
        return st;
    }
    if (ce != cudaSuccess)
        return kiln_fail(ctx, KILN_ERR_DEVICE, "cudaStreamEndCapture: %s", cudaGetErrorString(ce));
    cp->graph = g;
    /* the kernels' priorities as captured (NCCL's stream is the device's highest: nccl.c) */
    ce = cudaGraphInstantiateWithFlags(&cp->exec, g, cudaGraphInstantiateFlagUseNodePriority);
    if (ce != cudaSuccess) {
        cp->exec = NULL;
        return kiln_fail(ctx, KILN_ERR_DEVICE, "cudaGraphInstantiate: %s", cudaGetErrorString(ce));
    }
    return KILN_OK;
}

void kiln_cuda_plan_drop_graph(kiln_cuda_plan *cp) {
    if (!cp || !cp->exec) return;
    cudaStreamSynchronize((cudaStream_t)kiln_cuda_stream(cp->cu)); /* no replay in flight */
    cudaGraphExecDestroy(cp->exec);
    if (cp->graph) cudaGraphDestroy(cp->graph);
    cp->exec = NULL;
    cp->graph = NULL;
}

kiln_status kiln_cuda_plan_enqueue(kiln_cuda_plan *cp, kiln_tensor *const *inputs, bool use_graph) {
    const kiln_model *m = cp->m;
    KILN_CUDA_CHECK(m->ctx, cudaSetDevice(cp->cu->device));
    kiln_status st = KILN_OK;
    for (int i = 0; inputs && i < m->n_inputs && !st; i++) {
        size_t nb = kiln_tensor_nbytes(inputs[i]);
        if (!nb || cp->bound[i]) continue;
        /* a device input (the session checked it is on this device): copied on the device */
        if (inputs[i]->device == KILN_DEVICE_CUDA)
            st = kiln_cuda_copy_d2d(cp->cu, cp->dvt[m->inputs[i]].data, inputs[i]->data, nb);
        else
            st = kiln_cuda_upload(cp->cu, cp->dvt[m->inputs[i]].data, inputs[i]->data, nb);
    }
    if (st) return st;
    use_graph = use_graph && cp->use_graph;
    if (use_graph && cp->runs >= 1 && !cp->exec) {
        st = capture(cp);
        if (st) return st;
    }
    if (use_graph && cp->exec) {
        cudaError_t ce = cudaGraphLaunch(cp->exec, (cudaStream_t)kiln_cuda_stream(cp->cu));
        if (ce != cudaSuccess) return kiln_fail(m->ctx, KILN_ERR_DEVICE, "cudaGraphLaunch: %s", cudaGetErrorString(ce));
    } else {
        st = launch_all(cp, false);
    }
    cp->runs++;
    return st;
}

kiln_status kiln_cuda_plan_run(kiln_cuda_plan *cp, kiln_tensor *const *inputs, int n_outputs,
                               const kiln_tensor **outputs) {
    const kiln_model *m = cp->m;
    kiln_status st = kiln_cuda_join_caller(cp->cu, false);
    if (!st) st = kiln_cuda_plan_enqueue(cp, inputs, true);
    for (int j = 0; j < n_outputs && !st; j++) {
        kiln_tensor *h = &cp->host_out[j];
        size_t nb = kiln_tensor_nbytes(h);
        if (nb) st = kiln_cuda_download(cp->cu, h->data, cp->dvt[m->outputs[j]].data, nb);
        outputs[j] = h;
    }
    if (!st) st = kiln_cuda_join_caller(cp->cu, true);
    if (!st) st = kiln_cuda_sync(cp->cu);
    return st;
}

/* The device-IO graph: the copies of the inputs in, the run list and the copies of the
 * outputs out (copy kernels, iocopy.cu), captured as one graph, and the copies' nodes found
 * by their pointers. Copies as memcpy operations, before or inside the graph, cost the
 * ResNet-50 batch-1 run about 35 us of GPU time (bench/NOTES.md, v2.1). */
static kiln_status capture_io(kiln_cuda_plan *cp, kiln_tensor *const *inputs, int n_outputs,
                              kiln_tensor *const *outputs) {
    const kiln_model *m = cp->m;
    kiln_context *ctx = m->ctx;
    const int n_io = m->n_inputs + m->n_outputs;
    if (cp->io_exec) cudaGraphExecDestroy(cp->io_exec);
    if (cp->io_graph) cudaGraphDestroy(cp->io_graph);
    cp->io_exec = NULL;
    cp->io_graph = NULL;
    if (!cp->io_node) cp->io_node = kiln_calloc(ctx, (size_t)n_io + 1, sizeof *cp->io_node, "a CUDA plan");
    if (!cp->io_ptr) cp->io_ptr = kiln_calloc(ctx, (size_t)n_io + 1, sizeof *cp->io_ptr, "a CUDA plan");
    if (!cp->io_node || !cp->io_ptr) return KILN_ERR_OUT_OF_MEMORY;
    memset(cp->io_node, 0, sizeof *cp->io_node * (size_t)n_io);
    memset(cp->io_ptr, 0, sizeof *cp->io_ptr * (size_t)n_io);
    cudaStream_t s = (cudaStream_t)kiln_cuda_stream(cp->cu);
    const cudaError_t be = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (be != cudaSuccess) return kiln_fail(ctx, KILN_ERR_DEVICE, "cudaStreamBeginCapture: %s", cudaGetErrorString(be));
    kiln_status st = KILN_OK;
    for (int i = 0; i < m->n_inputs && !st; i++) {
        const size_t nb = kiln_tensor_nbytes(inputs[i]);
        if (!nb || cp->bound[i]) continue;
        cp->io_ptr[i] = inputs[i]->data;
        st = kiln_cuda_io_copy(cp->cu, s, cp->dvt[m->inputs[i]].data, inputs[i]->data, nb);
    }
    if (!st) st = launch_all(cp, true);
    for (int j = 0; j < n_outputs && !st; j++) {
        const size_t nb = outputs[j] ? kiln_tensor_nbytes(&cp->host_out[j]) : 0;
        if (!nb) continue;
        cp->io_ptr[m->n_inputs + j] = outputs[j]->data;
        st = kiln_cuda_io_copy(cp->cu, s, outputs[j]->data, cp->dvt[m->outputs[j]].data, nb);
    }
    cudaGraph_t g = NULL;
    const cudaError_t ee = cudaStreamEndCapture(s, &g);
    if (!st && ee) st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaStreamEndCapture: %s", cudaGetErrorString(ee));
    if (st) {
        if (g) cudaGraphDestroy(g);
        return st;
    }
    cp->io_graph = g;
    cp->io_nout = n_outputs;
    /* the copy kernels' nodes, told apart by their pointers */
    size_t n = 0;
    KILN_CUDA_CHECK(ctx, cudaGraphGetNodes(g, NULL, &n));
    cudaGraphNode_t *nodes = kiln_calloc(ctx, n + 1, sizeof *nodes, "graph nodes");
    if (!nodes) return KILN_ERR_OUT_OF_MEMORY;
    cudaError_t ce = cudaGraphGetNodes(g, nodes, &n);
    for (size_t k = 0; k < n && !ce; k++) {
        enum cudaGraphNodeType t;
        struct cudaKernelNodeParams p;
        if (cudaGraphNodeGetType(nodes[k], &t) != cudaSuccess || t != cudaGraphNodeTypeKernel) continue;
        if (cudaGraphKernelNodeGetParams(nodes[k], &p) != cudaSuccess || p.func != kiln_cuda_io_copy_fn()) continue;
        void *dst = *(void **)p.kernelParams[0], *src = *(void **)p.kernelParams[1];
        for (int i = 0; i < m->n_inputs; i++)
            if (cp->io_ptr[i] && src == cp->io_ptr[i] && dst == cp->dvt[m->inputs[i]].data) cp->io_node[i] = nodes[k];
        for (int j = 0; j < n_outputs; j++)
            if (cp->io_ptr[m->n_inputs + j] && dst == cp->io_ptr[m->n_inputs + j] &&
                src == cp->dvt[m->outputs[j]].data)
                cp->io_node[m->n_inputs + j] = nodes[k];
    }
    free(nodes);
    cudaGetLastError();
    for (int k = 0; k < n_io && !st; k++)
        if (cp->io_ptr[k] && !cp->io_node[k])
            st = kiln_fail(ctx, KILN_ERR_INTERNAL, "the device-IO graph has no copy node for %s %d",
                           k < m->n_inputs ? "input" : "output", k < m->n_inputs ? k : k - m->n_inputs);
    if (!st) {
        ce = cudaGraphInstantiate(&cp->io_exec, g, 0);
        if (ce != cudaSuccess) {
            cp->io_exec = NULL;
            st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaGraphInstantiate: %s", cudaGetErrorString(ce));
        }
    }
    return st;
}

/* A run whose inputs and outputs are all in device memory, once the plan has run once: the
 * device-IO graph, its copies pointed at this run's tensors, launched on the caller's stream
 * (no events between streams: the runs before ended by joining it) or on kiln's. */
static kiln_status run_on_device(kiln_cuda_plan *cp, kiln_tensor *const *inputs, int n_outputs,
                                 kiln_tensor *const *outputs) {
    const kiln_model *m = cp->m;
    kiln_context *ctx = m->ctx;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cp->cu->device));
    /* the same copies as captured (which inputs and outputs have one), else capture anew;
     * a copy of other tensors re-pointed in place (its kernel node's arguments) */
    bool same = cp->io_exec && cp->io_nout == n_outputs;
    for (int i = 0; same && i < m->n_inputs; i++)
        same = (cp->io_ptr[i] != NULL) == (kiln_tensor_nbytes(inputs[i]) && !cp->bound[i]);
    for (int j = 0; same && j < n_outputs; j++)
        same = (cp->io_ptr[m->n_inputs + j] != NULL) == (outputs[j] && kiln_tensor_nbytes(&cp->host_out[j]));
    kiln_status st = same ? KILN_OK : capture_io(cp, inputs, n_outputs, outputs);
    for (int k = 0; k < m->n_inputs + n_outputs && !st; k++) {
        if (!cp->io_ptr[k]) continue;
        const bool in = k < m->n_inputs;
        void *want = in ? inputs[k]->data : outputs[k - m->n_inputs]->data;
        if (want == cp->io_ptr[k]) continue;
        void *slot = in ? cp->dvt[m->inputs[k]].data : cp->dvt[m->outputs[k - m->n_inputs]].data;
        size_t nb = in ? kiln_tensor_nbytes(inputs[k]) : kiln_tensor_nbytes(&cp->host_out[k - m->n_inputs]);
        void *dst = in ? slot : want, *src = in ? want : slot;
        void *args[3] = {&dst, &src, &nb};
        struct cudaKernelNodeParams p;
        cudaError_t ce = cudaGraphKernelNodeGetParams(cp->io_node[k], &p);
        if (ce == cudaSuccess) {
            p.kernelParams = args;
            p.extra = NULL;
            ce = cudaGraphExecKernelNodeSetParams(cp->io_exec, cp->io_node[k], &p);
        }
        if (ce != cudaSuccess) {
            cudaGetLastError();
            st = capture_io(cp, inputs, n_outputs, outputs); /* re-pointed by capturing anew */
            break;
        }
        cp->io_ptr[k] = want;
    }
    if (st) return st;
    const bool caller = kiln_cuda_has_caller_stream(cp->cu);
    cudaStream_t s = caller ? (cudaStream_t)kiln_cuda_caller_stream(cp->cu) : (cudaStream_t)kiln_cuda_stream(cp->cu);
    KILN_CUDA_CHECK(ctx, cudaGraphLaunch(cp->io_exec, s));
    cp->runs++;
    return caller ? KILN_OK : kiln_cuda_sync(cp->cu);
}

kiln_status kiln_cuda_plan_run_into(kiln_cuda_plan *cp, kiln_tensor *const *inputs, int n_outputs,
                                    kiln_tensor *const *outputs) {
    const kiln_model *m = cp->m;
    bool all_device = true;
    for (int i = 0; i < m->n_inputs; i++) all_device &= cp->bound[i] || inputs[i]->device == KILN_DEVICE_CUDA;
    bool out_device = true;
    for (int j = 0; j < n_outputs; j++) out_device &= !outputs[j] || outputs[j]->device == KILN_DEVICE_CUDA;
    if (all_device && out_device && cp->use_graph && cp->runs >= 1 && !cp->prologue && !cp->epilogue)
        return run_on_device(cp, inputs, n_outputs, outputs);
    kiln_status st = kiln_cuda_join_caller(cp->cu, false);
    if (!st) st = kiln_cuda_plan_enqueue(cp, inputs, true);
    for (int j = 0; j < n_outputs && !st; j++) {
        kiln_tensor *o = outputs[j];
        if (!o) continue; /* not asked for (kiln_session_run_named) */
        const kiln_tensor *h = &cp->host_out[j];
        const size_t nb = kiln_tensor_nbytes(h);
        const void *src = cp->dvt[m->outputs[j]].data;
        if (o->device == KILN_DEVICE_CUDA) {
            st = kiln_cuda_copy_d2d(cp->cu, o->data, src, nb);
            continue;
        }
        all_device = false;
        if (h->ndim == 4 && h->format != o->format) {
            /* another layout: through the plan's host buffer, converted there */
            if (nb) st = kiln_cuda_download(cp->cu, h->data, src, nb);
            if (!st) kiln_layout_convert(h, o->data, o->format);
        } else if (nb) {
            st = kiln_cuda_download(cp->cu, o->data, src, nb);
        }
    }
    if (!st) st = kiln_cuda_join_caller(cp->cu, true);
    /* with the caller's stream and nothing on the host, the caller's stream is the wait */
    if (!st && !(all_device && kiln_cuda_has_caller_stream(cp->cu))) st = kiln_cuda_sync(cp->cu);
    return st;
}

kiln_plan *kiln_cuda_plan_host(kiln_cuda_plan *cp) { return cp->p; }

bool kiln_cuda_plan_matches(const kiln_cuda_plan *cp, kiln_tensor *const *inputs) {
    return kiln_plan_matches(cp->p, inputs);
}

/* Device-side timing for benchmarks: inputs uploaded once (timed), then `iters` replays
 * of the captured graph each between two events (compute only, inputs resident), then
 * the outputs downloaded once (timed). Needs one warm run first (capture happens on the
 * second enqueue). inputs NULL: nothing uploaded (a prologue fills the input slots). */
kiln_status kiln_cuda_plan_time(kiln_cuda_plan *cp, kiln_tensor *const *inputs, int iters, double *compute_ms,
                                double *h2d_ms, double *d2h_ms) {
    kiln_context *ctx = cp->m->ctx;
    cudaStream_t s = (cudaStream_t)kiln_cuda_stream(cp->cu);
    if (!cp->exec && cp->use_graph) {
        kiln_status st = kiln_cuda_plan_enqueue(cp, inputs, true); /* warm + capture */
        if (!st) st = kiln_cuda_plan_enqueue(cp, inputs, true);
        if (!st) st = kiln_cuda_sync(cp->cu);
        if (st) return st;
    }
    cudaEvent_t *ev = calloc((size_t)iters + 3, sizeof *ev);
    if (!ev) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for timing events");
    kiln_status st = KILN_OK;
    int made = 0;
    for (; made < iters + 3; made++)
        if (cudaEventCreate(&ev[made]) != cudaSuccess) {
            st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaEventCreate failed");
            break;
        }
    const kiln_model *m = cp->m;
    if (!st) {
        cudaEventRecord(ev[0], s);
        for (int i = 0; inputs && i < m->n_inputs && !st; i++) {
            size_t nb = kiln_tensor_nbytes(inputs[i]);
            if (nb && !cp->bound[i]) st = kiln_cuda_upload(cp->cu, cp->dvt[m->inputs[i]].data, inputs[i]->data, nb);
        }
        cudaEventRecord(ev[1], s);
    }
    for (int i = 0; i < iters && !st; i++) {
        if (cp->exec) {
            cudaError_t ce = cudaGraphLaunch(cp->exec, s);
            if (ce != cudaSuccess) st = kiln_fail(ctx, KILN_ERR_DEVICE, "cudaGraphLaunch: %s", cudaGetErrorString(ce));
        } else {
            st = launch_all(cp, false); /* CUDA graphs switched off: one launch per node */
        }
        cudaEventRecord(ev[2 + i], s);
    }
    if (!st) {
        for (int j = 0; j < m->n_outputs && !st; j++) {
            kiln_tensor *h = &cp->host_out[j];
            size_t nb = kiln_tensor_nbytes(h);
            if (nb) st = kiln_cuda_download(cp->cu, h->data, cp->dvt[m->outputs[j]].data, nb);
        }
        cudaEventRecord(ev[iters + 2], s);
    }
    if (!st) st = kiln_cuda_sync(cp->cu);
    if (!st) {
        float ms = 0;
        cudaEventElapsedTime(&ms, ev[0], ev[1]);
        *h2d_ms = ms;
        for (int i = 0; i < iters; i++) {
            cudaEventElapsedTime(&ms, ev[1 + i], ev[2 + i]);
            compute_ms[i] = ms;
        }
        cudaEventElapsedTime(&ms, ev[iters + 1], ev[iters + 2]);
        *d2h_ms = ms;
    }
    for (int i = 0; i < made; i++) cudaEventDestroy(ev[i]);
    free(ev);
    return st;
}

static double host_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Per-node timing (kiln bench --profile): inputs uploaded once, then `iters` passes that
 * run the nodes one by one with events around each. A delay kernel ahead of each pass
 * holds the GPU while the host enqueues it (longer than the previous pass took to
 * enqueue, measured on an untimed first pass), so the nodes run back to back and an event
 * pair measures GPU time, not launch overhead. ms[i * n_exec + e]: node e's time in pass
 * i; start_ms: its start from the pass's first event. With pro_ms / epi_ms (iters
 * entries each) the plan's prologue / epilogue run in every pass, before / after the
 * nodes, between events of their own (a training step: the batch gather, the optimizer);
 * NULL, or a plan without one: it is not run. */
kiln_status kiln_cuda_plan_profile(kiln_cuda_plan *cp, kiln_tensor *const *inputs, int iters, double *ms,
                                   double *start_ms, double *pro_ms, double *epi_ms) {
    kiln_context *ctx = cp->m->ctx;
    cudaStream_t s = (cudaStream_t)kiln_cuda_stream(cp->cu);
    const int n = cp->n_exec;
    kiln_status st = KILN_OK;
    if (cp->runs == 0) { /* first-run work (cuDNN's algorithm search) outside the timing */
        st = kiln_cuda_plan_enqueue(cp, inputs, false);
        if (!st) st = kiln_cuda_sync(cp->cu);
        if (st) return st;
    }
    const kiln_model *m = cp->m;
    for (int i = 0; inputs && i < m->n_inputs && !st; i++) {
        size_t nb = kiln_tensor_nbytes(inputs[i]);
        if (nb && !cp->bound[i]) st = kiln_cuda_upload(cp->cu, cp->dvt[m->inputs[i]].data, inputs[i]->data, nb);
    }
    const bool pro = pro_ms && cp->prologue, epi = epi_ms && cp->epilogue;
    /* ev[0]: the pass's start; ev[1 + 2e], ev[2 + 2e]: around node e; then the prologue's
     * pair and the epilogue's */
    const int n_ev = 2 * n + 5, ev_pro = 2 * n + 1, ev_epi = 2 * n + 3;
    cudaEvent_t *ev = calloc((size_t)n_ev, sizeof *ev);
    if (!ev) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory for profiling events");
    int made = 0;
    for (; !st && made < n_ev; made++)
        KILN_CUDA_TRY(st, ctx, cudaEventCreate(&ev[made]));
    double hold_us = 1000;
    for (int it = -1; it < iters && !st; it++) { /* pass -1: calibrates the hold */
        const double t0 = host_ms();
        st = kiln_cuda_delay(cp->cu, hold_us);
        KILN_CUDA_TRY(st, ctx, cudaEventRecord(ev[0], s));
        if (pro) {
            KILN_CUDA_TRY(st, ctx, cudaEventRecord(ev[ev_pro], s));
            if (!st) st = cp->prologue(cp->prologue_arg);
            KILN_CUDA_TRY(st, ctx, cudaEventRecord(ev[ev_pro + 1], s));
        }
        for (int e = 0; e < n && !st; e++) {
            range_push(cp, e);
            KILN_CUDA_TRY(st, ctx, cudaEventRecord(ev[1 + 2 * e], s));
            if (!st) st = kiln_cuda_run(cp->cu, &cp->ctx[e]);
            KILN_CUDA_TRY(st, ctx, cudaEventRecord(ev[2 + 2 * e], s));
            range_pop(cp);
        }
        if (epi) {
            KILN_CUDA_TRY(st, ctx, cudaEventRecord(ev[ev_epi], s));
            if (!st) st = cp->epilogue(cp->epilogue_arg);
            KILN_CUDA_TRY(st, ctx, cudaEventRecord(ev[ev_epi + 1], s));
        }
        const double enqueue_ms = host_ms() - t0;
        if (!st) st = kiln_cuda_sync(cp->cu);
        hold_us = 1.5 * enqueue_ms * 1e3 + 200;
        if (hold_us > 2e5) hold_us = 2e5;
        for (int e = 0; e < n && !st && it >= 0; e++) {
            float a = 0, b = 0;
            KILN_CUDA_TRY(st, ctx, cudaEventElapsedTime(&a, ev[0], ev[1 + 2 * e]));
            KILN_CUDA_TRY(st, ctx, cudaEventElapsedTime(&b, ev[1 + 2 * e], ev[2 + 2 * e]));
            start_ms[(size_t)it * n + e] = a;
            ms[(size_t)it * n + e] = b;
        }
        float b = 0;
        if (pro && !st && it >= 0) {
            KILN_CUDA_TRY(st, ctx, cudaEventElapsedTime(&b, ev[ev_pro], ev[ev_pro + 1]));
            pro_ms[it] = b;
        }
        if (epi && !st && it >= 0) {
            KILN_CUDA_TRY(st, ctx, cudaEventElapsedTime(&b, ev[ev_epi], ev[ev_epi + 1]));
            epi_ms[it] = b;
        }
    }
    for (int i = 0; i < made; i++) cudaEventDestroy(ev[i]);
    free(ev);
    return st;
}
