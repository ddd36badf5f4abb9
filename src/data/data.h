/*
 * data.h — datasets and batch loading for training: what the library alone uses. The
 * MNIST-format data set (kiln_mnist_load) and the batch loader, which the `kiln` command
 * uses too, are declared in include/kiln_tools.h.
 *
 *   idx.c     IDX files (the MNIST family's format), gzipped or not, and a loader for a
 *             directory holding the four MNIST / Fashion-MNIST files.
 *   loader.c  a prefetching batch loader: worker threads gather (and normalize) shuffled
 *             batches into a ring of slots in caller-visible host memory, from tensors or
 *             from a source that makes each sample on demand (kiln_loader_source: the
 *             streaming image folders of images.c, decoded by the workers).
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

/* ------------------------------------------------------ streaming sources */

/* kiln_image_decode with a size request: once the header is read, need(arg, w, h, &nw, &nh,
 * region) says how many pixels the caller needs of the w x h image (at least nw x nh of the
 * whole image, scaled) and which part of it (region: x0, y0, width, height in the file's
 * pixels; the whole image unless changed); a JPEG is then decoded at the smallest libjpeg
 * DCT scale M/8 (M = 1..8) that gives that much, and only the rows and iMCU columns that
 * cover the region (a PNG always whole, at full size). *frame says where out lies: the
 * file's size, the whole image's size as decoded, and out's offset in that. need NULL: the
 * whole image at full size. A JPEG damaged below the region's last row may decode without
 * an error. The entry the streaming loader decodes through (and fuzz_image fuzzes). */
typedef void (*kiln_image_need_fn)(void *arg, int w, int h, int *need_w, int *need_h, int region[4]);
typedef struct kiln_image_frame {
    int full_w, full_h;     /* the file's image */
    int scaled_w, scaled_h; /* the whole image at the scale decoded */
    int x0, y0;             /* out's top-left pixel in that */
} kiln_image_frame;
kiln_status kiln_image_decode_scaled(kiln_context *ctx, const void *data, size_t size, const char *name, int channels,
                                     kiln_image_need_fn need, void *need_arg, kiln_image *out,
                                     kiln_image_frame *frame);

/* A loader's samples made on demand instead of read from tensors: fill writes sample
 * `index` (of n) of epoch `epoch` as f32 (numel of dims) into dst and its label into
 * *label, on a worker thread with that thread's own context ctx (an error's message there
 * names the sample). fill may run on several threads at once. free_arg (may be NULL)
 * frees arg with the loader. */
typedef struct kiln_loader_source {
    int64_t n;
    int ndim;           /* sample dims, at most 7 */
    int64_t dims[7];
    void *arg;
    kiln_status (*fill)(void *arg, kiln_context *ctx, int64_t index, int64_t epoch, float *dst, int64_t *label);
    void (*free_arg)(void *arg);
} kiln_loader_source;
/* A loader over src (as kiln_loader_create over tensors: the same order, sharding, ring
 * and options, mean and std ignored); on failure src->arg is freed too. */
kiln_status kiln_loader_create_source(kiln_context *ctx, const kiln_loader_source *src, const kiln_loader_options *opts,
                                      kiln_loader **out);

#endif /* KILN_DATA_H */
