/*
 * data.h — datasets and batch loading for training (internal; the lead exposes the public
 * parts in include/kiln.h).
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

/* The normalization PyTorch's examples use: x_f32 = (x_u8 / 255 - mean) / std. */
#define KILN_MNIST_MEAN 0.1307f
#define KILN_MNIST_STD 0.3081f
#define KILN_FASHION_MNIST_MEAN 0.2860f
#define KILN_FASHION_MNIST_STD 0.3530f

/* lut[v] = (v / 255 - mean) / std, computed in f32 exactly as every normalizing path of
 * kiln computes it, so a batch normalized on the fly equals one cut from a normalized set. */
void kiln_u8_normalize_lut(float mean, float std, float lut[256]);

/* An MNIST-format dataset: the train and test splits. */
typedef struct kiln_mnist {
    kiln_tensor *train_images; /* (60000,1,28,28) f32 normalized, or u8 as in the file */
    kiln_tensor *train_labels; /* (60000) i64, each < 10 */
    kiln_tensor *test_images;  /* (10000,1,28,28) */
    kiln_tensor *test_labels;  /* (10000) i64 */
} kiln_mnist;

/* Load DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or without .gz when only the
 * plain file exists). image_dtype KILN_F32 normalizes with mean/std (see above);
 * KILN_U8 keeps the raw pixels (a loader can normalize them per batch) and ignores
 * mean/std. Checks that images are 3-D u8, that image and label counts agree and that
 * labels are < 10. On failure *out is left zeroed. */
kiln_status kiln_mnist_load(kiln_context *ctx, const char *dir, kiln_dtype image_dtype,
                            float mean, float std, kiln_mnist *out);
/* Free the four tensors and zero the struct (a zeroed struct is fine). */
void kiln_mnist_free(kiln_mnist *d);

/* ------------------------------------------------------------------- loader */

/* Batch order. Epoch e uses the Fisher-Yates permutation drawn from a splitmix64 stream
 * seeded by (seed, e); step s of epoch e holds samples perm[s*B .. s*B+B). So (seed, e, s)
 * alone determine a batch: runs are reproducible whatever the number of workers, and a
 * run resumes exactly with kiln_loader_seek. Without shuffle, perm is the identity. */
typedef struct kiln_loader_options {
    int64_t batch_size; /* B >= 1 (default 64) */
    bool shuffle;       /* default true */
    uint64_t seed;      /* default 0 */
    bool drop_last;     /* drop the last partial batch (default false, as PyTorch) */
    int workers;        /* threads gathering batches; 0: next() gathers on the caller's thread
                           (default 2) */
    int slots;          /* K batches in the ring, >= 1; at most K-1 are prefetched while the
                           consumer holds one (0: 2*workers + 2) */
    float mean, std;    /* u8 images become (x/255 - mean)/std; f32 images are copied as
                           they are (defaults 0 and 1) */
    /* Optional caller memory for the ring (e.g. pinned host memory for CUDA copies):
     * slot_images[k] holds B * sample_numel floats and slot_labels[k] B int64s, for
     * k < slots. NULL: the loader allocates its own. The caller frees them after
     * kiln_loader_free. */
    float *const *slot_images;
    int64_t *const *slot_labels;
} kiln_loader_options;

/* The sample order of epoch `epoch` for `seed` (shuffle on): what the loader uses, for
 * callers that gather batches themselves (a dataset resident on the GPU). */
void kiln_loader_permutation(int64_t *perm, int64_t n, uint64_t seed, int64_t epoch);

/* The defaults above. */
kiln_loader_options kiln_loader_options_default(void);

/* A batch, living in ring slot `slot` from kiln_loader_next until kiln_loader_release. */
typedef struct kiln_batch {
    int64_t epoch, step;   /* its place in the stream */
    int64_t size;          /* samples: B, or fewer for the last batch of an epoch */
    int slot;              /* ring slot (lets a CUDA caller keep per-slot events/buffers) */
    float *images;         /* (size, <sample dims>) f32, in slot memory */
    int64_t *labels;       /* (size) */
    const int64_t *indices;/* (size) dataset index of each sample */
    kiln_tensor *x;        /* views of images and labels with dims (size, ...) / (size) */
    kiln_tensor *y;
} kiln_batch;

/*
 * A prefetching batch loader.
 *
 * Threads: the loader's workers only read the dataset tensors and write ring slots. The
 * dataset tensors must outlive the loader and not change while it runs. kiln_loader_next,
 * kiln_loader_seek and kiln_loader_free are called from one consumer thread at a time;
 * kiln_loader_release may be called from any thread (e.g. a CUDA host callback that runs
 * once a batch's copy to the device is done), as long as it is not racing the batch's
 * own next or the loader's free. Errors write the context's message, which is not
 * synchronized: give the loader a context no other thread uses at the same time.
 *
 * Memory: everything is allocated by kiln_loader_create; next and release allocate
 * nothing and never fail except on misuse.
 */
typedef struct kiln_loader kiln_loader;

/* images: (N, ...) f32 or u8; labels: (N) i64 or u8. The sample shape is images' dims
 * after the first. Fails when the options are out of range or no batch can be formed. */
kiln_status kiln_loader_create(kiln_context *ctx, const kiln_tensor *images,
                               const kiln_tensor *labels, const kiln_loader_options *opts,
                               kiln_loader **out);
/* Stop the workers (waiting for a batch being gathered) and free everything, including
 * the batches still held: their memory must not be used afterwards. */
void kiln_loader_free(kiln_loader *l);

/* Batches per epoch: ceil(N/B), or floor(N/B) with drop_last. */
int64_t kiln_loader_steps_per_epoch(const kiln_loader *l);
/* Where the next kiln_loader_next is (epoch and step). */
void kiln_loader_position(const kiln_loader *l, int64_t *epoch, int64_t *step);

/* The next batch of the stream (epoch 0 step 0, step 1, ..., then epoch 1 step 0, ...),
 * waiting for a worker if it is not ready. Fails (KILN_ERR_INVALID_ARGUMENT) when the
 * caller already holds every slot. */
kiln_status kiln_loader_next(kiln_loader *l, const kiln_batch **out);
/* Give a batch's slot back to the workers. */
kiln_status kiln_loader_release(kiln_loader *l, const kiln_batch *b);
/* Continue the stream at (epoch, step): for resuming a run. Batches prefetched so far are
 * dropped. The caller must hold no batch. */
kiln_status kiln_loader_seek(kiln_loader *l, int64_t epoch, int64_t step);

#endif /* KILN_DATA_H */
