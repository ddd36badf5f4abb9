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
 *     launches of their own (~2-3 us of a captured step each). The arithmetic is
 *     src/ops/optim_math.h's, the CPU reference's (kiln.OptimizerStep; the frozen
 *     kiln_optimizer_update, tests/optim_reference.h) operation for operation, in float with round-to-nearest
 *     intrinsics so that the compiler fuses nothing into FMAs (the CPU build does not
 *     contract either): results match the CPU bit for bit but for Adam's bias corrections
 *     and the schedule's cos (double pow / cos on the device, 1-2 ulp of double apart).
 *   LARS, LAMB and gradient clipping need sums of squares over whole tensors before any
 *     element moves: norm_chunks (one pass over all tensors; block b sums chunk b's weights
 *     and gradients, or for LAMB its update direction, in double, into a per-chunk slot),
 *     then finalize (one block per tensor adds its chunks' slots in a fixed order), then
 *     the update, whose blocks read their tensor's sums (trust ratio) and all tensors'
 *     gradient sums (the clipping factor). Three launches (five for LAMB with clipping),
 *     nothing read back, no atomics: the same sums on every replay.
 *   kiln_cuda_grad_check: one launch over the same table: any inf/NaN gradient sets the
 *     state's found_inf (and optionally unscales the gradients in place by 1/loss_scale).
 *     The optimizer skips its update when found_inf is set. It stays a launch of its own
 *     rather than a first phase of the update behind a grid-wide barrier: see
 *     kiln_cuda_grad_check below.
 *   kiln_cuda_train_step_end: one thread: step or skipped-step counters, PyTorch
 *     GradScaler's dynamic loss scale (x backoff on inf/NaN; x growth after
 *     growth_interval clean steps, if the result is finite), found_inf cleared, and the
 *     learning rate of the next step from the schedule (kiln_lr_schedule, src/core/schedule.h).
 *
 * The same table walk serves the training graph's ops (one table.c line each):
 *   kiln.OptimizerStep    the update above, its step count, found_inf and 1/loss_scale
 *                         read from the op's scalar inputs and the learning rate from the
 *                         schedule at the step (optim_math.h); the step count moves in a
 *                         one-thread launch after it. The table is a __grid_constant__
 *                         kernel parameter (OP_GROUP entries a launch).
 *   kiln.NonFiniteCheck   the inf/NaN check into an f32 found_inf, and 1/loss_scale.
 *   kiln.LossScaleUpdate  GradScaler.update on one thread.
 *   kiln.GradAccumulate   the running sums of accumulated gradients, and the skip flag the
 *                         update reads between a step's micro-batches.
 * Outputs may be their inputs' buffers (updated in place); where they are not, the
 * update copies the inputs into them first.
 */
#include "dtype.cuh"

#include "../ops/optim_math.h"

#include <math.h>
#include <string.h>

/* the learning-rate schedule: the host's own function, compiled for the device too */
#include "../core/schedule.h"

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

/* What the update reads besides the table and the state. */
struct Hyper {
    kiln_om_hyper o;
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
        e.flags = __shfl_sync(FULL, mine.flags, src);
        e.slot = __shfl_sync(FULL, mine.slot, src);
        if (src < 31) break; /* a later entry starts after c */
    }
    return e;
}

/* Per-step constants shared by every element. */
struct StepConst {
    kiln_om_step s; /* lr, first step, Adam's bias corrections */
    float inv_scale;
};

/* One element, as kiln_optimizer_update computes it (optim_math.h, the CPU reference's
 * arithmetic); state s0 / s1 per the optimizer. */
__device__ __forceinline__ void update1(const Hyper &h, const StepConst &k, float &w, float g, float &s0, float &s1) {
    if (h.unscale) g = __fmul_rn(g, k.inv_scale);
    if (k.s.clip != 1.f) g = __fmul_rn(g, k.s.clip);
    kiln_om_update1(&h.o, &k.s, &w, g, &s0, &s1);
}

/* ---------------------------------------------- norms (LARS, LAMB, clipping)
 * Scratch (kiln_cuda_optim_table_bytes): partial[2 * chunks] per chunk, then
 * tsum[NORM_SLOTS * tensors] per tensor: w2, g2 (the gradient as read, unscaled, not
 * clipped), u2 (LAMB's update direction, clipped gradient). */
constexpr int NORM_SLOTS = 3;

/* a and b summed over the block in a fixed order; the sums on thread 0. */
__device__ __forceinline__ void block_sum2(double &a, double &b) {
    __shared__ double sa[THREADS / 32], sb[THREADS / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        a = __dadd_rn(a, __shfl_down_sync(FULL, a, o));
        b = __dadd_rn(b, __shfl_down_sync(FULL, b, o));
    }
    const int w = (int)(threadIdx.x >> 5), l = (int)(threadIdx.x & 31);
    __syncthreads(); /* the previous call's reads of sa / sb are done */
    if (l == 0) {
        sa[w] = a;
        sb[w] = b;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        a = sa[0];
        b = sb[0];
        for (int i = 1; i < (int)(blockDim.x >> 5); i++) {
            a = __dadd_rn(a, sa[i]);
            b = __dadd_rn(b, sb[i]);
        }
    }
}

