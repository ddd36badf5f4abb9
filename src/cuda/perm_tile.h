/*
 * perm_tile.h — a permutation (Transpose) moved through shared-memory tiles when neither its
 * reads nor its writes would be contiguous element by element: the output's innermost dim
 * is not the input's. movement.cu's transpose_kernel computes each output element's input
 * offset and reads it alone; maxvit_t's window and grid partitions ([256,64,7,8,7,8] ->
 * [256,7,7,8,8,64] and back, f16) ran at ~400 GB/s that way, 66 of them 9.8 ms of its 45.8
 * at batch 256 on an H100 (bench/NOTES.md, the seventeenth session).
 *
 * The plan, from the output's dims (merged as kiln_cuda_k_transpose merges them, written in
 * order) and each one's input stride:
 *   - the A run: the output's trailing dims, innermost first, until they hold `side` elements
 *     (contiguous in the output by construction); element a of the run is at output offset a
 *     and at input offset in_a(a) (a decomposed over the run's dims, at their input strides);
 *   - the B run: the dims whose input strides chain up from 1 (the input's innermost dims,
 *     contiguous there), not in the A run, until they hold `side` elements; element b is at
 *     input offset b and at output offset out_b(b);
 *   - the other dims, walked one tile pair at a time (their input and output offsets).
 * A block reads a side x side tile along b (coalesced) into shared memory and writes it
 * along a (coalesced). Shared with the CPU test (tests/test_perm_tile.c), which walks the
 * same offsets against the CPU Transpose.
 *
 * C11 and CUDA C++: static inline functions, __host__ __device__ under nvcc.
 */
#ifndef KILN_CUDA_PERM_TILE_H
#define KILN_CUDA_PERM_TILE_H

#include <stdbool.h>
#include <stdint.h>

#include "kiln.h" /* KILN_MAX_DIMS */

#ifdef __CUDACC__
#define KILN_PT_FN static __host__ __device__ __forceinline__
#else
#define KILN_PT_FN static inline
#endif

/* The tile's side in elements: 64 for 1- and 2-byte elements, 32 for wider ones (rows of 64
 * to 256 bytes, and enough loads in flight per thread: 32 x 32 tiles of f16 moved maxvit_t's
 * partitions at only ~610 GB/s). */
#define KILN_PERM_TILE_MAX 64
static inline int kiln_perm_tile_side(int64_t elem_bytes) { return elem_bytes <= 2 ? 64 : 32; }

typedef struct kiln_perm_tile {
    int side;                                         /* the tile's side (kiln_perm_tile_side) */
    int na, nb, no;
    int64_t A, B, outer;                              /* the runs' sizes; tile pairs' count */
    int64_t asize[KILN_MAX_DIMS], ain[KILN_MAX_DIMS]; /* A run, innermost first: size, input stride */
    int64_t bsize[KILN_MAX_DIMS], bout[KILN_MAX_DIMS]; /* B run, innermost first: size, output stride */
    int64_t osize[KILN_MAX_DIMS], oin[KILN_MAX_DIMS], oout[KILN_MAX_DIMS]; /* the rest, outermost first */
} kiln_perm_tile;

/* A permutation's output dims in the order they are written, with their input strides:
 * size-1 dims dropped, and an output dim merged into the one before it where it is the next
 * input dim (walked as one run). xstride: the input's strides (a 4-D NHWC input's logical
 * dims at its physical strides); y_nhwc: a 4-D output written NHWC (dims walked N, H, W, C).
 * Returns the number of dims (0: one element). */
static inline int kiln_perm_merge(int r, const int64_t *xdims, const int64_t *xstride, const int64_t *perm, bool y_nhwc,
                                  int64_t *dims, int64_t *stride) {
    static const int nhwc_order[4] = {0, 2, 3, 1};
    int nd = 0;
    for (int k = 0; k < r; k++) {
        const int d = y_nhwc && r == 4 ? nhwc_order[k] : k;
        const int64_t size = xdims[perm[d]], st = xstride[perm[d]];
        if (size == 1) continue;
        if (nd > 0 && stride[nd - 1] == st * size) {
            dims[nd - 1] *= size;
            stride[nd - 1] = st;
        } else {
            dims[nd] = size;
            stride[nd] = st;
            nd++;
        }
    }
    return nd;
}

/* The plan of a permutation whose output dims (nd of them, merged, size > 1) are dims[] at
 * input strides istride[], for tiles of side `side` (each run takes dims until it holds that
 * many elements). False where the tiles do not pay: the output's innermost dim is contiguous
 * in the input too (row copies do it), or either run holds fewer than 4 elements. */
static inline bool kiln_perm_tile_plan(int nd, const int64_t *dims, const int64_t *istride, int side,
                                       kiln_perm_tile *t) {
    if (nd < 2 || nd > KILN_MAX_DIMS || istride[nd - 1] == 1 || side < 4 || side > KILN_PERM_TILE_MAX) return false;
    t->side = side;
    int64_t ostride[KILN_MAX_DIMS];
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        ostride[d] = s;
        s *= dims[d];
    }
    bool used[KILN_MAX_DIMS] = {false};
    t->na = t->nb = t->no = 0;
    t->A = t->B = 1;
    for (int d = nd - 1; d >= 0 && t->A < side && istride[d] != 1; d--) {
        t->asize[t->na] = dims[d];
        t->ain[t->na] = istride[d];
        t->na++;
        t->A *= dims[d];
        used[d] = true;
    }
    for (int64_t want = 1; t->B < side;) { /* the next dim of the input's contiguous chain */
        int next = -1;
        for (int d = 0; d < nd; d++)
            if (istride[d] == want) next = d;
        if (next < 0 || used[next]) break;
        t->bsize[t->nb] = dims[next];
        t->bout[t->nb] = ostride[next];
        t->nb++;
        t->B *= dims[next];
        want *= dims[next];
        used[next] = true;
    }
    if (t->A < 4 || t->B < 4) return false;
    t->outer = 1;
    for (int d = 0; d < nd; d++)
        if (!used[d]) {
            t->osize[t->no] = dims[d];
            t->oin[t->no] = istride[d];
            t->oout[t->no] = ostride[d];
            t->no++;
            t->outer *= dims[d];
        }
    return true;
}

/* Element i of a run of n dims (innermost first: size[k], stride[k]): its offset. */
KILN_PT_FN int64_t kiln_perm_tile_run(const int64_t *size, const int64_t *stride, int n, int64_t i) {
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        off += (i % size[k]) * stride[k];
        i /= size[k];
    }
    return off;
}

/* The input offset of A-run element a; the output offset of B-run element b. */
KILN_PT_FN int64_t kiln_perm_tile_in_a(const kiln_perm_tile *t, int64_t a) {
    return kiln_perm_tile_run(t->asize, t->ain, t->na, a);
}
KILN_PT_FN int64_t kiln_perm_tile_out_b(const kiln_perm_tile *t, int64_t b) {
    return kiln_perm_tile_run(t->bsize, t->bout, t->nb, b);
}

/* The input and output offsets of tile pair o (of t->outer). */
KILN_PT_FN void kiln_perm_tile_outer(const kiln_perm_tile *t, int64_t o, int64_t *in, int64_t *out) {
    int64_t i = 0, j = 0;
    for (int d = t->no - 1; d >= 0; d--) {
        const int64_t k = o % t->osize[d];
        o /= t->osize[d];
        i += k * t->oin[d];
        j += k * t->oout[d];
    }
    *in = i;
    *out = j;
}

#endif
