/*
 * algo_cache.h — cuDNN algorithm choices, in memory on the kiln_cuda and on disk in one
 * small text file shared by every process of the user (see algo_cache.c for the format).
 * Plain C without CUDA headers, so tests/gpu/test_algo_cache.c checks it on any machine.
 */
#ifndef KILN_CUDA_ALGO_CACHE_H
#define KILN_CUDA_ALGO_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_ALGO_KEY 320

/* One choice: the problem (a key conv.c writes: shapes, dtype, layouts, group, pads,
 * strides, dilations, math type, workspace cap, alignment, determinism, search mode) and
 * what was chosen for it. */
typedef struct kiln_algo_entry {
    char key[KILN_ALGO_KEY];
    int algo;      /* cudnnConvolutionFwdAlgo_t */
    int math;      /* cudnnMathType_t */
    size_t bytes;  /* workspace the algorithm needs */
    float ms;      /* time cuDNN measured (0 for heuristic choices) */
    int fused;     /* cudnnConvolutionBiasActivationForward runs this choice (1), does not or
                      is slower than a split (0), not tried yet (-1); stored on disk when >= 0 */
} kiln_algo_entry;

/* The cache file's default path is kiln_autotune_cache_path (kiln_tools.h), which
 * `kiln cache` shares. */

/* The line prefix "<gpu>|<library version>|" that scopes entries to one GPU model and one
 * cuDNN; characters that would break a line ('|', control characters) become '_'. */
void kiln_algo_cache_prefix(char *buf, size_t n, const char *gpu, long version);

/* Append to (*list, *n, *cap) every well-formed line of the file that starts with prefix
 * (the key after it). A missing file adds nothing; malformed lines (truncated, garbage,
 * out-of-range numbers, too long) are skipped. Returns the number added, -1 out of memory. */
int kiln_algo_cache_load(const char *path, const char *prefix, kiln_algo_entry **list, int *n, int *cap);

/* Add e under prefix to the file: its well-formed lines (of any prefix) are kept, except one
 * for the same prefix and key, which e replaces; the result is written to a temporary file
 * beside it and renamed over it, so readers see the old file or the new one, never a part.
 * Creates missing directories. Returns 0, or -1 with errno set. */
int kiln_algo_cache_store(const char *path, const char *prefix, const kiln_algo_entry *e);

/* The entry with this key, or NULL. */
kiln_algo_entry *kiln_algo_cache_find(kiln_algo_entry *list, int n, const char *key);
/* Append a copy of e (replacing an entry with the same key); NULL when out of memory. */
kiln_algo_entry *kiln_algo_cache_put(kiln_algo_entry **list, int *n, int *cap, const kiln_algo_entry *e);

#ifdef __cplusplus
}
#endif
#endif /* KILN_CUDA_ALGO_CACHE_H */