/* The clipping factor from every tensor's gradient sum (tsum), the same in every block;
 * every thread of the block calls it. */
__device__ __forceinline__ float block_clip_coef(const double *tsum, int n_total, float max_norm) {
    __shared__ float coef;
    if (threadIdx.x < 32) {
        double t = 0;
        for (int k = (int)threadIdx.x; k < n_total; k += 32) t = __dadd_rn(t, tsum[NORM_SLOTS * k + 1]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) t = __dadd_rn(t, __shfl_down_sync(FULL, t, o));
        if (threadIdx.x == 0) coef = kiln_om_clip_coef(t, max_norm);
    }
    __syncthreads();
    return coef;
}

/* PHASE 0: each chunk's sums of w^2 and g^2 (gradient unscaled as read); PHASE 1 (LAMB):
 * of w^2 and u^2, u from the clipped gradient and the moments' next values (not stored). */
template <typename G, int PHASE>
__device__ __forceinline__ void norm_chunks(const kiln_cuda_optim_entry *table, int n, int64_t chunks, const Hyper &h,
                                            const StepConst &k, double *partial) {
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const kiln_cuda_optim_entry e = find_entry(table, n, c);
        const int64_t begin = (c - e.first_chunk) * KILN_CUDA_OPTIM_CHUNK;
        int64_t end = begin + KILN_CUDA_OPTIM_CHUNK;
        if (end > e.n) end = e.n;
        kiln_om_hyper hp = h.o;
        if (e.flags & KILN_CUDA_OPTIM_NO_DECAY) hp.wd = 0.f;
        double a = 0, b = 0;
        for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
            const float w = e.param[i];
            float g = to_f(((const G *)e.grad)[i]);
            if (h.unscale) g = __fmul_rn(g, k.inv_scale);
            a = kiln_om_sq_add(a, w);
            if constexpr (PHASE == 0) {
                b = kiln_om_sq_add(b, g);
            } else {
                if (k.s.clip != 1.f) g = __fmul_rn(g, k.s.clip);
                float m = e.state0[i], v = e.state1[i];
                b = kiln_om_sq_add(b, kiln_om_lamb_u(&hp, &k.s, w, g, &m, &v));
            }
        }
        block_sum2(a, b);
        if (threadIdx.x == 0) {
            partial[2 * c] = a;
            partial[2 * c + 1] = b;
        }
    }
}

/* Block j: entry j's chunk sums added in order into tsum[slot][sa] and [sb]. */
__device__ __forceinline__ void finalize_entry(const kiln_cuda_optim_entry *table, int n, const double *partial,
                                               double *tsum, int sa, int sb) {
    const int j = (int)blockIdx.x;
    if (j >= n) return; /* the whole block */
    const int64_t c0 = table[j].first_chunk, nc = (table[j].n + KILN_CUDA_OPTIM_CHUNK - 1) / KILN_CUDA_OPTIM_CHUNK;
    double a = 0, b = 0;
    for (int64_t c = threadIdx.x; c < nc; c += blockDim.x) {
        a = __dadd_rn(a, partial[2 * (c0 + c)]);
        b = __dadd_rn(b, partial[2 * (c0 + c) + 1]);
    }
    block_sum2(a, b);
    if (threadIdx.x == 0) {
        tsum[NORM_SLOTS * table[j].slot + sa] = a;
        tsum[NORM_SLOTS * table[j].slot + sb] = b;
    }
}

