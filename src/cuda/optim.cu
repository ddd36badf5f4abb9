/*
 * optim.cu — the training step's tail on the device, with nothing read back to the host:
 *
 *   kiln_cuda_optimizer_step: one launch updates every parameter (SGD with momentum /
 *     Nesterov / weight decay, Adam, AdamW, Adadelta), walking a device table of
 *     (param, grad, state0, state1, copy, n) entries in chunks of KILN_CUDA_OPTIM_CHUNK
 *     elements: block b takes chunk b (grid-stride), finds its entry (find_entry: a warp
 *     reads 32 entries at once and a ballot picks the one holding the chunk), and updates
 *     that slice with 16-byte accesses when the entry's pointers allow. The learning rate
 *     and the step count are read from the device state (kiln_cuda_train_state), so a
 *     captured graph replays with a schedule moving the learning rate, without re-capture.
 *     With a tail (kiln_cuda_step_tail), the last block to finish (an atomic count of
 *     finished blocks in the state) then ends the step on one thread, as
 *     kiln_cuda_train_step_end, kiln_cuda_rng_next and kiln_cuda_advance would in three
 *     launches of their own (~2-3 us of a captured step each). The arithmetic is that of the CPU
 *     update (kiln_optimizer_update in src/cpu/train.c) operation for operation, in
 *     float with round-to-nearest intrinsics so that the compiler fuses nothing into FMAs
 *     (the CPU build does not contract either): results match the CPU bit for bit but for
 *     Adam's bias corrections (double pow on the device, 1-2 ulp of double apart).
 *   kiln_cuda_grad_check: one launch over the same table: any inf/NaN gradient sets the
 *     state's found_inf (and optionally unscales the gradients in place by 1/loss_scale).
 *     The optimizer skips its update when found_inf is set. It stays a launch of its own
 *     rather than a first phase of the update behind a grid-wide barrier: see
 *     kiln_cuda_grad_check below.
 *   kiln_cuda_train_step_end: one thread: step or skipped-step counters, PyTorch
 *     GradScaler's dynamic loss scale (x backoff on inf/NaN; x growth after
 *     growth_interval clean steps, if the result is finite), found_inf cleared, and the
 *     learning rate of the next step from the schedule (kiln_lr_schedule, src/core/schedule.h).
 */
#include "dtype.cuh"

#include <math.h>
#include <string.h>

/* the learning-rate schedule: the host's own function, compiled for the device too */
#include "../core/schedule.h"

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

/* What the update reads besides the table and the state. */
struct Hyper {
    int opt;
    float wd, mom, b1, b2, eps, rho;
    bool nesterov;
    bool unscale;
};

constexpr unsigned FULL = 0xffffffffu;

/* The entry holding chunk c: the last with first_chunk <= c (first_chunk never decreases;
 * entries of no elements share the next one's). Lane j of the warp reads entry base + j
 * whole, a ballot finds the last lane whose entry starts at or before c, and the entry's
 * fields come from that lane by shuffles: one round trip to the table for up to 32
 * entries (mnist-net has 8), where a binary search made ceil(log2 n) dependent loads
 * before the entry's own (4 round trips of ~0.2-0.5 us for 8 entries, at the start of
 * every block). Every lane of the warp calls it with the same c. */
__device__ __forceinline__ kiln_cuda_optim_entry find_entry(const kiln_cuda_optim_entry *t, int n, int64_t c) {
    const int lane = (int)(threadIdx.x & 31);
    kiln_cuda_optim_entry e = {};
    for (int base = 0; base < n; base += 32) {
        kiln_cuda_optim_entry mine = {};
        const bool in = base + lane < n;
        if (in) mine = t[base + lane];
        const unsigned le = __ballot_sync(FULL, in && mine.first_chunk <= c);
        if (!le) break; /* the entry is the last of an earlier group, already in e */
        const int src = 31 - __clz((int)le);
        e.param = (float *)__shfl_sync(FULL, (unsigned long long)mine.param, src);
        e.grad = (void *)__shfl_sync(FULL, (unsigned long long)mine.grad, src);
        e.state0 = (float *)__shfl_sync(FULL, (unsigned long long)mine.state0, src);
        e.state1 = (float *)__shfl_sync(FULL, (unsigned long long)mine.state1, src);
        e.copy = (void *)__shfl_sync(FULL, (unsigned long long)mine.copy, src);
        e.n = __shfl_sync(FULL, (long long)mine.n, src);
        e.first_chunk = __shfl_sync(FULL, (long long)mine.first_chunk, src);
        if (src < 31) break; /* a later entry starts after c */
    }
    return e;
}

