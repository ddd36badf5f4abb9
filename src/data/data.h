/*
 * data.h — datasets and batch loading for training: what the library alone uses. The
 * MNIST-format data set (kiln_mnist_load) and the batch loader, which the `kiln` command
 * uses too, are declared in include/kiln_tools.h.
 *
 *   idx.c     IDX files (the MNIST family's format), gzipped or not, and a loader for a
 *             directory holding the four MNIST / Fashion-MNIST files.
 *   loader.c  a prefetching batch loader: worker threads gather (and normalize) shuffled
 *             batches into a ring of slots in caller-visible host memory.
 *
 * Ownership: who calls _load/_create calls _free; _free(NULL) does nothing. Errors are
 * statuses with a message on the context, naming the file and what is wrong.
 */
#ifndef KILN_DATA_H
#define KILN_DATA_H

#include "../core/internal.h"

/* ---------------------------------------------------------------------- IDX */

/* Read an IDX file (http://yann.lecun.com/exdb/mnist/ format: big-endian magic 0x0000TTNN
 * with element type TT and NN dims, then NN big-endian u32 dims, then the data). The file
 * may be gzipped (zlib detects it) or plain. Element types: 0x08 u8, 0x09 i8, 0x0B i16,
 * 0x0C i32, 0x0D f32, 0x0E f64 (converted to host order). *out is a new tensor with the
 * file's dims: u8 (N,28,28) for MNIST images (magic 0x803), u8 (N) for labels (0x801).
 * A truncated, damaged or hostile file is KILN_ERR_PARSE (KILN_ERR_IO when it cannot be
 * opened or read); memory use never exceeds twice the data actually present, whatever
 * the header claims. */
kiln_status kiln_idx_load(kiln_context *ctx, const char *path, kiln_tensor **out);

/* lut[v] = (v / 255 - mean) / std, computed in f32 exactly as every normalizing path of
 * kiln computes it, so a batch normalized on the fly equals one cut from a normalized set. */
void kiln_u8_normalize_lut(float mean, float std, float lut[256]);

#endif /* KILN_DATA_H */