/* The step's constants from the device state (the fused tail's path). */
__device__ __forceinline__ StepConst state_const(const Hyper &h, const kiln_cuda_train_state *state) {
    StepConst k;
    k.s.lr = state->lr;
    k.s.lr_t = k.s.lr;
    k.s.clip = 1.f;
    k.s.first = state->step == 0;
    k.inv_scale = h.unscale ? __double2float_rn(1.0 / (double)state->loss_scale) : 1.f;
    k.s.bc1 = k.s.bc2 = 1;
    if (h.o.opt == KILN_OPTIM_ADAM || h.o.opt == KILN_OPTIM_ADAMW || h.o.opt == KILN_OPTIM_LAMB) {
        const double t = (double)(state->step + 1);
        k.s.bc1 = 1.0 - pow((double)h.o.b1, t);
        k.s.bc2 = 1.0 - pow((double)h.o.b2, t);
    }
    return k;
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
/* The table's chunks from c0 on, grid-stride: each block updates its chunks' slices (the
 * body of optimizer_kernel and of kiln.OptimizerStep's op_optimizer_kernel). */
template <typename G, typename C>
__device__ __forceinline__ void update_chunks(const kiln_cuda_optim_entry *table, int n, int64_t chunks,
                                              const Hyper &h0, const StepConst &k0, int64_t c0, const double *tsum) {
    const bool two_states = h0.o.opt != KILN_OPTIM_SGD && h0.o.opt != KILN_OPTIM_LARS;
    const bool one_state = two_states || h0.o.mom != 0.f || h0.o.opt == KILN_OPTIM_LARS;
    for (int64_t c = c0; c < chunks; c += gridDim.x) {
        const kiln_cuda_optim_entry e = find_entry(table, n, c);
        /* the tensor's hyper-parameters and learning rate (no decay; LARS / LAMB trust) */
        Hyper h = h0;
        StepConst k = k0;
        const bool decay = !(e.flags & KILN_CUDA_OPTIM_NO_DECAY);
        if (!decay) h.o.wd = 0.f;
        if (tsum && h.o.opt == KILN_OPTIM_LARS)
            k.s.lr_t = kiln_om_lars_lr(&h.o, k.s.lr, tsum[NORM_SLOTS * e.slot], tsum[NORM_SLOTS * e.slot + 1], k.s.clip,
                                       decay);
        else if (tsum && h.o.opt == KILN_OPTIM_LAMB)
            k.s.lr_t = kiln_om_lamb_lr(k.s.lr, tsum[NORM_SLOTS * e.slot], tsum[NORM_SLOTS * e.slot + 2], decay);
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
}

template <typename G, typename C, bool TAIL>
__global__ void optimizer_kernel(const kiln_cuda_optim_entry *table, int n, int64_t chunks, Hyper h,
                                 kiln_cuda_train_state *state, Tail tail, const double *tsum) {
    /* a skipped step (inf/NaN gradients) updates nothing, but still ends the step */
    const bool skip = state->found_inf != 0;
    StepConst k = state_const(h, state);
    if (tsum && h.o.clip > 0.f) k.s.clip = block_clip_coef(tsum, n, h.o.clip);
    update_chunks<G, C>(table, n, chunks, h, k, skip ? chunks : blockIdx.x, tsum);
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
__device__ __forceinline__ bool check_chunks(const kiln_cuda_optim_entry *table, int n, int64_t chunks, float inv) {
    constexpr int R = KILN_CUDA_OPTIM_CHUNK / (4 * THREADS);
    static_assert(KILN_CUDA_OPTIM_CHUNK % (4 * THREADS) == 0, "a full chunk is R vectors per thread");
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
    return bad;
}

template <typename G, bool UNSCALE>
__global__ void grad_check_kernel(const kiln_cuda_optim_entry *table, int n, int64_t chunks,
                                  kiln_cuda_train_state *state) {
    const float inv = UNSCALE ? __double2float_rn(1.0 / (double)state->loss_scale) : 1.f;
    const bool bad = check_chunks<G, UNSCALE>(table, n, chunks, inv);
    if (__any_sync(FULL, bad) && (threadIdx.x & 31) == 0) state->found_inf = 1;
}

__global__ void step_end_kernel(kiln_cuda_train_state *s, Tail t) { step_end(s, t); }

/* ------------------------------------------------- the training graph's ops
 * kiln.OptimizerStep and kiln.NonFiniteCheck walk the same chunked table as the calls
 * above, but the table travels as a kernel parameter (__grid_constant__: read in place from
 * the parameter space, nothing in device memory to allocate or upload, and a captured graph
 * replays it), up to OP_GROUP entries a launch; more parameters take more launches. The
 * step's scalars are the ops' inputs in device memory. */
unsigned grid_for(const kiln_cuda *cu, int64_t chunks);
constexpr int OP_GROUP = 56; /* 56 entries of 64 bytes and the other arguments: within the classic 4 KB of parameters */
struct OpTable {
    kiln_cuda_optim_entry e[OP_GROUP];
};

/* inv: 1 / loss_scale (or NULL: no unscaling); found: skip when non-zero (or NULL). */
template <typename G>
__global__ void op_optimizer_kernel(const __grid_constant__ OpTable tab, int n, int64_t chunks, Hyper h,
                                    kiln_om_schedule sch, const int64_t *step, const float *found, const float *inv,
                                    const double *tsum, int n_total) {
    const bool skip = found && *found != 0.f;
    StepConst k;
    k.s = kiln_om_step_at(&h.o, &sch, *step);
    k.inv_scale = inv ? *inv : 1.f;
    if (tsum && h.o.clip > 0.f) k.s.clip = block_clip_coef(tsum, n_total, h.o.clip);
    update_chunks<G, float>(tab.e, n, chunks, h, k, skip ? chunks : blockIdx.x, tsum);
}

/* The norm passes of kiln.OptimizerStep: partial is this group's chunks' slots. */
template <typename G, int PHASE>
__global__ void op_norms_kernel(const __grid_constant__ OpTable tab, int n, int64_t chunks, Hyper h,
                                kiln_om_schedule sch, const int64_t *step, const float *inv, double *partial,
                                const double *tsum, int n_total) {
    StepConst k;
    k.s = kiln_om_step_at(&h.o, &sch, *step);
    k.inv_scale = inv ? *inv : 1.f;
    if (PHASE == 1 && h.o.clip > 0.f) k.s.clip = block_clip_coef(tsum, n_total, h.o.clip);
    norm_chunks<G, PHASE>(tab.e, n, chunks, h, k, partial);
}

__global__ void op_finalize_kernel(const __grid_constant__ OpTable tab, int n, const double *partial, double *tsum,
                                   int sa, int sb) {
    finalize_entry(tab.e, n, partial, tsum, sa, sb);
}

/* The same for the fused tail's device table. */
template <typename G, int PHASE>
__global__ void norms_kernel(const kiln_cuda_optim_entry *table, int n, int64_t chunks, Hyper h,
                             const kiln_cuda_train_state *state, double *partial, const double *tsum) {
    StepConst k = state_const(h, state);
    if (PHASE == 1 && h.o.clip > 0.f) k.s.clip = block_clip_coef(tsum, n, h.o.clip);
    norm_chunks<G, PHASE>(table, n, chunks, h, k, partial);
}

__global__ void finalize_kernel(const kiln_cuda_optim_entry *table, int n, const double *partial, double *tsum, int sa,
                                int sb) {
    finalize_entry(table, n, partial, tsum, sa, sb);
}

/* After every group's update (in place, step_out may be step): the count moves unless skipped. */
__global__ void op_step_count_kernel(const int64_t *step, const float *found, int64_t *step_out) {
    const int64_t s = *step;
    *step_out = found && *found != 0.f ? s : s + 1;
}

/* found was zeroed before the first group; group 0's first thread writes inv. */
template <typename G>
__global__ void op_check_kernel(const __grid_constant__ OpTable tab, int n, int64_t chunks, float *found,
                                const float *scale, float *inv) {
    const bool bad = check_chunks<G, false>(tab.e, n, chunks, 1.f);
    if (__any_sync(FULL, bad) && (threadIdx.x & 31) == 0) *found = 1.f;
    if (inv && blockIdx.x == 0 && threadIdx.x == 0) *inv = scale ? __fdiv_rn(1.f, *scale) : 1.f;
}

/* Gradient accumulation over the table (param: the running sum, updated in place; grad:
 * the micro-batch's gradient, f32), as the CPU reference (optim_math.h). */
__global__ void op_accumulate_kernel(const __grid_constant__ OpTable tab, int n, int64_t chunks, const int64_t *micro,
                                     int64_t K) {
    const int64_t m = *micro % K;
    const bool first = m == 0, last = m == K - 1;
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        const kiln_cuda_optim_entry e = find_entry(tab.e, n, c);
        const int64_t begin = (c - e.first_chunk) * KILN_CUDA_OPTIM_CHUNK;
        int64_t end = begin + KILN_CUDA_OPTIM_CHUNK;
        if (end > e.n) end = e.n;
        const float *g = (const float *)e.grad;
        for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
            e.param[i] = kiln_om_accumulate1(first, last, K, e.param[i], g[i]);
    }
}

/* After every group: micro' and the update's skip flag. */
__global__ void op_micro_kernel(const int64_t *micro, int64_t K, int64_t *micro_out, float *skip) {
    const int64_t m = *micro;
    *micro_out = m + 1;
    *skip = m % K == K - 1 ? 0.f : 1.f;
}

/* GradScaler.update on one thread: every input read before any output is written. */
__global__ void op_scaler_kernel(const float *scale, const float *found, const int64_t *tracker,
                                 const int64_t *skipped, float *scale_out, int64_t *tracker_out, int64_t *skipped_out,
                                 bool dynamic, float growth, float backoff, int64_t interval) {
    float s = *scale;
    int64_t t = *tracker, k = *skipped;
    kiln_om_scaler_update(*found != 0.f, dynamic, growth, backoff, interval, &s, &t, &k);
    *scale_out = s;
    *tracker_out = t;
    *skipped_out = k;
}

template <typename G>
kiln_status launch_op_optimizer(kiln_cuda *cu, kiln_context *ctx, const OpTable &tab, int n, int64_t chunks,
                                const Hyper &h, const kiln_om_schedule &sch, const int64_t *step, const float *found,
                                const float *inv, const double *tsum, int n_total) {
    op_optimizer_kernel<G><<<grid_for(cu, chunks), THREADS, 0, cu->stream>>>(tab, n, chunks, h, sch, step, found, inv,
                                                                             tsum, n_total);
    KILN_CUDA_LAUNCHED(ctx, "op_optimizer_kernel");
    return KILN_OK;
}

/* One norm pass of a group (chunks >= 1), then its finalize into tsum slots sa, sb. */
template <typename G>
kiln_status launch_op_norms(kiln_cuda *cu, kiln_context *ctx, const OpTable &tab, int n, int64_t chunks, int phase,
                            const Hyper &h, const kiln_om_schedule &sch, const int64_t *step, const float *inv,
                            double *partial, double *tsum, int n_total) {
    if (chunks > 0) {
        if (phase == 0)
            op_norms_kernel<G, 0><<<grid_for(cu, chunks), THREADS, 0, cu->stream>>>(tab, n, chunks, h, sch, step, inv,
                                                                                    partial, tsum, n_total);
        else
            op_norms_kernel<G, 1><<<grid_for(cu, chunks), THREADS, 0, cu->stream>>>(tab, n, chunks, h, sch, step, inv,
                                                                                    partial, tsum, n_total);
        KILN_CUDA_LAUNCHED(ctx, "op_norms_kernel");
    }
    /* every entry's slots written, those of no elements as 0 */
    op_finalize_kernel<<<(unsigned)n, THREADS, 0, cu->stream>>>(tab, n, partial, tsum, 0, phase == 0 ? 1 : 2);
    KILN_CUDA_LAUNCHED(ctx, "op_finalize_kernel");
    return KILN_OK;
}

/* The fused tail's norm passes (norms: kiln_om_norms bits) into the table's scratch. */
template <typename G>
kiln_status launch_norms(kiln_cuda *cu, kiln_context *ctx, const kiln_cuda_optim_entry *table, int n, int64_t chunks,
                         int norms, const Hyper &h, const kiln_cuda_train_state *state, double *partial,
                         double *tsum) {
    const unsigned blocks = grid_for(cu, chunks);
    if (norms & 1) {
        norms_kernel<G, 0><<<blocks, THREADS, 0, cu->stream>>>(table, n, chunks, h, state, partial, tsum);
        KILN_CUDA_LAUNCHED(ctx, "norms_kernel");
        finalize_kernel<<<(unsigned)n, THREADS, 0, cu->stream>>>(table, n, partial, tsum, 0, 1);
        KILN_CUDA_LAUNCHED(ctx, "finalize_kernel");
    }
    if (norms & 2) {
        norms_kernel<G, 1><<<blocks, THREADS, 0, cu->stream>>>(table, n, chunks, h, state, partial, tsum);
        KILN_CUDA_LAUNCHED(ctx, "norms_kernel");
        finalize_kernel<<<(unsigned)n, THREADS, 0, cu->stream>>>(table, n, partial, tsum, 0, 2);
        KILN_CUDA_LAUNCHED(ctx, "finalize_kernel");
    }
    return KILN_OK;
}

template <typename G>
kiln_status launch_op_check(kiln_cuda *cu, kiln_context *ctx, const OpTable &tab, int n, int64_t chunks, float *found,
                            const float *scale, float *inv) {
    op_check_kernel<G><<<grid_for(cu, chunks), THREADS, 0, cu->stream>>>(tab, n, chunks, found, scale, inv);
    KILN_CUDA_LAUNCHED(ctx, "op_check_kernel");
    return KILN_OK;
}

bool is_nhwc(const kiln_tensor *t) { return t && t->ndim == 4 && t->format == KILN_FORMAT_NHWC; }

unsigned grid_for(const kiln_cuda *cu, int64_t chunks) {
    const int64_t cap = (int64_t)cu->props.sm_count * 8;
    return (unsigned)(chunks < cap ? chunks : cap > 0 ? cap : 1);
}

template <typename G, typename C>
kiln_status launch_opt(kiln_cuda *cu, kiln_context *ctx, const kiln_cuda_optim_entry *table, int n, int64_t chunks,
                       Hyper h, kiln_cuda_train_state *state, const Tail *tail, const double *tsum) {
    const unsigned blocks = grid_for(cu, chunks);
    if (tail)
        optimizer_kernel<G, C, true><<<blocks, THREADS, 0, cu->stream>>>(table, n, chunks, h, state, *tail, tsum);
    else
        optimizer_kernel<G, C, false><<<blocks, THREADS, 0, cu->stream>>>(table, n, chunks, h, state, Tail{}, tsum);
    KILN_CUDA_LAUNCHED(ctx, "optimizer_kernel");
    return KILN_OK;
}

template <typename G>
kiln_status launch_opt_copy(kiln_cuda *cu, kiln_context *ctx, kiln_dtype copy_dtype,
                            const kiln_cuda_optim_entry *table, int n, int64_t chunks, Hyper h,
                            kiln_cuda_train_state *state, const Tail *tail, const double *tsum) {
    switch (copy_dtype) {
    case KILN_F16: return launch_opt<G, __half>(cu, ctx, table, n, chunks, h, state, tail, tsum);
    case KILN_BF16: return launch_opt<G, __nv_bfloat16>(cu, ctx, table, n, chunks, h, state, tail, tsum);
    default: return launch_opt<G, float>(cu, ctx, table, n, chunks, h, state, tail, tsum);
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
            (t->o.schedule == KILN_SCHEDULE_COSINE && t->o.total_steps <= 0) ||
            (t->o.schedule == KILN_SCHEDULE_POLY && t->o.total_steps <= t->o.warmup_steps))
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                             "step end: the schedule needs step_size / total_steps > 0 (poly: > warmup_steps)");
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

static size_t entries_bytes(int n) { return ((sizeof(kiln_cuda_optim_entry) * (size_t)(n > 0 ? n : 1)) + 255) & ~(size_t)255; }

extern "C" size_t kiln_cuda_optim_table_bytes(int n, int64_t chunks) {
    return entries_bytes(n) + sizeof(double) * ((size_t)(2 * (chunks > 0 ? chunks : 1)) + (size_t)NORM_SLOTS * (size_t)(n > 0 ? n : 1));
}

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
    if (!o || o->optimizer < KILN_OPTIM_SGD || o->optimizer > KILN_OPTIM_LAMB)
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
    h.o.opt = o->optimizer;
    h.o.wd = o->weight_decay;
    h.o.mom = o->momentum;
    h.o.nesterov = o->nesterov != 0;
    h.o.b1 = o->beta1;
    h.o.b2 = o->beta2;
    h.o.eps = o->eps;
    h.o.rho = o->rho;
    h.o.eta = o->lars_eta > 0 ? o->lars_eta : 0.001f;
    h.o.clip = o->clip_grad_norm > 0 ? o->clip_grad_norm : 0.f;
    h.unscale = unscale;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    /* LARS, LAMB, clipping: the sums of squares first, in the table's scratch */
    const int norms = kiln_om_norms(&h.o);
    double *partial = norms ? (double *)((char *)table + entries_bytes(n)) : nullptr;
    double *tsum = norms ? partial + 2 * chunks : nullptr;
    if (norms)
        KILN_CU_FLOAT_DISPATCH(st, ctx, grad_dtype, launch_norms, cu, ctx, table, n, chunks, norms, h, state, partial,
                               tsum);
    if (st) return st;
    KILN_CU_FLOAT_DISPATCH(st, ctx, grad_dtype, launch_opt_copy, cu, ctx, copy_dtype, table, n, chunks, h, state,
                           tail ? &t : nullptr, tsum);
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

/* ------------------------------------------------------ the ops' entry points */

/* Chunks over all of a kiln.OptimizerStep's n parameters, and the workspace its norms take. */
static int64_t total_chunks(const kiln_op_ctx *c, int n) {
    int64_t chunks = 0;
    for (int k = 0; k < n; k++) chunks += (kiln_tensor_numel(c->in[3 + k]) + KILN_CUDA_OPTIM_CHUNK - 1) / KILN_CUDA_OPTIM_CHUNK;
    return chunks;
}

static size_t optimizer_step_ws(const kiln_op_ctx *c, int n) {
    return sizeof(double) * (size_t)(2 * total_chunks(c, n) + NORM_SLOTS * (int64_t)n);
}

extern "C" kiln_status kiln_cuda_ws_optimizer_step(kiln_cuda *cu, kiln_op_ctx *c, size_t *bytes) {
    (void)cu;
    *bytes = 0;
    kiln_om_hyper h;
    kiln_om_schedule sch;
    int n = 0, ns = 0;
    kiln_status st = (kiln_status)kiln_optimizer_step_config(c, &h, &sch, &n, &ns);
    if (st) return st;
    if (kiln_om_norms(&h)) *bytes = optimizer_step_ws(c, n);
    return KILN_OK;
}

/* kiln.OptimizerStep (src/ops/optimizer_step.c has the input layout). Outputs not sharing
 * their input's storage get a copy of it first, then are updated in place. */
extern "C" kiln_status kiln_cuda_k_optimizer_step(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_context *ctx = cu->ctx;
    Hyper h;
    memset(&h, 0, sizeof h);
    kiln_om_schedule sch;
    int n = 0, ns = 0;
    kiln_status st = (kiln_status)kiln_optimizer_step_config(c, &h.o, &sch, &n, &ns);
    if (st) return st;
    h.unscale = c->in[2] != NULL;
    const kiln_dtype gdt = c->in[3 + n]->dtype;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    for (int k = 0; k < n * (1 + ns); k++) {
        const kiln_tensor *src = c->in[k < n ? 3 + k : 3 + n + k];
        const kiln_tensor *dst = c->out[1 + k];
        if (dst->data != src->data)
            KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(dst->data, src->data, kiln_tensor_nbytes(src), cudaMemcpyDeviceToDevice,
                                                 cu->stream));
    }
    const int64_t *step = (const int64_t *)c->in[0]->data;
    const float *found = c->in[1] ? (const float *)c->in[1]->data : nullptr;
    const float *inv = c->in[2] ? (const float *)c->in[2]->data : nullptr;
    OpTable tab;
    /* the group of parameters k0.. as a table (first_chunk group-local) */
    auto group = [&](int k0, int cnt) -> int64_t {
        memset(&tab, 0, sizeof tab);
        for (int j = 0; j < cnt; j++) {
            const int k = k0 + j;
            kiln_cuda_optim_entry *e = &tab.e[j];
            e->param = (float *)c->out[1 + k]->data;
            e->grad = c->in[3 + n + k]->data;
            e->state0 = ns > 0 ? (float *)c->out[1 + n + k * ns]->data : nullptr;
            e->state1 = ns > 1 ? (float *)c->out[1 + n + k * ns + 1]->data : nullptr;
            e->n = kiln_tensor_numel(c->in[3 + k]);
            e->flags = kiln_optimizer_step_decays(c->node, k) ? 0 : KILN_CUDA_OPTIM_NO_DECAY;
            e->slot = k;
        }
        return kiln_cuda_optim_table_prepare(tab.e, cnt);
    };
    /* LARS, LAMB, clipping: every group's sums of squares (the workspace: per-chunk slots of
     * all groups, then per-tensor sums) before any group's update */
    const int norms = kiln_om_norms(&h.o);
    double *partial = nullptr, *tsum = nullptr;
    if (norms) {
        const size_t need = optimizer_step_ws(c, n);
        if (!c->workspace || c->workspace_size < need)
            return kiln_fail(ctx, KILN_ERR_INTERNAL, "OptimizerStep: %zu bytes of workspace, %zu needed",
                             c->workspace ? c->workspace_size : (size_t)0, need);
        partial = (double *)c->workspace;
        tsum = partial + 2 * total_chunks(c, n);
    }
    for (int phase = 0; phase < 2 && !st; phase++) {
        if (!(norms & (1 << phase))) continue;
        int64_t base = 0;
        for (int k0 = 0; k0 < n && !st; k0 += OP_GROUP) {
            const int cnt = n - k0 < OP_GROUP ? n - k0 : OP_GROUP;
            const int64_t chunks = group(k0, cnt);
            KILN_CU_FLOAT_DISPATCH(st, ctx, gdt, launch_op_norms, cu, ctx, tab, cnt, chunks, phase, h, sch, step, inv,
                                   partial + 2 * base, tsum, n);
            base += chunks;
        }
    }
    for (int k0 = 0; k0 < n && !st; k0 += OP_GROUP) {
        const int cnt = n - k0 < OP_GROUP ? n - k0 : OP_GROUP;
        const int64_t chunks = group(k0, cnt);
        if (chunks < 1) continue; /* parameters of no elements */
        KILN_CU_FLOAT_DISPATCH(st, ctx, gdt, launch_op_optimizer, cu, ctx, tab, cnt, chunks, h, sch, step, found, inv,
                               tsum, n);
    }
    if (st) return st;
    op_step_count_kernel<<<1, 1, 0, cu->stream>>>(step, found, (int64_t *)c->out[0]->data);
    KILN_CUDA_LAUNCHED(ctx, "op_step_count_kernel");
    return KILN_OK;
}

/* kiln.NonFiniteCheck(loss_scale?, grads...) -> found_inf, inv_scale? */
extern "C" kiln_status kiln_cuda_k_non_finite_check(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_context *ctx = cu->ctx;
    if (c->n_in < 2 || !c->in[1] || c->n_out < 1 || !c->out[0])
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "NonFiniteCheck: takes gradients and gives found_inf");
    float *found = (float *)c->out[0]->data;
    float *inv = c->n_out > 1 && c->out[1] ? (float *)c->out[1]->data : nullptr;
    const float *scale = c->in[0] ? (const float *)c->in[0]->data : nullptr;
    const kiln_dtype gdt = c->in[1]->dtype;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    KILN_CUDA_CHECK(ctx, cudaMemsetAsync(found, 0, sizeof(float), cu->stream));
    kiln_status st = KILN_OK;
    OpTable tab;
    const int n = c->n_in - 1;
    for (int k0 = 0; k0 < n && !st; k0 += OP_GROUP) {
        const int cnt = n - k0 < OP_GROUP ? n - k0 : OP_GROUP;
        memset(&tab, 0, sizeof tab);
        for (int j = 0; j < cnt; j++) {
            tab.e[j].grad = c->in[1 + k0 + j]->data;
            tab.e[j].n = kiln_tensor_numel(c->in[1 + k0 + j]);
        }
        const int64_t chunks = kiln_cuda_optim_table_prepare(tab.e, cnt);
        if (chunks < 1 && !(k0 == 0 && inv)) continue;
        /* the first group also writes inv_scale (one block at least) */
        KILN_CU_FLOAT_DISPATCH(st, ctx, gdt, launch_op_check, cu, ctx, tab, cnt, chunks > 0 ? chunks : 1, found, scale,
                               k0 == 0 ? inv : nullptr);
    }
    return st;
}