/* Per-step constants shared by every element. */
struct StepConst {
    float lr, inv_scale;
    bool first;      /* step 0: SGD momentum takes the gradient */
    double bc1, bc2; /* Adam's bias corrections */
};

/* One element, as kiln_optimizer_update computes it; state s0 / s1 per the optimizer. */
__device__ __forceinline__ void update1(const Hyper &h, const StepConst &k, float &w, float g, float &s0, float &s1) {
    if (h.unscale) g = __fmul_rn(g, k.inv_scale);
    switch (h.opt) {
    case KILN_OPTIM_SGD: {
        float d = __fadd_rn(g, __fmul_rn(h.wd, w));
        if (h.mom != 0.f) {
            s0 = k.first ? d : __fadd_rn(__fmul_rn(h.mom, s0), d);
            d = h.nesterov ? __fadd_rn(d, __fmul_rn(h.mom, s0)) : s0;
        }
        w = __fsub_rn(w, __fmul_rn(k.lr, d));
        break;
    }
    case KILN_OPTIM_ADAM:
    case KILN_OPTIM_ADAMW: {
        float d = g;
        if (h.opt == KILN_OPTIM_ADAMW) w = __fmul_rn(w, __fsub_rn(1.f, __fmul_rn(k.lr, h.wd)));
        else d = __fadd_rn(d, __fmul_rn(h.wd, w));
        s0 = __fadd_rn(__fmul_rn(h.b1, s0), __fmul_rn(__fsub_rn(1.f, h.b1), d));
        s1 = __fadd_rn(__fmul_rn(h.b2, s1), __fmul_rn(__fmul_rn(__fsub_rn(1.f, h.b2), d), d));
        const float mhat = __double2float_rn(__ddiv_rn((double)s0, k.bc1));
        const float vhat = __double2float_rn(__ddiv_rn((double)s1, k.bc2));
        w = __fsub_rn(w, __fdiv_rn(__fmul_rn(k.lr, mhat), __fadd_rn(__fsqrt_rn(vhat), h.eps)));
        break;
    }
    default: { /* Adadelta */
        const float d = __fadd_rn(g, __fmul_rn(h.wd, w));
        const float one_m = __fsub_rn(1.f, h.rho);
        s0 = __fadd_rn(__fmul_rn(h.rho, s0), __fmul_rn(__fmul_rn(one_m, d), d));
        const float delta = __fmul_rn(__fdiv_rn(__fsqrt_rn(__fadd_rn(s1, h.eps)), __fsqrt_rn(__fadd_rn(s0, h.eps))), d);
        s1 = __fadd_rn(__fmul_rn(h.rho, s1), __fmul_rn(__fmul_rn(one_m, delta), delta));
        w = __fsub_rn(w, __fmul_rn(k.lr, delta));
        break;
    }
    }
}

/* The step's end on one thread: what kiln_cuda_train_step_end, kiln_cuda_rng_next and
 * kiln_cuda_advance do (the last two when seed / pos are set), in that order. */
struct Tail {
    kiln_cuda_scaler sc;
    bool dynamic;        /* a scaler was given */
    bool schedule;       /* o holds a schedule */
    kiln_train_options o;
    uint64_t *seed;      /* the run seed (kiln_cuda_rng_next), or NULL */
    int64_t *counter;
    uint64_t base;
    int64_t *pos;        /* the batch position (kiln_cuda_advance), or NULL */
    int64_t by;
    const float *loss;   /* the step's loss into ring[*ring_at % ring_size], or NULL */
    float *ring;
    int64_t *ring_at;
    int64_t ring_size;
};

__device__ void step_end(kiln_cuda_train_state *s, const Tail &t) {
    const bool inf = s->found_inf != 0;
    if (inf) s->skipped++;
    else s->step++;
    if (t.dynamic) {
        if (inf) {
            s->loss_scale = s->loss_scale * t.sc.backoff_factor;
            s->clean_steps = 0;
        } else if (s->clean_steps + 1 >= t.sc.growth_interval) {
            const float grown = s->loss_scale * t.sc.growth_factor;
            if (isfinite(grown)) s->loss_scale = grown;
            s->clean_steps = 0;
        } else {
            s->clean_steps++;
        }
    }
    s->found_inf = 0;
    if (t.schedule) s->lr = kiln_lr_schedule(&t.o, s->step);
    if (t.seed) { /* as rng_next_kernel in dropout.cu */
        const int64_t k = *t.counter;
        *t.seed = t.base + (uint64_t)k;
        *t.counter = k + 1;
    }
    if (t.pos) *t.pos += t.by; /* as advance_kernel in data.cu */
    if (t.loss) {
        const int64_t k = *t.ring_at;
        t.ring[k % t.ring_size] = *t.loss;
        *t.ring_at = k + 1;
    }
}

