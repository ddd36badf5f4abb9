/*
 * random.h — the counter-based stream of kiln's random generators (RandomUniform,
 * RandomNormal, their Like forms: src/ops/random.c; Bernoulli: src/ops/bernoulli.c), the
 * same one Dropout's masks come from (src/ops/dropout.c), so a run is reproducible from
 * its seed and independent of thread scheduling, and the CUDA kernels (src/cuda/random.cu)
 * draw the same numbers bit for bit:
 *
 *   key = mix64(run seed)                         the run's seed (kiln_op_ctx.seed; the
 *                                                 trainer's seed + step)
 *   key = mix64(key ^ mix64(s + golden))          when the node has a `seed` attribute, s
 *                                                 its value (a FLOAT's bits, an INT as is)
 *   key = mix64(key ^ node->out[0])               so two nodes of one graph draw apart
 *   u_j = (mix64(key + (j + 1) * golden) >> 11) * 2^-53, in [0, 1)
 *
 * Element i of a uniform draw is low + (high - low) * u_i, of a normal draw (Box-Muller)
 * mean + scale * sqrt(-2 ln(1 - u_2i)) * cos(2 pi u_2i+1), of a Bernoulli draw
 * u_i < p_i ? 1 : 0; all in double, then stored as kiln_set_f64 stores (through float
 * for f16 and bf16). ONNX's seed attribute fixes numpy's stream in the ONNX reference;
 * no other implementation can match it, and here it only selects another stream (new
 * numbers every run all the same).
 */
#ifndef KILN_OPS_RANDOM_H
#define KILN_OPS_RANDOM_H

#include "../core/internal.h"

#include <stdint.h>
#include <string.h>

#define KILN_RANDOM_GOLDEN 0x9E3779B97F4A7C15ull

static inline uint64_t kiln_random_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* What the key adds to the run seed's mix: has_attr / attr_mix for the seed attribute,
 * has_out / out0 for the node's first output. The device computes the key from these and
 * the run seed in device memory. */
typedef struct kiln_random_keyparts {
    int has_attr, has_out;
    uint64_t attr_mix, out0;
} kiln_random_keyparts;

static inline kiln_random_keyparts kiln_random_parts(const kiln_node *n) {
    kiln_random_keyparts p = {0, 0, 0, 0};
    const kiln_attr *a = kiln_node_attr(n, "seed");
    if (a) {
        uint64_t s = 0;
        if (a->type == KILN_ATTR_FLOAT) {
            uint32_t bits;
            memcpy(&bits, &a->f, sizeof bits);
            s = bits;
        } else {
            s = (uint64_t)a->i;
        }
        p.has_attr = 1;
        p.attr_mix = kiln_random_mix64(s + KILN_RANDOM_GOLDEN);
    }
    if (n->out && n->n_out > 0) {
        p.has_out = 1;
        p.out0 = (uint64_t)n->out[0];
    }
    return p;
}

static inline uint64_t kiln_random_key(uint64_t run_seed, kiln_random_keyparts p) {
    uint64_t key = kiln_random_mix64(run_seed);
    if (p.has_attr) key = kiln_random_mix64(key ^ p.attr_mix);
    if (p.has_out) key = kiln_random_mix64(key ^ p.out0);
    return key;
}

/* u_j in [0, 1) */
static inline double kiln_random_u(uint64_t key, uint64_t j) {
    return (double)(kiln_random_mix64(key + (j + 1) * KILN_RANDOM_GOLDEN) >> 11) * 0x1.0p-53;
}

/* The float dtypes a generator may write (ONNX: f16, f32, f64, bf16). */
static inline bool kiln_random_float_dtype(kiln_dtype dt) {
    return dt == KILN_F32 || dt == KILN_F64 || dt == KILN_F16 || dt == KILN_BF16;
}

#endif