/* kiln.GradAccumulate(micro, grads..., sums...) -> micro', skip, sums'... (sums not in their
 * inputs' storage get a copy first) */
extern "C" kiln_status kiln_cuda_k_grad_accumulate(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_context *ctx = cu->ctx;
    int n = 0;
    int64_t K = 0;
    kiln_status st = (kiln_status)kiln_grad_accumulate_config(c, &n, &K);
    if (st) return st;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    for (int k = 0; k < n; k++) {
        const kiln_tensor *src = c->in[1 + n + k], *dst = c->out[2 + k];
        if (dst->data != src->data)
            KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(dst->data, src->data, kiln_tensor_nbytes(src), cudaMemcpyDeviceToDevice,
                                                 cu->stream));
    }
    const int64_t *micro = (const int64_t *)c->in[0]->data;
    OpTable tab;
    for (int k0 = 0; k0 < n; k0 += OP_GROUP) {
        const int cnt = n - k0 < OP_GROUP ? n - k0 : OP_GROUP;
        memset(&tab, 0, sizeof tab);
        for (int j = 0; j < cnt; j++) {
            tab.e[j].param = (float *)c->out[2 + k0 + j]->data;
            tab.e[j].grad = c->in[1 + k0 + j]->data;
            tab.e[j].n = kiln_tensor_numel(c->in[1 + k0 + j]);
        }
        const int64_t chunks = kiln_cuda_optim_table_prepare(tab.e, cnt);
        if (chunks < 1) continue;
        op_accumulate_kernel<<<grid_for(cu, chunks), THREADS, 0, cu->stream>>>(tab, cnt, chunks, micro, K);
        KILN_CUDA_LAUNCHED(ctx, "op_accumulate_kernel");
    }
    op_micro_kernel<<<1, 1, 0, cu->stream>>>(micro, K, (int64_t *)c->out[0]->data, (float *)c->out[1]->data);
    KILN_CUDA_LAUNCHED(ctx, "op_micro_kernel");
    return KILN_OK;
}

