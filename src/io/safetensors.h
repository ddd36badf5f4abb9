/*
 * safetensors.h — checkpoints in the safetensors format (internal; the lead exposes the
 * public parts in include/kiln.h).
 *
 * File layout (https://github.com/huggingface/safetensors): an 8-byte little-endian header
 * length H, H bytes of JSON
 *     {"__metadata__": {"key": "value", ...},
 *      "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * then the data: tensor bytes at [begin, end) relative to the end of the header,
 * little-endian, C order. Dtypes: BOOL U8 I8 U16 I16 F16 BF16 U32 I32 F32 U64 I64 F64.
 *
 * Saving is atomic: the file is written to "PATH.tmp.<pid>", flushed and fsynced, renamed
 * over PATH and the directory fsynced, so a crash at any moment leaves either the old
 * checkpoint or the new one at PATH (plus, after a crash, a stale PATH.tmp.<pid>, which
 * no loader mistakes for PATH).
 *
 * Loading checks everything: header length against the file size, strict JSON syntax
 * (UTF-8, escapes, no duplicate keys, no unknown fields), dtypes, shapes, offsets in range,
 * sizes = numel * dtype size, and that the tensors tile the data exactly (no overlap, no
 * gap, nothing after the last): any violation is KILN_ERR_PARSE naming the file and the
 * problem (KILN_ERR_UNSUPPORTED for a valid dtype kiln lacks, e.g. F8_E4M3).
 */
#ifndef KILN_SAFETENSORS_H
#define KILN_SAFETENSORS_H

#include "../core/internal.h"

/* Write n tensors (names[i] -> tensors[i]) and n_meta string pairs to path, atomically.
 * Names must be distinct, valid UTF-8 and not "__metadata__"; 4-D tensors must be NCHW
 * (the format has no layout field). Tensors are stored largest element first so that every
 * tensor starts aligned to its element size. n_meta may be 0 (keys/values NULL). The data
 * goes to "path.tmp.PID", renamed over path; first, such temporaries whose process no
 * longer exists (saves killed midway) are removed. */
kiln_status kiln_safetensors_save(kiln_context *ctx, const char *path, int n, const char *const *names,
                                  const kiln_tensor *const *tensors, int n_meta, const char *const *meta_keys,
                                  const char *const *meta_values);

/* A loaded checkpoint: every tensor read into its own allocation (aligned for its dtype). */
typedef struct kiln_safetensors kiln_safetensors;

kiln_status kiln_safetensors_load(kiln_context *ctx, const char *path, kiln_safetensors **out);
void kiln_safetensors_free(kiln_safetensors *st);

/* Tensors in the order of the file's header. Out-of-range i gives NULL. The tensors belong
 * to st. */
int kiln_safetensors_count(const kiln_safetensors *st);
const char *kiln_safetensors_name(const kiln_safetensors *st, int i);
const kiln_tensor *kiln_safetensors_tensor(const kiln_safetensors *st, int i);
/* The tensor called name, or NULL. */
const kiln_tensor *kiln_safetensors_find(const kiln_safetensors *st, const char *name);
/* Copy tensor `name` into dst, which must have the same dtype and dims: the restore path
 * of a checkpoint. Errors (on the loading context) name the file, the tensor and shapes. */
kiln_status kiln_safetensors_copy_to(const kiln_safetensors *st, const char *name, kiln_tensor *dst);

/* Metadata keys in file order, and lookup by key (NULL when absent). */
int kiln_safetensors_meta_count(const kiln_safetensors *st);
const char *kiln_safetensors_meta_key(const kiln_safetensors *st, int i);
const char *kiln_safetensors_meta(const kiln_safetensors *st, const char *key);

/* Tests only: when set, called after each chunk (1 MiB) of tensor data is written, with
 * the bytes written so far and the total. Lets a test kill a saving process mid-write. */
extern void (*kiln_safetensors_write_hook)(size_t done, size_t total);

#endif /* KILN_SAFETENSORS_H */