template <typename C> __device__ __forceinline__ void store_copy(void *copy, int64_t i, float w) {
    ((C *)copy)[i] = from_f<C>(w);
}

/* 4 gradients from element i (i a multiple of 4, the pointer 16-byte aligned). */
template <typename G> __device__ __forceinline__ void load4(const void *p, int64_t i, float *g) {
    if constexpr (sizeof(G) == 4) {
        const float4 v = *(const float4 *)((const float *)p + i);
        g[0] = v.x;
        g[1] = v.y;
        g[2] = v.z;
        g[3] = v.w;
    } else {
        struct alignas(8) Q {
            G v[4];
        };
        const Q q = *(const Q *)((const G *)p + i);
#pragma unroll
        for (int k = 0; k < 4; k++) g[k] = to_f(q.v[k]);
    }
}

/* TAIL: the last block to finish ends the step (Tail). Every block reads the state it
 * needs (found_inf, lr, step, loss_scale) at its start, before it counts itself in, and
 * only the last one writes it, after every block has counted itself in: no block can read
 * a value of the next step. The count returns to 0 for the next launch (graph replays). */
template <typename G, typename C, bool TAIL>
__global__ void optimizer_kernel(const kiln_cuda_optim_entry *table, int n, int64_t chunks, Hyper h,
                                 kiln_cuda_train_state *state, Tail tail) {
    /* a skipped step (inf/NaN gradients) updates nothing, but still ends the step */
    const bool skip = state->found_inf != 0;
    StepConst k;
    k.lr = state->lr;
    k.first = state->step == 0;
    k.inv_scale = h.unscale ? __double2float_rn(1.0 / (double)state->loss_scale) : 1.f;
    k.bc1 = k.bc2 = 1;
    if (h.opt == KILN_OPTIM_ADAM || h.opt == KILN_OPTIM_ADAMW) {
        const double t = (double)(state->step + 1);
        k.bc1 = 1.0 - pow((double)h.b1, t);
        k.bc2 = 1.0 - pow((double)h.b2, t);
    }
    const bool two_states = h.opt != KILN_OPTIM_SGD;
    const bool one_state = two_states || h.mom != 0.f;
    for (int64_t c = skip ? chunks : blockIdx.x; c < chunks; c += gridDim.x) {
        const kiln_cuda_optim_entry e = find_entry(table, n, c);
        const int64_t begin = (c - e.first_chunk) * KILN_CUDA_OPTIM_CHUNK;
        int64_t end = begin + KILN_CUDA_OPTIM_CHUNK;
        if (end > e.n) end = e.n;
        float *w = e.param, *s0 = e.state0, *s1 = e.state1;
        float dummy0 = 0.f, dummy1 = 0.f;
        const bool vec = ((uintptr_t)w % 16 == 0) && ((uintptr_t)e.grad % (4 * sizeof(G)) == 0) &&
                         (!one_state || (uintptr_t)s0 % 16 == 0) && (!two_states || (uintptr_t)s1 % 16 == 0);
        int64_t i = begin + threadIdx.x * 4;
        if (vec) {
            for (; i + 4 <= end; i += 4 * blockDim.x) {
                float4 wv = *(float4 *)(w + i), a = make_float4(0, 0, 0, 0), b = a;
                if (one_state) a = *(float4 *)(s0 + i);
                if (two_states) b = *(float4 *)(s1 + i);
                float g[4];
                load4<G>(e.grad, i, g);
                update1(h, k, wv.x, g[0], a.x, b.x);
                update1(h, k, wv.y, g[1], a.y, b.y);
                update1(h, k, wv.z, g[2], a.z, b.z);
                update1(h, k, wv.w, g[3], a.w, b.w);
                *(float4 *)(w + i) = wv;
                if (one_state) *(float4 *)(s0 + i) = a;
                if (two_states) *(float4 *)(s1 + i) = b;
                if (e.copy) {
                    store_copy<C>(e.copy, i, wv.x);
                    store_copy<C>(e.copy, i + 1, wv.y);
                    store_copy<C>(e.copy, i + 2, wv.z);
                    store_copy<C>(e.copy, i + 3, wv.w);
                }
            }
            /* the chunk's tail (an entry's last, partial group of 4): one element each */
            i = (end - begin) / 4 * 4 + begin + threadIdx.x;
        } else {
            i = begin + threadIdx.x;
        }
        for (; i < end; i += blockDim.x) {
            float wi = w[i];
            float &a = one_state ? s0[i] : dummy0;
            float &b = two_states ? s1[i] : dummy1;
            update1(h, k, wi, to_f(((const G *)e.grad)[i]), a, b);
            w[i] = wi;
            if (e.copy) store_copy<C>(e.copy, i, wi);
        }
    }
    if constexpr (TAIL) {
        __shared__ bool last;
        __syncthreads(); /* every thread of the block is past its reads of the state */
        if (threadIdx.x == 0) {
            __threadfence(); /* ... and they are ordered before the count */
            last = atomicAdd(&state->arrived, 1u) == gridDim.x - 1;
        }
        __syncthreads();
        if (last && threadIdx.x == 0) {
            __threadfence();
            step_end(state, tail);
            state->arrived = 0;
        }
    }
}