/* kiln.LossScaleUpdate(loss_scale, found_inf, growth_tracker, skipped) -> the three next values */
extern "C" kiln_status kiln_cuda_k_loss_scale_update(kiln_cuda *cu, kiln_op_ctx *c) {
    kiln_context *ctx = cu->ctx;
    bool dynamic = true;
    float growth = 2.f, backoff = 0.5f;
    int64_t interval = 2000;
    kiln_status st = (kiln_status)kiln_loss_scale_update_config(c, &dynamic, &growth, &backoff, &interval);
    if (st) return st;
    KILN_CUDA_CHECK(ctx, cudaSetDevice(cu->device));
    op_scaler_kernel<<<1, 1, 0, cu->stream>>>((const float *)c->in[0]->data, (const float *)c->in[1]->data,
                                               (const int64_t *)c->in[2]->data, (const int64_t *)c->in[3]->data,
                                               (float *)c->out[0]->data, (int64_t *)c->out[1]->data,
                                               (int64_t *)c->out[2]->data, dynamic, growth, backoff, interval);
    KILN_CUDA_LAUNCHED(ctx, "op_scaler_kernel");
    return KILN_OK;
}

/* ------------------------------------------------------------ supports */

/* Each parameter, its gradient, its states and their outputs in one layout (the update
 * walks the bytes); gradients f32, f16 or bf16. */
