/*
 * row_unit.h — the unit in which a gather whose innermost dim is a contiguous run moves
 * its bytes (Transpose in movement.cu; Slice, Expand, Tile and Pad in slicing.cu): moving
 * rows in 16-byte units instead of element by element took ViT-B/16's transposes from ~670
 * GB/s and Swin's Slices from ~975 GB/s to the copy rate (bench/NOTES.md).
 */
#ifndef KILN_CUDA_ROW_UNIT_H
#define KILN_CUDA_ROW_UNIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The widest unit of 16, 8 or 4 bytes (es, the element size, when none) that divides the
 * run's length, the base offset and every outer stride (in elements: n_outer of them) and
 * both addresses x and y. The caller divides the run, base and strides by unit / es. */
static inline size_t kiln_cuda_row_unit(size_t es, int64_t run, const int64_t *outer, int n_outer, int64_t base,
                                        const void *x, const void *y) {
    for (size_t cand = 16; cand > es; cand /= 2) {
        const int64_t k = (int64_t)(cand / es);
        bool ok = run % k == 0 && base % k == 0 && (uintptr_t)x % cand == 0 && (uintptr_t)y % cand == 0;
        for (int d = 0; d < n_outer && ok; d++) ok = outer[d] % k == 0;
        if (ok) return cand;
    }
    return es;
}

#endif
