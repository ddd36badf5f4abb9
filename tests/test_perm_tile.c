/*
 * test_perm_tile.c — the tiled permutation's plan (src/cuda/perm_tile.h) on the CPU: for
 * random shapes and permutations (ranks 2 to 6, some dims 1), and maxvit_t's window and grid
 * partitions at a small batch, each with tiles of 32 and of 64, the offsets movement.cu's perm_tile_kernel walks (tile pairs,
 * A run, B run) must write every output element exactly once with the element a plain
 * index-by-index transpose puts there. The kernel itself is swept on the GPU (backend_ops'
 * Transpose cases).
 */
#include "cuda/perm_tile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed, passed, planned;

static uint64_t rng = 12345;
static int64_t rnd(int64_t n) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int64_t)((rng >> 33) % (uint64_t)n);
}

/* one case: input dims[r], perm[r] (output dim k is input dim perm[k]) */
static void one(int r, const int64_t *dims, const int64_t *perm, int side, const char *label) {
    int64_t n = 1, xs[KILN_MAX_DIMS], odims[KILN_MAX_DIMS];
    for (int d = r - 1; d >= 0; d--) {
        xs[d] = n;
        n *= dims[d];
    }
    for (int k = 0; k < r; k++) odims[k] = dims[perm[k]];
    /* the reference: y[i] = x at the input index of output index i */
    int64_t *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
    if (!want || !got) {
        printf("FAIL %s: out of memory\n", label);
        failed++;
        free(want);
        free(got);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t rest = i, off = 0;
        for (int k = r - 1; k >= 0; k--) {
            off += (rest % odims[k]) * xs[perm[k]];
            rest /= odims[k];
        }
        want[i] = off; /* x holds its own offsets */
        got[i] = -1;
    }
    int64_t md[KILN_MAX_DIMS], ms[KILN_MAX_DIMS];
    const int nd = kiln_perm_merge(r, dims, xs, perm, false, md, ms);
    kiln_perm_tile t;
    if (nd == 0 || !kiln_perm_tile_plan(nd, md, ms, side, &t)) {
        free(want);
        free(got);
        return; /* the other kernels' case */
    }
    planned++;
    int64_t writes = 0, bad = -1;
    if (t.A * t.B * t.outer != n) {
        printf("FAIL %s: A %lld x B %lld x outer %lld != %lld elements\n", label, (long long)t.A, (long long)t.B,
               (long long)t.outer, (long long)n);
        failed++;
        free(want);
        free(got);
        return;
    }
    for (int64_t o = 0; o < t.outer; o++) {
        int64_t ib, ob;
        kiln_perm_tile_outer(&t, o, &ib, &ob);
        for (int64_t a = 0; a < t.A; a++)
            for (int64_t b = 0; b < t.B; b++) {
                const int64_t src = ib + kiln_perm_tile_in_a(&t, a) + b, dst = ob + kiln_perm_tile_out_b(&t, b) + a;
                if (dst < 0 || dst >= n || src < 0 || src >= n || got[dst] != -1) {
                    if (bad < 0) bad = dst;
                    continue;
                }
                got[dst] = src;
                writes++;
            }
    }
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) wrong += got[i] != want[i];
    if (bad >= 0 || writes != n || wrong) {
        printf("FAIL %s: %lld writes of %lld, %lld wrong, first bad destination %lld\n", label, (long long)writes,
               (long long)n, (long long)wrong, (long long)bad);
        failed++;
    } else {
        passed++;
    }
    free(want);
    free(got);
}

int main(void) {
    /* maxvit_t's partitions (batch 2 for the test): window, grid and back */
    static const struct {
        int64_t dims[6], perm[6];
        const char *label;
    } fixed[] = {
        {{2, 64, 7, 8, 7, 8}, {0, 2, 4, 3, 5, 1}, "maxvit window partition [2,64,7,8,7,8] -> [2,7,7,8,8,64]"},
        {{2, 8, 8, 7, 7, 64}, {0, 5, 1, 3, 2, 4}, "maxvit window reverse [2,8,8,7,7,64] -> [2,64,8,7,8,7]"},
        {{2, 7, 7, 8, 8, 64}, {0, 5, 1, 3, 2, 4}, "maxvit grid reverse [2,7,7,8,8,64] -> [2,64,7,8,7,8]"},
        {{2, 64, 8, 7, 8, 7}, {0, 2, 4, 3, 5, 1}, "maxvit grid partition [2,64,8,7,8,7] -> [2,8,8,7,7,64]"},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        const int before = planned;
        one(6, fixed[i].dims, fixed[i].perm, 32, fixed[i].label);
        one(6, fixed[i].dims, fixed[i].perm, 64, fixed[i].label);
        if (planned != before + 2) {
            printf("FAIL %s: not planned as tiles (the case they are for)\n", fixed[i].label);
            failed++;
        }
    }
    /* random ranks, sizes (1 to 9, some 1) and permutations */
    for (int c = 0; c < 3000; c++) {
        const int r = 2 + (int)rnd(5);
        int64_t dims[KILN_MAX_DIMS], perm[KILN_MAX_DIMS], n = 1;
        for (int d = 0; d < r; d++) {
            dims[d] = rnd(5) == 0 ? 1 : 1 + rnd(9);
            n *= dims[d];
            perm[d] = d;
        }
        if (n > 200000) continue;
        for (int d = r - 1; d > 0; d--) {
            const int j = (int)rnd(d + 1);
            const int64_t tmp = perm[d];
            perm[d] = perm[j];
            perm[j] = tmp;
        }
        char label[160];
        int k = snprintf(label, sizeof label, "random case %d: [", c);
        for (int d = 0; d < r; d++) k += snprintf(label + k, sizeof label - (size_t)k, "%s%lld", d ? "," : "", (long long)dims[d]);
        k += snprintf(label + k, sizeof label - (size_t)k, "] perm ");
        for (int d = 0; d < r; d++) k += snprintf(label + k, sizeof label - (size_t)k, "%lld", (long long)perm[d]);
        one(r, dims, perm, 32, label); /* the two sides kiln_perm_tile_side gives */
        one(r, dims, perm, 64, label);
    }
    printf("%d tiled plans checked: %d passed, %d failed\n", planned, passed, failed);
    if (planned < 1000) {
        printf("FAIL only %d of the random cases took the tiles (want at least 1000)\n", planned);
        failed++;
    }
    return failed ? 1 : 0;
}
