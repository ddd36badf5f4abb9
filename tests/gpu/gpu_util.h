/*
 * gpu_util.h — helpers both GPU test programs (test_cuda_ops, test_backend_ops) use: the
 * CPU reference on owning tensors, the tolerance compare, device copies of host tensors,
 * and the NVRTC check of generated fused sources.
 */
#ifndef KILN_TESTS_GPU_UTIL_H
#define KILN_TESTS_GPU_UTIL_H

#include "core/optest.h"
#include "cuda/cuda_backend.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The most outputs gpu_eval_ref takes. */
#define GPU_MAX_OUT 16

/* infer then the CPU forward of node on owning tensors out[] (run seed `seed`). With
 * shapes_only, infer alone: outputs without data. On failure out[] are all NULL. */
kiln_status gpu_eval_ref(kiln_context *ctx, const kiln_node *node, int n_in, kiln_tensor **in, int n_out,
                         kiln_tensor **out, uint64_t seed, bool shapes_only);

/* 0 when got matches want (dims equal; dtypes may differ) as |x - ref| <= atol + rtol*|ref|;
 * integer outputs exactly. A NaN got never passes. With nan_ref_ok (test_backend_ops) a NaN
 * reference passes against a NaN got and an infinite one only against the same infinity;
 * without (test_cuda_ops) a NaN reference never passes and an infinite one also within
 * tolerance. Prints the FAIL line (first differing element, max error), and the
 * ok line (max error, share of the error budget used) with print_ok. *budget (if not NULL)
 * receives the largest share of the error budget used. */
int gpu_compare(const kiln_tensor *got, const kiln_tensor *want, double atol, double rtol, const char *label,
                bool nan_ref_ok, bool print_ok, double *budget);

/* Device copy d of host tensor h (NCHW; shape, dtype) from cu's arena, laid out as fmt,
 * `offset` bytes past a 256-byte boundary; data uploaded unless upload is false. */
kiln_status gpu_device_copy(kiln_cuda *cu, kiln_context *ctx, const kiln_tensor *h, size_t offset, bool upload,
                            kiln_format fmt, kiln_tensor *d);

/* --dry-run: the source generated for c compiles with NVRTC for sm_90 (each distinct
 * source once). */
bool gpu_generated_compiles(kiln_context *ctx, kiln_op_ctx *c);

#endif