/* 4 values to element i (i a multiple of 4, the pointer aligned to 4 elements). */
template <typename G> __device__ __forceinline__ void store4(void *p, int64_t i, const float *v) {
    if constexpr (sizeof(G) == 4) {
        *(float4 *)((float *)p + i) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        struct alignas(8) Q {
            G v[4];
        } q;
#pragma unroll
        for (int k = 0; k < 4; k++) q.v[k] = from_f<G>(v[k]);
        *(Q *)((G *)p + i) = q;
    }
}

/* Any inf/NaN gradient sets found_inf; UNSCALE: each gradient times 1/loss_scale in place.
 * A full chunk with aligned gradients is R = 4 vectors of 4 per thread, all loaded before
 * any is used, so a thread waits on memory once per chunk. One element per thread would
 * make 16 round trips, and one vector per loop turn 4: with ~300 blocks of 256 threads
 * (mnist-net's 1.2 M gradients, 4.7 MB), one 16-byte load per thread is 1.2 MB in flight,
 * a quarter of what ~4.8 TB/s x ~1 us of loaded latency needs; R loads are all of it. */
template <typename G, bool UNSCALE>
__global__ void grad_check_kernel(const kiln_cuda_optim_entry *table, int n, int64_t chunks,
                                  kiln_cuda_train_state *state) {
    constexpr int R = KILN_CUDA_OPTIM_CHUNK / (4 * THREADS);
    static_assert(KILN_CUDA_OPTIM_CHUNK % (4 * THREADS) == 0, "a full chunk is R vectors per thread");
    const float inv = UNSCALE ? __double2float_rn(1.0 / (double)state->loss_scale) : 1.f;
    bool bad = false;
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const kiln_cuda_optim_entry e = find_entry(table, n, c);
        const int64_t begin = (c - e.first_chunk) * KILN_CUDA_OPTIM_CHUNK;
        int64_t end = begin + KILN_CUDA_OPTIM_CHUNK;
        if (end > e.n) end = e.n;
        G *g = (G *)e.grad;
        if (end - begin == KILN_CUDA_OPTIM_CHUNK && (uintptr_t)g % (4 * sizeof(G)) == 0) {
            float v[R][4];
#pragma unroll
            for (int r = 0; r < R; r++) load4<G>(g, begin + ((int64_t)r * THREADS + threadIdx.x) * 4, v[r]);
#pragma unroll
            for (int r = 0; r < R; r++) {
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    bad |= !isfinite(v[r][q]);
                    if (UNSCALE) v[r][q] = __fmul_rn(v[r][q], inv);
                }
                if (UNSCALE) store4<G>(g, begin + ((int64_t)r * THREADS + threadIdx.x) * 4, v[r]);
            }
            continue;
        }
        for (int64_t i = begin + threadIdx.x; i < end; i += THREADS) {
            const float v = to_f(g[i]);
            bad |= !isfinite(v);
            if (UNSCALE) g[i] = from_f<G>(__fmul_rn(v, inv));
        }
    }
    if (__any_sync(FULL, bad) && (threadIdx.x & 31) == 0) state->found_inf = 1;
}

__global__ void step_end_kernel(kiln_cuda_train_state *s, Tail t) { step_end(s, t); }

unsigned grid_for(const kiln_cuda *cu, int64_t chunks) {
    const int64_t cap = (int64_t)cu->props.sm_count * 8;
    return (unsigned)(chunks < cap ? chunks : cap > 0 ? cap : 1);
}

