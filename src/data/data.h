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
    /* Optional, for batches finished elsewhere (the GPU decoder, images.c):
     *   attach: once, with the ring's slots and the batch size, before any fill.
     *   fill_at: instead of fill, also told the slot and the position i in the batch
     *            (calls for one batch come from one thread, i = 0, 1, ... in order).
     *   finish: on the consumer's thread in kiln_loader_next, once the batch is
     *           gathered (its time counts as waiting for data); may point b->x elsewhere
     *           (a device tensor). A failure stops the stream as a fill's does.
     *   release: the batch's slot is given back (any thread).
     *   set_stream: kiln_loader_set_stream's stream.
     *   stats: adds to kiln_loader_stats' decoder fields. */
    kiln_status (*attach)(void *arg, kiln_context *ctx, int slots, int64_t batch);
    kiln_status (*fill_at)(void *arg, kiln_context *ctx, int slot, int64_t i, int64_t index, int64_t epoch, float *dst,
                           int64_t *label);
    kiln_status (*finish)(void *arg, kiln_context *ctx, kiln_batch *b);
    void (*release)(void *arg, const kiln_batch *b);
    void (*set_stream)(void *arg, void *stream);
    void (*stats)(void *arg, kiln_load_stats *out, bool reset);
} kiln_loader_source;
/* A loader over src (as kiln_loader_create over tensors: the same order, sharding, ring
 * and options, mean and std ignored); on failure src->arg is freed too. */
kiln_status kiln_loader_create_source(kiln_context *ctx, const kiln_loader_source *src, const kiln_loader_options *opts,
                                      kiln_loader **out);

/* ------------------------------------------------------- GPU JPEG decoding */

/* A JPEG's header as the GPU decoder needs it (kiln_jpeg_probe: the markers up to the
 * first frame header, nothing decoded): size, components, and whether nvJPEG's batched
 * hardware path takes it (baseline or extended sequential 8-bit Huffman, 3 components
 * with luma sampling 1x1, 2x1, 1x2 or 2x2 and chroma 1x1: 4:4:4, 4:2:2, 4:4:0, 4:2:0).
 * Anything else (progressive, arithmetic, 12-bit, grey, CMYK, 4:1:1, a file not ending
 * in EOI: cut short) is decoded on the CPU. Returns false when no frame header is found (not a JPEG, or damaged: the CPU
 * decoder then names the error). */
typedef struct kiln_jpeg_info {
    int w, h, components;
    bool gpu_ok;
} kiln_jpeg_info;
bool kiln_jpeg_probe(const unsigned char *data, size_t n, kiln_jpeg_info *out);

/* The box of a w x h image that a transform resamples to size x size, in the image's
 * pixels, and the flip: training, torchvision's RandomResizedCrop from the stream of
 * (seed, epoch, index) (scale smin..smax, ratio rmin..rmax) and a flip when flip_on;
 * evaluation (train false), the centre crop of kiln_image_resize_crop(resize, size, size)
 * (KILN_ERR_SHAPE when the crop does not fit). The CPU and the GPU decoders both take
 * their boxes from here, so for a seed both choose the same crops. */
typedef struct kiln_crop_box {
    int x0, y0, cw, ch;
    bool flip;
} kiln_crop_box;
void kiln_rrc_box(uint64_t seed, int64_t epoch, int64_t index, int w, int h, double smin, double smax, double rmin,
                  double rmax, bool flip_on, kiln_crop_box *out);
kiln_status kiln_center_box(kiln_context *ctx, int w, int h, int resize, int size, kiln_crop_box *out);

/* The GPU half of a streamed image folder (src/cuda/nvjpeg.c; without CUDA,
 * src/data/jpeg_gpu_stub.c refuses): nvJPEG (loaded at run time) decodes a batch's
 * files into device memory and one kernel resamples each image's box to size x size
 * (the triangle filter of the CPU path), flips and normalizes it into the batch, f32
 * (B, 3, size, size) on the device. Images a worker decoded on the CPU (those nvJPEG's
 * batched path does not take) are copied from the host slot into their places.
 *
 * kiln_nvjpeg_load: loads the library once (KILN_NVJPEG_LIB: the file or its folder,
 * then the loader's path, then a pip package's nvidia/cu13/lib); false with the reason
 * in why. Thread-safe. */
bool kiln_nvjpeg_load(char *why, size_t n);

typedef struct kiln_jpeg_job {
    size_t offset, size; /* the file in the slot's bytes; size 0: decoded on the host */
    int w, h;            /* the image */
    kiln_crop_box box;
} kiln_jpeg_job;
typedef struct kiln_jpeg_gpu kiln_jpeg_gpu;
typedef struct kiln_jpeg_gpu_stats {
    int64_t gpu_images, cpu_images, batches;
    double decode_s;      /* the batches' decoding: host checks, then GPU time from the start of
                           * each batch's decode to its end (not the wait for a free buffer) */
    char backend[32];     /* "hardware", "GPU hybrid", ... */
} kiln_jpeg_gpu_stats;
/* For batches of at most `batch` images of `size` x size, mean and std per channel. */
kiln_status kiln_jpeg_gpu_create(kiln_context *ctx, int device_index, int64_t batch, int size, const float mean[3],
                                 const float std[3], kiln_jpeg_gpu **out);
void kiln_jpeg_gpu_free(kiln_jpeg_gpu *g);
/* Decode and transform one batch: jobs (n) with their files in bytes (pinned host
 * memory); host (n, 3, size, size) f32 holds the jobs of size 0 already transformed.
 * Waits until the batch is in device memory; *out (device) stays valid until
 * kiln_jpeg_gpu_done(g, *out) (at most 3 batches out at once). A file nvJPEG rejects
 * makes the whole batch decode on the host through cpu_fallback(arg, i, dst) for each
 * job i (the CPU path's error then names the file). */
kiln_status kiln_jpeg_gpu_run(kiln_jpeg_gpu *g, kiln_context *ctx, const unsigned char *bytes, const kiln_jpeg_job *jobs,
                              int64_t n, float *host,
                              kiln_status (*cpu_fallback)(void *arg, kiln_context *ctx, int64_t i, float *dst),
                              void *arg, float **out);
/* The batch at out is no longer needed once the work enqueued so far on the consumer's
 * stream (kiln_jpeg_gpu_set_stream; none: the consumer has finished with it) is done. */
void kiln_jpeg_gpu_done(kiln_jpeg_gpu *g, const float *out);
void kiln_jpeg_gpu_set_stream(kiln_jpeg_gpu *g, void *stream);
void kiln_jpeg_gpu_stats_get(kiln_jpeg_gpu *g, kiln_jpeg_gpu_stats *out, bool reset);

#endif /* KILN_DATA_H */