extern "C" bool kiln_cuda_sup_optimizer_step(const kiln_op_ctx *c, char *why, size_t wn) {
    const int n = (int)kiln_attr_int(c->node, "n", 0);
    const int ns = kiln_om_states((int)kiln_attr_int(c->node, "optimizer", 0), kiln_attr_float(c->node, "momentum", 0.f));
    if (n < 1 || c->n_in != 3 + n * (2 + ns) || c->n_out != 1 + n * (1 + ns)) {
        snprintf(why, wn, "%d inputs and %d outputs for n=%d", c->n_in, c->n_out, n);
        return false;
    }
    if (!kiln_cuda_float_dtype(c->in[3 + n]->dtype)) {
        snprintf(why, wn, "gradients of dtype %s (f32, f16 and bf16 are supported)", kiln_dtype_name(c->in[3 + n]->dtype));
        return false;
    }
    for (int k = 0; k < n; k++) {
        const bool nhwc = is_nhwc(c->in[3 + k]);
        bool same = is_nhwc(c->in[3 + n + k]) == nhwc && is_nhwc(c->out[1 + k]) == nhwc;
        for (int j = 0; j < ns; j++)
            same = same && is_nhwc(c->in[3 + 2 * n + k * ns + j]) == nhwc && is_nhwc(c->out[1 + n + k * ns + j]) == nhwc;
        if (!same) {
            snprintf(why, wn, "parameter %d, its gradient and states are not in one layout", k);
            return false;
        }
    }
    return true;
}