template <typename G, typename C>
kiln_status launch_opt(kiln_cuda *cu, kiln_context *ctx, const kiln_cuda_optim_entry *table, int n, int64_t chunks,
                       Hyper h, kiln_cuda_train_state *state, const Tail *tail) {
    const unsigned blocks = grid_for(cu, chunks);
    if (tail)
        optimizer_kernel<G, C, true><<<blocks, THREADS, 0, cu->stream>>>(table, n, chunks, h, state, *tail);
    else
        optimizer_kernel<G, C, false><<<blocks, THREADS, 0, cu->stream>>>(table, n, chunks, h, state, Tail{});
    KILN_CUDA_LAUNCHED(ctx, "optimizer_kernel");
    return KILN_OK;
}

template <typename G>
kiln_status launch_opt_copy(kiln_cuda *cu, kiln_context *ctx, kiln_dtype copy_dtype,
                            const kiln_cuda_optim_entry *table, int n, int64_t chunks, Hyper h,
                            kiln_cuda_train_state *state, const Tail *tail) {
    switch (copy_dtype) {
    case KILN_F16: return launch_opt<G, __half>(cu, ctx, table, n, chunks, h, state, tail);
    case KILN_BF16: return launch_opt<G, __nv_bfloat16>(cu, ctx, table, n, chunks, h, state, tail);
    default: return launch_opt<G, float>(cu, ctx, table, n, chunks, h, state, tail);
    }
}

template <typename G>
kiln_status launch_check(kiln_cuda *cu, kiln_context *ctx, const kiln_cuda_optim_entry *table, int n,
                         int64_t chunks, bool unscale, kiln_cuda_train_state *state) {
    const unsigned blocks = grid_for(cu, chunks);
    if (unscale) grad_check_kernel<G, true><<<blocks, THREADS, 0, cu->stream>>>(table, n, chunks, state);
    else grad_check_kernel<G, false><<<blocks, THREADS, 0, cu->stream>>>(table, n, chunks, state);
    KILN_CUDA_LAUNCHED(ctx, "grad_check_kernel");
    return KILN_OK;
}

/* The step end's arguments, checked (kiln_cuda_train_step_end and a tail). */
kiln_status tail_args(kiln_context *ctx, const kiln_cuda_scaler *scaler, const kiln_train_options *schedule,
                      Tail *t) {
    memset(t, 0, sizeof *t);
    t->sc = {2.f, 0.5f, 2000};
    if (scaler) t->sc = *scaler;
    t->dynamic = scaler != nullptr;
    if (scaler && (!(t->sc.growth_factor > 1.f) || !(t->sc.backoff_factor > 0.f && t->sc.backoff_factor < 1.f) ||
                   t->sc.growth_interval < 1))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "loss scaler: growth %g, backoff %g, interval %d (want > 1, in (0, 1), >= 1)",
                         t->sc.growth_factor, t->sc.backoff_factor, t->sc.growth_interval);
    if (schedule) {
        t->o = *schedule;
        t->schedule = true;
        if ((t->o.schedule == KILN_SCHEDULE_STEP && t->o.step_size <= 0) ||
            (t->o.schedule == KILN_SCHEDULE_COSINE && t->o.total_steps <= 0))
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "step end: the schedule needs step_size / total_steps > 0");
    }
    return KILN_OK;
}

kiln_status check_table(kiln_context *ctx, const void *table, int n, int64_t chunks, const void *state) {
    if (!table || n < 1 || chunks < 1 || !state)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                         "optimizer table: %d entries, %lld chunks, table %p, state %p (all required)", n,
                         (long long)chunks, table, state);
    return KILN_OK;
}

} // namespace

/* ------------------------------------------------------------------ entry points */

extern "C" int64_t kiln_cuda_optim_table_prepare(kiln_cuda_optim_entry *table, int n) {
    int64_t chunks = 0;
    for (int k = 0; k < n; k++) {
        table[k].first_chunk = chunks;
        chunks += (table[k].n + KILN_CUDA_OPTIM_CHUNK - 1) / KILN_CUDA_OPTIM_CHUNK;
    }
    return chunks;
}

extern "C" kiln_status kiln_cuda_train_state_init(kiln_cuda *cu, const kiln_train_options *o, float loss_scale,
                                                  kiln_cuda_train_state *state) {
    kiln_cuda_train_state s;
    memset(&s, 0, sizeof s);
    s.lr = o ? kiln_lr_schedule(o, 0) : 0.f;
    s.loss_scale = loss_scale;
    return kiln_cuda_upload(cu, state, &s, sizeof s);
}

