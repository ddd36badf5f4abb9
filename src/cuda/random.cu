/*
 * random.cu — RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike and
 * Bernoulli: f32, f16 and bf16 outputs (Bernoulli's probabilities in any float dtype).
 *
 * The numbers are those of the CPU references (src/ops/random.c, src/ops/bernoulli.c),
 * bit for bit where the arithmetic allows: the counter-based stream of src/ops/random.h
 * keyed by the run seed, which lives in device memory on the kiln_cuda (kiln_cuda_rng_set,
 * kiln_cuda_rng_next: the trainer advances it every step inside a captured graph, as for
 * Dropout's masks), the node's seed attribute and its first output. Uniform and Bernoulli
 * are exact: integer mixing, one double product and sum (written with __dmul_rn /
 * __dadd_rn so that nvcc does not contract them into an FMA the CPU does not use). Normal
 * (Box-Muller) calls the device's double log, sqrt and cos, which may differ from glibc's
 * by an ulp of a double; after the rounding to float the values agree except in the rare
 * case where that ulp crosses a float rounding boundary (one float ulp then).
 */
#include "dtype.cuh"

#include "../ops/random.h"

#include <string.h>

using namespace kiln_cu;

namespace {

constexpr int THREADS = 256;

enum Kind { K_UNIFORM, K_NORMAL, K_BERNOULLI };

struct Key {
    kiln_random_keyparts parts;
    const uint64_t *seed; /* the run seed, on the device */
};

__device__ __forceinline__ uint64_t dmix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ double du(uint64_t key, uint64_t j) {
    return (double)(dmix(key + (j + 1) * KILN_RANDOM_GOLDEN) >> 11) * 0x1.0p-53;
}

/* y[i] for i < n: uniform a + (b - a) u, normal a + b z, Bernoulli u < p[i]. */
template <typename T>
__global__ void random_kernel(T *y, int64_t n, int kind, double a, double b, const void *p, int p_dt, Key k) {
    uint64_t key = dmix(*k.seed);
    if (k.parts.has_attr) key = dmix(key ^ k.parts.attr_mix);
    if (k.parts.has_out) key = dmix(key ^ k.parts.out0);
    const double two_pi = 6.283185307179586476925286766559;
    for (int64_t i = thread_index(); i < n; i += grid_stride()) {
        double v;
        if (kind == K_UNIFORM) {
            v = __dadd_rn(a, __dmul_rn(__dsub_rn(b, a), du(key, (uint64_t)i)));
        } else if (kind == K_NORMAL) {
            const double u1 = du(key, 2 * (uint64_t)i), u2 = du(key, 2 * (uint64_t)i + 1);
            const double z = __dmul_rn(sqrt(__dmul_rn(-2.0, log(__dsub_rn(1.0, u1)))), cos(__dmul_rn(two_pi, u2)));
            v = __dadd_rn(a, __dmul_rn(b, z));
        } else {
            v = du(key, (uint64_t)i) < load_any(p, p_dt, i) ? 1.0 : 0.0;
        }
        y[i] = from_f<T>((float)v);
    }
}

template <typename T>
kiln_status launch_random(kiln_cuda *cu, kiln_context *ctx, void *y, int64_t n, int kind, double a, double b,
                          const void *p, int p_dt, Key k) {
    if (n == 0) return KILN_OK;
    random_kernel<T><<<kiln_cuda_blocks(cu, n, THREADS), THREADS, 0, cu->stream>>>((T *)y, n, kind, a, b, p, p_dt, k);
    KILN_CUDA_LAUNCHED(ctx, "random_kernel");
    return KILN_OK;
}

} // namespace

extern "C" kiln_status kiln_cuda_k_random(kiln_cuda *cu, kiln_op_ctx *c) {
    const char *op = c->node->op_type;
    kiln_tensor *y = c->out[0];
    Key k;
    k.parts = kiln_random_parts(c->node);
    k.seed = cu->rng_seed;
    int kind;
    double a, b;
    const void *p = nullptr;
    int p_dt = 0;
    if (strcmp(op, "Bernoulli") == 0) {
        kind = K_BERNOULLI;
        a = b = 0;
        p = c->in[0]->data;
        p_dt = (int)c->in[0]->dtype;
    } else if (strncmp(op, "RandomNormal", 12) == 0) {
        kind = K_NORMAL;
        a = kiln_attr_float(c->node, "mean", 0.0f);
        b = kiln_attr_float(c->node, "scale", 1.0f);
    } else {
        kind = K_UNIFORM;
        a = kiln_attr_float(c->node, "low", 0.0f);
        b = kiln_attr_float(c->node, "high", 1.0f);
    }
    kiln_status st;
    KILN_CU_FLOAT_DISPATCH(st, c->kctx, y->dtype, launch_random, cu, c->kctx, y->data, kiln_tensor_numel(y), kind, a,
                           b, p, p_dt, k);
    return st;
}