extern "C" bool kiln_cuda_sup_non_finite_check(const kiln_op_ctx *c, char *why, size_t wn) {
    if (c->n_in < 2 || !c->in[1] || !kiln_cuda_float_dtype(c->in[1]->dtype)) {
        snprintf(why, wn, "gradients must be f32, f16 or bf16");
        return false;
    }
    return true;
}

/* f32 gradients and sums, each pair in one layout */
extern "C" bool kiln_cuda_sup_grad_accumulate(const kiln_op_ctx *c, char *why, size_t wn) {
    const int n = (int)kiln_attr_int(c->node, "n", 0);
    if (n < 1 || c->n_in != 1 + 2 * n || c->n_out != 2 + n) {
        snprintf(why, wn, "%d inputs and %d outputs for n=%d", c->n_in, c->n_out, n);
        return false;
    }
    for (int k = 0; k < n; k++) {
        const kiln_tensor *g = c->in[1 + k], *a = c->in[1 + n + k], *o = c->out[2 + k];
        if (g->dtype != KILN_F32 || a->dtype != KILN_F32) {
            snprintf(why, wn, "gradient %d and its sum must be f32", k);
            return false;
        }
        if (is_nhwc(g) != is_nhwc(a) || is_nhwc(o) != is_nhwc(a)) {
            snprintf(why, wn, "gradient %d and its sum are not in one layout", k);
            return false;
        }
    }
    return true;
}

extern "C" bool kiln_cuda_sup_loss_scale_update(const kiln_op_ctx *c, char *why, size_t wn) {
    if (c->n_in != 4 || c->n_out != 3) {
        snprintf(why, wn, "takes 4 inputs and 3 outputs");
        return false;
    }
    return true;
}