/* The check stays a launch of its own before the update. Folding it into the update would
 * need every block to know every other block's verdict before it writes a weight: a
 * grid-wide barrier, which is only safe when all blocks are resident at once, i.e. a
 * cooperative launch (cudaLaunchCooperativeKernel; graph kernel nodes carry a cooperative
 * attribute, so it can be captured). What it would save is one kernel boundary in the
 * graph (~2-3 us) against a barrier of its own (one atomic per block on one address and a
 * spin, ~1 us at ~300 blocks), so ~1-2 us of fp16 steps only, for a grid bounded by the
 * occupancy calculator (the Adam path's double arithmetic holds more registers), a second
 * launch path, and a hang, not an error, should the bound ever be wrong. Not taken; the
 * check is instead made cheap: one load round trip per chunk (grad_check_kernel). */
extern "C" kiln_status kiln_cuda_grad_check(kiln_cuda *cu, const kiln_cuda_optim_entry *table, int n,
                                            int64_t chunks, kiln_dtype grad_dtype, bool unscale,
                                            kiln_cuda_train_state *state) {
    kiln_context *ctx = cu->ctx;
    kiln_status st = check_table(ctx, table, n, chunks, state);
    if (st) return st;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    KILN_CU_FLOAT_DISPATCH(st, ctx, grad_dtype, launch_check, cu, ctx, table, n, chunks, unscale, state);
    return st;
}

extern "C" kiln_status kiln_cuda_optimizer_step(kiln_cuda *cu, const kiln_train_options *o,
                                                const kiln_cuda_optim_entry *table, int n, int64_t chunks,
                                                kiln_dtype grad_dtype, kiln_dtype copy_dtype, bool unscale,
                                                kiln_cuda_train_state *state, const kiln_cuda_step_tail *tail) {
    kiln_context *ctx = cu->ctx;
    kiln_status st = check_table(ctx, table, n, chunks, state);
    if (st) return st;
    if (!o || o->optimizer < KILN_OPTIM_SGD || o->optimizer > KILN_OPTIM_ADADELTA)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "optimizer step: unknown optimizer");
    if (copy_dtype != KILN_DTYPE_UNDEFINED && copy_dtype != KILN_F16 && copy_dtype != KILN_BF16 &&
        copy_dtype != KILN_F32)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "optimizer step: weight copies of dtype %s",
                         kiln_dtype_name(copy_dtype));
    Tail t;
    if (tail) {
        st = tail_args(ctx, tail->scaler, tail->schedule, &t);
        if (st) return st;
        if (tail->rng_counter) {
            t.seed = cu->rng_seed;
            t.counter = tail->rng_counter;
            t.base = tail->rng_base;
        }
        t.pos = tail->pos;
        t.by = tail->pos_by;
        if (tail->loss && (!tail->loss_ring || !tail->ring_at || tail->ring_size < 1))
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "optimizer step: a loss without a ring to copy it into");
        t.loss = tail->loss;
        t.ring = tail->loss_ring;
        t.ring_at = tail->ring_at;
        t.ring_size = tail->ring_size;
    }
    Hyper h;
    memset(&h, 0, sizeof h);
    h.opt = o->optimizer;
    h.wd = o->weight_decay;
    h.mom = o->momentum;
    h.nesterov = o->nesterov != 0;
    h.b1 = o->beta1;
    h.b2 = o->beta2;
    h.eps = o->eps;
    h.rho = o->rho;
    h.unscale = unscale;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    KILN_CU_FLOAT_DISPATCH(st, ctx, grad_dtype, launch_opt_copy, cu, ctx, copy_dtype, table, n, chunks, h, state,
                           tail ? &t : nullptr);
    return st;
}

extern "C" kiln_status kiln_cuda_train_step_end(kiln_cuda *cu, const kiln_cuda_scaler *scaler,
                                                const kiln_train_options *schedule, kiln_cuda_train_state *state) {
    kiln_context *ctx = cu->ctx;
    if (!state) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "step end: state is NULL");
    Tail t;
    kiln_status st = tail_args(ctx, scaler, schedule, &t);
    if (st) return st;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    step_end_kernel<<<1, 1, 0, cu->stream>>>(state, t);
    KILN_CUDA_LAUNCHED(ctx, "step_end_kernel");
    return KILN_OK;
}
