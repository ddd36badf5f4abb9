/* images.c — JPEG and PNG decoding (libjpeg-turbo, libpng), resizing, and image-folder
 * data sets (one sub-folder per class, as torchvision's ImageFolder) decoded on worker
 * threads into one u8 tensor (kiln_tools.h, "image folders").
 *
 * Every decoder error comes back as a status with a message naming the file: libjpeg's
 * and libpng's fatal errors longjmp back here instead of exiting, and their warnings are
 * kept quiet. Sizes are bounded before anything is allocated (KILN_IMAGE_MAX_SIDE), so a
 * hostile header cannot ask for gigabytes. */
#include "data.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

void kiln_image_free(kiln_image *im) {
    if (!im) return;
    free(im->pixels);
    memset(im, 0, sizeof *im);
}

static kiln_status check_size(kiln_context *ctx, const char *name, int64_t w, int64_t h) {
    if (w < 1 || h < 1 || w > KILN_IMAGE_MAX_SIDE || h > KILN_IMAGE_MAX_SIDE || w * h > KILN_IMAGE_MAX_PIXELS)
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: an image of %lldx%lld pixels (kiln takes 1 to %d a side, %d in all)",
                         name, (long long)w, (long long)h, KILN_IMAGE_MAX_SIDE, KILN_IMAGE_MAX_PIXELS);
    return KILN_OK;
}

/* ------------------------------------------------------------------- JPEG */

typedef struct jpeg_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_fatal(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}

/* Warnings (level -1) are damage libjpeg works around. A file that ends early (its missing
 * rows come out grey) is reported as an error once decoding ends; the others ("extraneous
 * bytes before marker", which real data sets hold and PIL accepts too) are let through. */
static void jpeg_note(j_common_ptr c, int level) {
    jpeg_err *e = (jpeg_err *)c->err;
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF && !c->err->num_warnings) {
        c->err->format_message(c, e->msg);
        c->err->num_warnings++;
    }
}

static kiln_status decode_jpeg(kiln_context *ctx, const unsigned char *data, size_t n, const char *name, int channels,
                               kiln_image_need_fn need, void *need_arg, kiln_image *out, kiln_image_frame *frame) {
    struct jpeg_decompress_struct d;
    jpeg_err err;
    memset(&d, 0, sizeof d);
    d.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_fatal;
    err.mgr.emit_message = jpeg_note;
    err.msg[0] = 0;
    /* volatile: set after setjmp, read after a longjmp */
    unsigned char *volatile pixels = NULL;
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&d);
        free(pixels);
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s: not a valid JPEG (%s)", name, err.msg);
    }
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, data, (unsigned long)n);
    jpeg_read_header(&d, TRUE);
    if (d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK) {
        jpeg_destroy_decompress(&d);
        return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: a CMYK JPEG (convert it to RGB)", name);
    }
    kiln_status st = check_size(ctx, name, d.image_width, d.image_height);
    if (st) {
        jpeg_destroy_decompress(&d);
        return st;
    }
    const int c = channels ? channels : d.num_components == 1 ? 1 : 3;
    d.out_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    const int W = (int)d.image_width, H = (int)d.image_height;
    frame->full_w = W;
    frame->full_h = H;
    int region[4] = {0, 0, W, H};
    if (need) {
        /* DCT scaling: the smallest M/8 whose output still has need_w x need_h, M = 1, 2 or 4
         * (libjpeg-turbo's SIMD scaled IDCTs; the others are plain C, slower than a full
         * decode) */
        int nw = 0, nh = 0;
        need(need_arg, W, H, &nw, &nh, region);
        for (unsigned m = 1; m < 8; m *= 2) {
            const int64_t sw = ((int64_t)d.image_width * m + 7) / 8, sh = ((int64_t)d.image_height * m + 7) / 8;
            if (sw >= nw && sh >= nh) {
                d.scale_num = m;
                d.scale_denom = 8;
                break;
            }
        }
    }
    jpeg_start_decompress(&d);
    const int ow = (int)d.output_width, oh = (int)d.output_height;
    frame->scaled_w = ow;
    frame->scaled_h = oh;
    /* the region (clamped to the image) in output pixels, one pixel of margin: its rows,
     * and its columns widened by libjpeg to whole iMCUs */
    int rx0 = 0, ry0 = 0, ry1 = oh;
    if (region[0] < 0) region[0] = 0;
    if (region[1] < 0) region[1] = 0;
    if (region[0] >= W) region[0] = W - 1;
    if (region[1] >= H) region[1] = H - 1;
    if (region[2] < 1 || region[0] + region[2] > W) region[2] = W - region[0];
    if (region[3] < 1 || region[1] + region[3] > H) region[3] = H - region[1];
    if (region[0] > 0 || region[1] > 0 || region[2] < W || region[3] < H) {
        const double fx = (double)ow / W, fy = (double)oh / H;
        int x0 = (int)floor(region[0] * fx) - 1, x1 = (int)ceil((region[0] + region[2]) * fx) + 1;
        ry0 = (int)floor(region[1] * fy) - 1, ry1 = (int)ceil((region[1] + region[3]) * fy) + 1;
        if (x0 < 0) x0 = 0;
        if (ry0 < 0) ry0 = 0;
        if (x1 > ow) x1 = ow;
        if (ry1 > oh) ry1 = oh;
        if (x0 > 0 || x1 < ow) {
            JDIMENSION xoff = (JDIMENSION)x0, width = (JDIMENSION)(x1 - x0);
            jpeg_crop_scanline(&d, &xoff, &width);
            rx0 = (int)xoff;
        }
        if (ry0 > 0 && jpeg_skip_scanlines(&d, (JDIMENSION)ry0) != (JDIMENSION)ry0)
            ry0 = (int)d.output_scanline; /* the file ended: reported below */
    }
    frame->x0 = rx0;
    frame->y0 = ry0;
    const size_t stride = (size_t)d.output_width * (size_t)c;
    pixels = malloc(stride * (size_t)(ry1 - ry0 > 0 ? ry1 - ry0 : 1));
    if (!pixels) {
        jpeg_destroy_decompress(&d);
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for %ux%d pixels", name, d.output_width,
                         ry1 - ry0);
    }
    while ((int)d.output_scanline < ry1) {
        JSAMPROW row = pixels + (size_t)((int)d.output_scanline - ry0) * stride;
        if (jpeg_read_scanlines(&d, &row, 1) != 1) break;
    }
    if ((int)d.output_scanline < ry1 && !err.mgr.num_warnings) {
        jpeg_destroy_decompress(&d);
        free(pixels);
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s: the JPEG decoder stopped at row %u of %d", name, d.output_scanline,
                         ry1);
    }
    if (ry1 < oh) jpeg_abort_decompress(&d);
    else jpeg_finish_decompress(&d);
    if (err.mgr.num_warnings) {
        jpeg_destroy_decompress(&d);
        free(pixels);
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s: a truncated JPEG (%s)", name, err.msg);
    }
    out->w = (int)d.output_width;
    out->h = ry1 - ry0;
    out->c = c;
    out->pixels = pixels;
    jpeg_destroy_decompress(&d);
    return KILN_OK;
}

/* The markers up to the first SOFn (data.h, kiln_jpeg_probe). */
bool kiln_jpeg_probe(const unsigned char *b, size_t n, kiln_jpeg_info *out) {
    memset(out, 0, sizeof *out);
    if (n < 4 || b[0] != 0xFF || b[1] != 0xD8) return false;
    size_t at = 2;
    int adobe = -1;
    while (at + 4 <= n) {
        if (b[at] != 0xFF) return false;
        unsigned m = b[at + 1];
        if (m == 0xFF) { /* fill byte */
            at++;
            continue;
        }
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) { /* no length */
            at += 2;
            continue;
        }
        if (m == 0xD9 || m == 0xDA) return false; /* end or scan before any frame header */
        const size_t len = ((size_t)b[at + 2] << 8) | b[at + 3];
        if (len < 2 || at + 2 + len > n) return false;
        const bool sof = m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
        if (sof) {
            const unsigned char *f = b + at + 4;
            if (len < 8) return false;
            const int prec = f[0], h = (f[1] << 8) | f[2], w = (f[3] << 8) | f[4], nc = f[5];
            if (len < 8 + 3 * (size_t)nc || w < 1 || h < 1) return false;
            out->w = w, out->h = h, out->components = nc;
            /* SOF0 baseline, SOF1 extended sequential (Huffman); 8-bit; YCbCr 3 components */
            bool ok = (m == 0xC0 || m == 0xC1) && prec == 8 && nc == 3;
            if (ok) {
                const int hy = f[6 + 1] >> 4, vy = f[6 + 1] & 15;
                for (int c = 1; c < 3; c++)
                    if (f[6 + 3 * c + 1] != 0x11) ok = false;
                if (!((hy == 1 || hy == 2) && (vy == 1 || vy == 2))) ok = false;
            }
            /* a file cut short (no EOI at its end) goes to the CPU path, which names it */
            const bool eoi = b[n - 2] == 0xFF && b[n - 1] == 0xD9;
            out->gpu_ok = ok && eoi && adobe != 0 && adobe != 2 && w <= KILN_IMAGE_MAX_SIDE && h <= KILN_IMAGE_MAX_SIDE &&
                          (int64_t)w * h <= KILN_IMAGE_MAX_PIXELS;
            return true;
        }
        if (m == 0xEE && len >= 14 && !memcmp(b + at + 4, "Adobe", 5))
            adobe = b[at + 4 + 11]; /* 0: RGB or CMYK, 1: YCbCr, 2: YCCK */
        at += 2 + len;
    }
    return false;
}

/* -------------------------------------------------------------------- PNG */

typedef struct png_src {
    const unsigned char *data;
    size_t n, at;
    char msg[256];
} png_src;

static void png_read_mem(png_structp p, png_bytep dst, size_t len) {
    png_src *s = png_get_io_ptr(p);
    if (len > s->n - s->at) png_error(p, "the file ends early");
    memcpy(dst, s->data + s->at, len);
    s->at += len;
}

static void png_fatal(png_structp p, png_const_charp m) {
    png_src *s = png_get_error_ptr(p);
    snprintf(s->msg, sizeof s->msg, "%s", m);
    png_longjmp(p, 1);
}

static void png_quiet(png_structp p, png_const_charp m) { (void)p, (void)m; }

static kiln_status decode_png(kiln_context *ctx, const unsigned char *data, size_t n, const char *name, int channels,
                              kiln_image *out) {
    png_src src = {.data = data, .n = n};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fatal, png_quiet);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!p || !info) {
        png_destroy_read_struct(&p, &info, NULL);
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory for the PNG decoder", name);
    }
    unsigned char *volatile pixels = NULL;
    png_bytep *volatile rows = NULL;
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_read_struct(&p, &info, NULL);
        free(pixels);
        free(rows);
        return kiln_fail(ctx, KILN_ERR_PARSE, "%s: not a valid PNG (%s)", name, src.msg[0] ? src.msg : "libpng error");
    }
    png_set_user_limits(p, KILN_IMAGE_MAX_SIDE, KILN_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(p, (png_alloc_size_t)64 << 20);
    png_set_read_fn(p, &src, png_read_mem);
    png_read_info(p, info);
    const png_uint_32 w = png_get_image_width(p, info), h = png_get_image_height(p, info);
    kiln_status st = check_size(ctx, name, w, h);
    if (st) {
        png_destroy_read_struct(&p, &info, NULL);
        return st;
    }
    const int color = png_get_color_type(p, info);
    const int gray = !(color & PNG_COLOR_MASK_COLOR);
    const int c = channels ? channels : gray ? 1 : 3;
    /* 8-bit samples, palettes and low-bit grey expanded, alpha (and tRNS) dropped */
    png_set_expand(p);
    png_set_strip_16(p);
    png_set_strip_alpha(p);
    if (c == 3 && gray) png_set_gray_to_rgb(p);
    if (c == 1 && !gray) png_set_rgb_to_gray_fixed(p, 1, -1, -1);
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    const size_t stride = png_get_rowbytes(p, info);
    if (stride != (size_t)w * (size_t)c) png_error(p, "unexpected row size after conversion");
    pixels = malloc(stride * h);
    rows = malloc(sizeof(png_bytep) * h);
    if (!pixels || !rows) png_error(p, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) rows[y] = pixels + (size_t)y * stride;
    png_read_image(p, rows);
    png_read_end(p, NULL);
    png_destroy_read_struct(&p, &info, NULL);
    free(rows);
    out->w = (int)w;
    out->h = (int)h;
    out->c = c;
    out->pixels = pixels;
    return KILN_OK;
}

kiln_status kiln_image_decode(kiln_context *ctx, const void *data, size_t n, const char *name, int channels,
                              kiln_image *out) {
    kiln_image_frame frame;
    return kiln_image_decode_scaled(ctx, data, n, name, channels, NULL, NULL, out, &frame);
}

kiln_status kiln_image_decode_scaled(kiln_context *ctx, const void *data, size_t n, const char *name, int channels,
                                     kiln_image_need_fn need, void *need_arg, kiln_image *out,
                                     kiln_image_frame *frame) {
    if (!out || (!data && n) || !frame) return KILN_ERR_INVALID_ARGUMENT;
    memset(frame, 0, sizeof *frame);
    memset(out, 0, sizeof *out);
    if (!name) name = "(image)";
    if (channels != 0 && channels != 1 && channels != 3)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s: channels must be 0 (as stored), 1 or 3, got %d", name,
                         channels);
    const unsigned char *b = data;
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
        return decode_jpeg(ctx, b, n, name, channels, need, need_arg, out, frame);
    if (n >= 8 && !png_sig_cmp(b, 0, 8)) {
        kiln_status st = decode_png(ctx, b, n, name, channels, out);
        if (!st) frame->full_w = frame->scaled_w = out->w, frame->full_h = frame->scaled_h = out->h;
        return st;
    }
    return kiln_fail(ctx, KILN_ERR_PARSE, "%s: neither a JPEG nor a PNG file (%zu bytes)", name, n);
}

/* ------------------------------------------------------------------ resize */

/* Separable resampling with a triangle filter whose support grows with the scale when
 * shrinking (antialiased, as PIL's and torchvision's bilinear resize): out (ow x oh) from
 * the in rectangle at (x0, y0) of size (cw x ch). */
/* The taps of output o of a resampling by `scale` (input / output size) over n inputs: the
 * first input *lo and the normalized weights w[0 .. count) (the triangle filter, stretched
 * by the scale when shrinking). Returns count. */
static int filter_taps(double scale, int n, int o, int *lo, float *w) {
    const double r = scale > 1 ? scale : 1, center = (o + 0.5) * scale;
    int a = (int)(center - r + 0.5), b = (int)(center + r + 0.5);
    if (a < 0) a = 0;
    if (b > n) b = n;
    double sum = 0;
    for (int i = a; i < b; i++) {
        const double t = 1 - fabs((i + 0.5 - center) / r);
        w[i - a] = t > 0 ? (float)t : 0.f;
        sum += w[i - a];
    }
    for (int i = a; i < b; i++) w[i - a] = sum > 0 ? (float)(w[i - a] / sum) : 0.f;
    *lo = a;
    return b > a ? b - a : 0;
}

/* Separable resampling with a triangle filter whose support grows with the scale when
 * shrinking (antialiased, as PIL's and torchvision's bilinear resize): out (ow x oh) from
 * the in rectangle at (x0, y0) of size (cw x ch). Each output's taps are computed once;
 * both passes walk memory in row order (each output still sums its taps in tap order). */
static kiln_status resample(kiln_context *ctx, const kiln_image *in, int x0, int y0, int cw, int ch, int ow, int oh,
                            uint8_t *out) {
    const int c = in->c;
    const double sx = (double)cw / ow, sy = (double)ch / oh;
    const int mt = (int)(2 * (sx > sy ? sx : sy) + 4); /* taps an output can have */
    const size_t rowf = (size_t)ow * (size_t)c;
    float *tmp = malloc(sizeof(float) * rowf * (size_t)ch);
    float *wx = malloc(sizeof(float) * (size_t)mt * (size_t)ow), *wy = malloc(sizeof(float) * (size_t)mt * (size_t)oh);
    float *acc = malloc(sizeof(float) * rowf);
    int *lx = malloc(sizeof(int) * 2 * (size_t)ow), *ly = malloc(sizeof(int) * 2 * (size_t)oh);
    if (!tmp || !wx || !wy || !acc || !lx || !ly) {
        free(tmp), free(wx), free(wy), free(acc), free(lx), free(ly);
        return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory resizing an image");
    }
    for (int o = 0; o < ow; o++) lx[2 * o + 1] = filter_taps(sx, cw, o, &lx[2 * o], wx + (size_t)o * mt);
    for (int o = 0; o < oh; o++) ly[2 * o + 1] = filter_taps(sy, ch, o, &ly[2 * o], wy + (size_t)o * mt);
    /* horizontal: rows y0 .. y0+ch, cw -> ow */
    for (int y = 0; y < ch; y++) {
        const uint8_t *row = in->pixels + ((size_t)(y0 + y) * in->w + (size_t)x0) * c;
        float *t = tmp + (size_t)y * rowf;
        for (int ox = 0; ox < ow; ox++) {
            const float *w = wx + (size_t)ox * mt;
            const uint8_t *r = row + (size_t)lx[2 * ox] * c;
            const int n = lx[2 * ox + 1];
            if (c == 3) {
                float a0 = 0, a1 = 0, a2 = 0;
                for (int i = 0; i < n; i++) {
                    a0 += w[i] * r[3 * i];
                    a1 += w[i] * r[3 * i + 1];
                    a2 += w[i] * r[3 * i + 2];
                }
                t[3 * ox] = a0, t[3 * ox + 1] = a1, t[3 * ox + 2] = a2;
            } else {
                for (int k = 0; k < c; k++) {
                    float a = 0;
                    for (int i = 0; i < n; i++) a += w[i] * r[(size_t)i * c + k];
                    t[(size_t)ox * c + k] = a;
                }
            }
        }
    }
    /* vertical: ch -> oh, a row of outputs at a time */
    for (int oy = 0; oy < oh; oy++) {
        const float *w = wy + (size_t)oy * mt;
        const int lo = ly[2 * oy], n = ly[2 * oy + 1];
        for (size_t j = 0; j < rowf; j++) acc[j] = 0;
        for (int i = 0; i < n; i++) {
            const float *t = tmp + (size_t)(lo + i) * rowf, wi = w[i];
            for (size_t j = 0; j < rowf; j++) acc[j] += wi * t[j];
        }
        uint8_t *o = out + (size_t)oy * rowf;
        for (size_t j = 0; j < rowf; j++) {
            const float v = acc[j] < 0 ? 0 : acc[j] > 255 ? 255 : acc[j];
            o[j] = (uint8_t)(v + 0.5f);
        }
    }
    free(tmp), free(wx), free(wy), free(acc), free(lx), free(ly);
    return KILN_OK;
}

/* kiln_image_resize_crop's box: the shorter side of w x h to `resize` (0: as it is),
 * then the centre crop_h x crop_w (0: all), as the region (x0, y0, cw, ch) of the input
 * that maps onto the ow x oh output. */
static kiln_status center_region(kiln_context *ctx, int w, int h, int resize, int crop_h, int crop_w, int *pow, int *poh,
                                 kiln_crop_box *b) {
    int rw = w, rh = h;
    if (resize) {
        if (w <= h) {
            rw = resize;
            rh = (int)((int64_t)h * resize / w);
        } else {
            rh = resize;
            rw = (int)((int64_t)w * resize / h);
        }
        if (rw < 1) rw = 1;
        if (rh < 1) rh = 1;
    }
    const int ow = crop_w ? crop_w : rw, oh = crop_h ? crop_h : rh;
    if (ow > rw || oh > rh)
        return kiln_fail(ctx, KILN_ERR_SHAPE, "a %dx%d crop of a %dx%d image (resize it larger first)", ow, oh, rw, rh);
    /* the crop in input pixels: the region that maps onto the output */
    const double fx = (double)w / rw, fy = (double)h / rh;
    const int cx = (rw - ow) / 2, cy = (rh - oh) / 2;
    int x0 = (int)(cx * fx + 0.5), y0 = (int)(cy * fy + 0.5);
    int cw = (int)(ow * fx + 0.5), ch = (int)(oh * fy + 0.5);
    if (cw < 1) cw = 1;
    if (ch < 1) ch = 1;
    if (x0 + cw > w) x0 = w - cw;
    if (y0 + ch > h) y0 = h - ch;
    *pow = ow, *poh = oh;
    *b = (kiln_crop_box){.x0 = x0, .y0 = y0, .cw = cw, .ch = ch};
    return KILN_OK;
}

kiln_status kiln_center_box(kiln_context *ctx, int w, int h, int resize, int size, kiln_crop_box *out) {
    if (!out || w < 1 || h < 1 || size < 1 || resize < 0) return KILN_ERR_INVALID_ARGUMENT;
    int ow = 0, oh = 0;
    return center_region(ctx, w, h, resize, size, size, &ow, &oh, out);
}

kiln_status kiln_image_resize_crop(kiln_context *ctx, const kiln_image *in, int resize, int crop_h, int crop_w,
                                   kiln_image *out) {
    if (!in || !out || !in->pixels || resize < 0 || crop_h < 0 || crop_w < 0) return KILN_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    int ow = 0, oh = 0;
    kiln_crop_box b = {0};
    kiln_status cst = center_region(ctx, in->w, in->h, resize, crop_h, crop_w, &ow, &oh, &b);
    if (cst) return cst;
    const int x0 = b.x0, y0 = b.y0, cw = b.cw, ch = b.ch;
    out->pixels = malloc((size_t)ow * (size_t)oh * (size_t)in->c);
    if (!out->pixels) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory resizing an image");
    out->w = ow;
    out->h = oh;
    out->c = in->c;
    if (cw == ow && ch == oh) { /* a plain crop */
        for (int y = 0; y < oh; y++)
            memcpy(out->pixels + (size_t)y * ow * in->c, in->pixels + ((size_t)(y0 + y) * in->w + x0) * in->c,
                   (size_t)ow * in->c);
        return KILN_OK;
    }
    kiln_status st = resample(ctx, in, x0, y0, cw, ch, ow, oh, out->pixels);
    if (st) kiln_image_free(out);
    return st;
}

/* ---------------------------------------------------------- image folders */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool is_image_name(const char *n) {
    const char *dot = strrchr(n, '.');
    if (!dot || n[0] == '.') return false;
    char ext[8];
    size_t k = 0;
    for (const char *p = dot + 1; *p && k < sizeof ext - 1; p++) ext[k++] = (char)tolower((unsigned char)*p);
    ext[k] = 0;
    return !strcmp(ext, "jpg") || !strcmp(ext, "jpeg") || !strcmp(ext, "png");
}

/* The sorted names in dir that pass keep (dirs: sub-directories; else image files). */
static kiln_status list_dir(kiln_context *ctx, const char *dir, bool dirs, char ***names, int64_t *count) {
    *names = NULL;
    *count = 0;
    DIR *d = opendir(dir);
    if (!d) return kiln_fail(ctx, KILN_ERR_IO, "%s: %s", dir, strerror(errno));
    char **v = NULL;
    int64_t n = 0, cap = 0;
    kiln_status st = KILN_OK;
    struct dirent *e;
    while (!st && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
        struct stat sb;
        if (stat(path, &sb) != 0) continue;
        if (dirs ? !S_ISDIR(sb.st_mode) : !(S_ISREG(sb.st_mode) && is_image_name(e->d_name))) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **g = realloc(v, sizeof *v * (size_t)cap);
            if (!g) {
                st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory listing %s", dir);
                break;
            }
            v = g;
        }
        if (!(v[n] = kiln_strdup(ctx, e->d_name))) st = KILN_ERR_OUT_OF_MEMORY;
        else n++;
    }
    closedir(d);
    if (st) {
        for (int64_t i = 0; i < n; i++) free(v[i]);
        free(v);
        return st;
    }
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *names = v;
    *count = n;
    return KILN_OK;
}

static kiln_status read_file(kiln_context *ctx, const char *path, unsigned char **data, size_t *n) {
    *data = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_fail(ctx, KILN_ERR_IO, "%s: %s", path, strerror(errno));
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            if (cap > ((size_t)256 << 20)) {
                free(buf);
                fclose(f);
                return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "%s: larger than 256 MiB, not an image kiln reads", path);
            }
            unsigned char *g = realloc(buf, cap);
            if (!g) {
                free(buf);
                fclose(f);
                return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory reading it", path);
            }
            buf = g;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    const bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return kiln_fail(ctx, KILN_ERR_IO, "%s: read error", path);
    }
    *data = buf;
    *n = len;
    return KILN_OK;
}

typedef struct folder_job {
    kiln_context *ctx; /* this worker's own (messages are per thread anyway) */
    const kiln_image_folder_options *o;
    char **paths;
    int64_t n;
    int channels, h, w;
    uint8_t *out; /* (n, channels, h, w) */
    int64_t next; /* atomic: the next file to decode */
    int failed;   /* atomic: set by the first failure */
    kiln_status st;
    char msg[KILN_MSG_SIZE];
    pthread_mutex_t mu;
} folder_job;

/* Decode file i into its (C, H, W) slot. */
static kiln_status decode_one(folder_job *j, kiln_context *ctx, int64_t i) {
    unsigned char *data = NULL;
    size_t n = 0;
    kiln_status st = read_file(ctx, j->paths[i], &data, &n);
    kiln_image im = {0}, sized = {0};
    if (!st) st = kiln_image_decode(ctx, data, n, j->paths[i], j->channels, &im);
    free(data);
    const kiln_image *use = &im;
    if (!st && (j->o->resize || im.w != j->w || im.h != j->h)) {
        if (!j->o->resize && !j->o->crop)
            st = kiln_fail(ctx, KILN_ERR_SHAPE,
                           "%s is %dx%d; the data set's images are %dx%d (give a resize and crop to take "
                           "images of several sizes)",
                           j->paths[i], im.w, im.h, j->w, j->h);
        else {
            st = kiln_image_resize_crop(ctx, &im, j->o->resize, j->h, j->w, &sized);
            if (st) kiln_msg_prefix(ctx, "%s: ", j->paths[i]);
            use = &sized;
        }
    }
    if (!st) {
        uint8_t *dst = j->out + (size_t)i * (size_t)j->channels * (size_t)j->h * (size_t)j->w;
        const size_t plane = (size_t)j->h * (size_t)j->w;
        for (size_t p = 0; p < plane; p++)
            for (int k = 0; k < j->channels; k++) dst[(size_t)k * plane + p] = use->pixels[p * (size_t)j->channels + (size_t)k];
    }
    kiln_image_free(&im);
    kiln_image_free(&sized);
    return st;
}

static void *folder_worker(void *arg) {
    folder_job *j = arg;
    kiln_context own = {0};
    for (;;) {
        if (__atomic_load_n(&j->failed, __ATOMIC_ACQUIRE)) break;
        const int64_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->n) break;
        kiln_status st = decode_one(j, &own, i);
        if (st) {
            pthread_mutex_lock(&j->mu);
            if (!j->st) {
                j->st = st;
                snprintf(j->msg, sizeof j->msg, "%s", kiln_context_message(&own));
            }
            pthread_mutex_unlock(&j->mu);
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELEASE);
            break;
        }
    }
    kiln_clear_error(&own);
    return NULL;
}

void kiln_image_list_free(kiln_image_list *list) {
    if (!list) return;
    for (int64_t i = 0; i < list->n; i++) free(list->paths[i]);
    free(list->paths);
    free(list->labels);
    for (int i = 0; i < list->n_classes; i++) free(list->class_names[i]);
    free(list->class_names);
    memset(list, 0, sizeof *list);
}

kiln_status kiln_image_list_load(kiln_context *ctx, const char *dir, kiln_image_list *out) {
    if (!ctx || !dir || !out) return KILN_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    char **classes = NULL;
    int64_t n_classes = 0;
    kiln_status st = list_dir(ctx, dir, true, &classes, &n_classes);
    if (st) return st;
    if (n_classes == 0) {
        free(classes);
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s has no class folders (one sub-folder of images per class)",
                         dir);
    }
    if (n_classes > 1000000) n_classes = 1000000;
    /* every file: paths and labels in class, then name order */
    char **paths = NULL;
    int64_t *labels = NULL, n = 0, cap = 0;
    for (int64_t c = 0; c < n_classes && !st; c++) {
        char sub[4096];
        snprintf(sub, sizeof sub, "%s/%s", dir, classes[c]);
        char **files = NULL;
        int64_t nf = 0;
        st = list_dir(ctx, sub, false, &files, &nf);
        if (!st && nf == 0)
            st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "class folder %s has no images (.jpg, .jpeg or .png)", sub);
        for (int64_t k = 0; k < nf && !st; k++) {
            if (n == cap) {
                cap = cap ? 2 * cap : 1024;
                char **gp = realloc(paths, sizeof *paths * (size_t)cap);
                if (gp) paths = gp;
                int64_t *gl = gp ? realloc(labels, sizeof *labels * (size_t)cap) : NULL;
                if (gl) labels = gl;
                if (!gp || !gl) {
                    st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory listing %s", dir);
                    break;
                }
            }
            const size_t len = strlen(sub) + strlen(files[k]) + 2;
            paths[n] = malloc(len);
            if (!paths[n]) {
                st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "out of memory listing %s", dir);
                break;
            }
            snprintf(paths[n], len, "%s/%s", sub, files[k]);
            labels[n++] = c;
        }
        for (int64_t k = 0; k < nf; k++) free(files[k]);
        free(files);
    }
    if (st) {
        for (int64_t i = 0; i < n; i++) free(paths[i]);
        free(paths);
        free(labels);
        for (int64_t c = 0; c < n_classes; c++) free(classes[c]);
        free(classes);
        return st;
    }
    out->paths = paths;
    out->labels = labels;
    out->n = n;
    out->class_names = classes;
    out->n_classes = (int)n_classes;
    return KILN_OK;
}

void kiln_image_folder_free(kiln_image_folder *f) {
    if (!f) return;
    kiln_tensor_free(f->images);
    kiln_tensor_free(f->labels);
    for (int i = 0; i < f->n_classes; i++) free(f->class_names[i]);
    free(f->class_names);
    memset(f, 0, sizeof *f);
}

kiln_status kiln_image_folder_load(kiln_context *ctx, const char *dir, const kiln_image_folder_options *opts,
                                   kiln_image_folder *out) {
    if (!ctx || !dir || !out) return KILN_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    kiln_image_folder_options o = {0};
    if (opts) o = *opts;
    if (o.channels != 0 && o.channels != 1 && o.channels != 3)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "channels must be 0 (as the first image), 1 or 3, got %d",
                         o.channels);
    if (o.resize < 0 || o.crop < 0 || o.threads < 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "resize, crop and threads must be >= 0");
    kiln_image_list list = {0};
    kiln_status st = kiln_image_list_load(ctx, dir, &list);
    if (st) return st;
    char **paths = list.paths;
    const int64_t n = list.n;
    /* the first image sets channels and size (unless given) */
    folder_job j = {.ctx = ctx, .o = &o, .paths = paths, .n = n};
    {
        unsigned char *data = NULL;
        size_t len = 0;
        kiln_image im = {0};
        st = read_file(ctx, paths[0], &data, &len);
        if (!st) st = kiln_image_decode(ctx, data, len, paths[0], o.channels, &im);
        free(data);
        if (!st) {
            j.channels = im.c;
            if (o.crop) j.h = j.w = o.crop;
            else if (o.resize) {
                kiln_image sized = {0};
                st = kiln_image_resize_crop(ctx, &im, o.resize, 0, 0, &sized);
                j.h = sized.h, j.w = sized.w;
                kiln_image_free(&sized);
                if (!st)
                    st = kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT,
                                   "%s: resize %d without a crop gives images of several sizes; give a crop too", dir,
                                   o.resize);
            } else
                j.h = im.h, j.w = im.w;
        }
        kiln_image_free(&im);
    }
    kiln_tensor *images = NULL, *lab = NULL;
    if (!st) {
        images = kiln_tensor_new(ctx, KILN_U8, 4, (int64_t[]){n, j.channels, j.h, j.w});
        lab = kiln_tensor_new(ctx, KILN_I64, 1, (int64_t[]){n});
        if (!images || !lab) st = KILN_ERR_OUT_OF_MEMORY;
        else memcpy(lab->data, list.labels, sizeof *list.labels * (size_t)n);
    }
    if (!st) {
        j.out = images->data;
        pthread_mutex_init(&j.mu, NULL);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        int t = o.threads ? o.threads : cores > 8 ? 8 : cores < 1 ? 1 : (int)cores;
        if (t > n) t = (int)n;
        pthread_t th[64];
        if (t > 64) t = 64;
        int started = 0;
        for (int i = 1; i < t; i++)
            if (pthread_create(&th[started], NULL, folder_worker, &j) == 0) started++;
        folder_worker(&j);
        for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
        pthread_mutex_destroy(&j.mu);
        if (j.st) st = kiln_fail(ctx, j.st, "%s", j.msg);
    }
    if (st) {
        kiln_image_list_free(&list);
        kiln_tensor_free(images);
        kiln_tensor_free(lab);
        return st;
    }
    out->images = images;
    out->labels = lab;
    out->class_names = list.class_names;
    out->n_classes = list.n_classes;
    list.class_names = NULL;
    list.n_classes = 0;
    kiln_image_list_free(&list);
    return KILN_OK;
}

/* ------------------------------------------------------------ transforms */

/* splitmix64: the per-image stream of kiln_images_augment, seeded by (seed, epoch, index). */
static uint64_t aug_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double aug_uniform(uint64_t *s, double a, double b) {
    return a + (b - a) * ((double)(aug_next(s) >> 11) / 9007199254740992.0);
}
/* an integer in [0, n) */
static int aug_below(uint64_t *s, int n) { return (int)(aug_next(s) % (uint64_t)n); }

static kiln_status check_transform(kiln_context *ctx, const kiln_tensor *images, const kiln_augment_options *o,
                                   const kiln_tensor *out, const char *who) {
    if (!images || !o || !out) return KILN_ERR_INVALID_ARGUMENT;
    if (images->dtype != KILN_U8 || images->ndim != 4 || (images->dims[1] != 1 && images->dims[1] != 3))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s: images must be u8 (N, 1 or 3, H, W)", who);
    if (o->size < 1) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s: size must be >= 1, got %d", who, o->size);
    if (out->dtype != KILN_F32 || out->ndim != 4 || out->dims[0] != images->dims[0] ||
        (out->dims[1] != 1 && out->dims[1] != 3) || out->dims[2] != o->size || out->dims[3] != o->size)
        return kiln_fail(ctx, KILN_ERR_SHAPE, "%s: out must be f32 (%lld, 1 or 3, %d, %d)", who,
                         (long long)images->dims[0], o->size, o->size);
    if (out->dims[1] == 1 && images->dims[1] == 3)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s: RGB images into one channel (load them grey)", who);
    for (int c = 0; c < out->dims[1]; c++)
        if (!(o->std[c] > 0))
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "%s: std[%d] must be > 0, got %g", who, c, (double)o->std[c]);
    return KILN_OK;
}

/* Image i of the u8 (N, C, H, W) tensor as an interleaved kiln_image (pixels into buf). */
static kiln_image image_at(const kiln_tensor *t, int64_t i, uint8_t *buf) {
    const int c = (int)t->dims[1], h = (int)t->dims[2], w = (int)t->dims[3];
    const uint8_t *src = (const uint8_t *)t->data + (size_t)i * (size_t)(c * h * w);
    for (int k = 0; k < c; k++)
        for (int p = 0; p < h * w; p++) buf[(size_t)p * c + k] = src[(size_t)k * h * w + p];
    return (kiln_image){.w = w, .h = h, .c = c, .pixels = buf};
}

/* The interleaved size x size crop px into dst (oc, size, size), flipped, normalized. */
static void store_to(const uint8_t *px, int c, int size, bool flip, const kiln_augment_options *o, int oc, float *dst) {
    for (int k = 0; k < oc; k++) {
        const int sk = c == 1 ? 0 : k;
        const float scale = 1.f / (255.f * o->std[k]), shift = o->mean[k] / o->std[k];
        for (int y = 0; y < size; y++)
            for (int x = 0; x < size; x++) {
                const int sx = flip ? size - 1 - x : x;
                dst[((size_t)k * size + y) * size + x] = px[((size_t)y * size + sx) * c + sk] * scale - shift;
            }
    }
}

/* The same into image i of out. */
static void store(const uint8_t *px, int c, int size, bool flip, const kiln_augment_options *o, kiln_tensor *out,
                  int64_t i) {
    const int oc = (int)out->dims[1];
    store_to(px, c, size, flip, o, oc, (float *)out->data + (size_t)i * (size_t)oc * size * size);
}

/* torchvision's RandomResizedCrop.get_params on a w x h image, then the flip, from the
 * stream of image i of (seed, epoch): the crop (x0, y0, cw, ch). */
static bool rrc_params(uint64_t seed, int64_t epoch, int64_t i, int w, int h, double smin, double smax, double rmin,
                       double rmax, bool flip_on, int *px0, int *py0, int *pcw, int *pch) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull ^ ((uint64_t)epoch * 0xD6E8FEB86659FD93ull + (uint64_t)i);
    aug_next(&s);
    int ch = h, cw = w, y0 = 0, x0 = 0;
    bool found = false;
    const double area = (double)h * w;
    for (int attempt = 0; attempt < 10 && !found; attempt++) {
        const double target = area * aug_uniform(&s, smin, smax);
        const double ar = exp(aug_uniform(&s, log(rmin), log(rmax)));
        const int tw = (int)lround(sqrt(target * ar)), th = (int)lround(sqrt(target / ar));
        if (tw > 0 && tw <= w && th > 0 && th <= h) {
            cw = tw;
            ch = th;
            y0 = aug_below(&s, h - th + 1);
            x0 = aug_below(&s, w - tw + 1);
            found = true;
        }
    }
    if (!found) { /* the centre crop, clamped to the ratio range */
        const double in_ratio = (double)w / h;
        if (in_ratio < rmin) {
            cw = w;
            ch = (int)lround(w / rmin);
        } else if (in_ratio > rmax) {
            ch = h;
            cw = (int)lround(h * rmax);
        }
        if (ch < 1) ch = 1;
        if (cw < 1) cw = 1;
        if (ch > h) ch = h;
        if (cw > w) cw = w;
        y0 = (h - ch) / 2;
        x0 = (w - cw) / 2;
    }
    *px0 = x0, *py0 = y0, *pcw = cw, *pch = ch;
    return flip_on && (aug_next(&s) & 1);
}

void kiln_rrc_box(uint64_t seed, int64_t epoch, int64_t index, int w, int h, double smin, double smax, double rmin,
                  double rmax, bool flip_on, kiln_crop_box *out) {
    out->flip = rrc_params(seed, epoch, index, w, h, smin, smax, rmin, rmax, flip_on, &out->x0, &out->y0, &out->cw, &out->ch);
}

kiln_status kiln_images_augment(kiln_context *ctx, const kiln_tensor *images, const kiln_augment_options *o,
                                uint64_t seed, int64_t epoch, kiln_tensor *out) {
    kiln_status st = check_transform(ctx, images, o, out, "kiln_images_augment");
    if (st) return st;
    const double smin = o->scale_min > 0 ? o->scale_min : 0.08, smax = o->scale_max > 0 ? o->scale_max : 1.0;
    const double rmin = o->ratio_min > 0 ? o->ratio_min : 3.0 / 4.0, rmax = o->ratio_max > 0 ? o->ratio_max : 4.0 / 3.0;
    if (!(smin <= smax && smax <= 1.0 && rmin <= rmax))
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_images_augment: scale %g..%g, ratio %g..%g", smin, smax,
                         rmin, rmax);
    const int64_t n = images->dims[0];
    const int c = (int)images->dims[1], h = (int)images->dims[2], w = (int)images->dims[3], size = o->size;
    int failed = 0;
#pragma omp parallel
    {
        uint8_t *buf = malloc((size_t)c * h * w), *crop = malloc((size_t)c * size * size);
        if (!buf || !crop) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 16)
        for (int64_t i = 0; i < n; i++) {
            if (!buf || !crop) continue;
            int x0, y0, cw, ch;
            const bool flip = rrc_params(seed, epoch, i, w, h, smin, smax, rmin, rmax, o->flip, &x0, &y0, &cw, &ch);
            kiln_image im = image_at(images, i, buf);
            if (cw == size && ch == size) {
                for (int y = 0; y < size; y++)
                    memcpy(crop + (size_t)y * size * c, buf + ((size_t)(y0 + y) * w + x0) * c, (size_t)size * c);
            } else if (resample(NULL, &im, x0, y0, cw, ch, size, size, crop)) {
#pragma omp atomic write
                failed = 1;
                continue;
            }
            store(crop, c, size, flip, o, out, i);
        }
        free(buf);
        free(crop);
    }
    if (failed) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "kiln_images_augment: out of memory");
    return KILN_OK;
}

kiln_status kiln_images_center(kiln_context *ctx, const kiln_tensor *images, int resize,
                               const kiln_augment_options *o, kiln_tensor *out) {
    kiln_status st = check_transform(ctx, images, o, out, "kiln_images_center");
    if (st) return st;
    if (resize < 0) return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "kiln_images_center: resize must be >= 0");
    const int64_t n = images->dims[0];
    const int c = (int)images->dims[1], h = (int)images->dims[2], w = (int)images->dims[3];
    const int shorter = (resize ? resize : (h < w ? h : w));
    if (shorter < o->size)
        return kiln_fail(ctx, KILN_ERR_SHAPE, "kiln_images_center: a %dx%d centre crop of images whose shorter side is %d",
                         o->size, o->size, shorter);
    int failed = 0;
#pragma omp parallel
    {
        uint8_t *buf = malloc((size_t)c * h * w);
#pragma omp for schedule(dynamic, 16)
        for (int64_t i = 0; i < n; i++) {
            kiln_image crop = {0};
            if (!buf) {
#pragma omp atomic write
                failed = 1;
                continue;
            }
            kiln_image im = image_at(images, i, buf);
            if (kiln_image_resize_crop(NULL, &im, resize, o->size, o->size, &crop)) {
#pragma omp atomic write
                failed = 1;
                continue;
            }
            store(crop.pixels, c, o->size, false, o, out, i);
            kiln_image_free(&crop);
        }
        free(buf);
    }
    if (failed) return kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "kiln_images_center: out of memory");
    return KILN_OK;
}

/* ------------------------------------------------------ streaming folders */

/* One image folder as a loader source (kiln_loader_create_images): each sample read,
 * decoded and transformed by the worker that gathers its batch. */
/* Decoding on the GPU (io.decode): per ring slot, the batch's files (pinned host memory)
 * and what the GPU does with each; the device batch handed out while the slot is held. */
typedef struct gpu_slot {
    unsigned char *bytes; /* pinned; the files of JPEGs the GPU decodes, one after another */
    size_t len, cap;
    kiln_jpeg_job *jobs;  /* (batch) */
    int64_t *index;       /* (batch) the data set index of each */
    int64_t epoch;
    kiln_tensor *x;       /* the device batch's view (dims[0] and data set per batch) */
    float *out;           /* the device batch while held */
} gpu_slot;

typedef struct stream_src {
    const kiln_image_list *list;
    kiln_image_stream_options io;
    double smin, smax, rmin, rmax;
    uint64_t seed;
    /* io.decode == KILN_DECODE_GPU */
    kiln_jpeg_gpu *gpu;
    int64_t batch;
    int n_slots;
    gpu_slot *gs;
    int64_t host_images; /* JPEGs the workers decoded instead (under mu) */
    pthread_mutex_t mu;
} stream_src;

/* What one decode needs, and (training) the crop drawn from the file's full size. */
typedef struct stream_need_arg {
    const stream_src *s;
    int64_t index, epoch;
    bool called, flip;
    int x0, y0, cw, ch;
} stream_need_arg;

static void stream_need(void *arg, int w, int h, int *nw, int *nh, int region[4]) {
    stream_need_arg *a = arg;
    const stream_src *s = a->s;
    const int size = s->io.aug.size;
    a->called = true;
    *nw = w, *nh = h;
    if (s->io.train) {
        a->flip = rrc_params(s->seed, a->epoch, a->index, w, h, s->smin, s->smax, s->rmin, s->rmax, s->io.aug.flip, &a->x0,
                             &a->y0, &a->cw, &a->ch);
        if (s->io.dct_scale) { /* the crop keeps at least size x size pixels; only it is decoded */
            *nw = (int)ceil((double)size * w / a->cw);
            *nh = (int)ceil((double)size * h / a->ch);
            region[0] = a->x0, region[1] = a->y0, region[2] = a->cw, region[3] = a->ch;
        }
    } else if (s->io.dct_scale && s->io.resize) { /* the shorter side keeps at least resize pixels */
        const double f = (double)s->io.resize / (w < h ? w : h);
        *nw = (int)ceil(w * f);
        *nh = (int)ceil(h * f);
    }
    if (*nw > w) *nw = w;
    if (*nh > h) *nh = h;
}

static kiln_status stream_fill(void *arg, kiln_context *ctx, int64_t index, int64_t epoch, float *dst, int64_t *label) {
    const stream_src *s = arg;
    const char *path = s->list->paths[index];
    const int size = s->io.aug.size, oc = s->io.channels;
    unsigned char *data = NULL;
    size_t n = 0;
    kiln_image im = {0}, out = {0};
    stream_need_arg na = {.s = s, .index = index, .epoch = epoch};
    kiln_image_frame fr;
    kiln_status st = read_file(ctx, path, &data, &n);
    if (!st) st = kiln_image_decode_scaled(ctx, data, n, path, oc, stream_need, &na, &im, &fr);
    free(data);
    if (!st && s->io.train) {
        if (!na.called) { /* a PNG: the crop from its size */
            int nw, nh, region[4];
            stream_need(&na, im.w, im.h, &nw, &nh, region);
        }
        int x0 = na.x0, y0 = na.y0, cw = na.cw, ch = na.ch;
        if (im.w != fr.full_w || im.h != fr.full_h) { /* decoded smaller or in part: the crop in its pixels */
            const double fx = (double)fr.scaled_w / fr.full_w, fy = (double)fr.scaled_h / fr.full_h;
            x0 = (int)(x0 * fx + 0.5) - fr.x0, y0 = (int)(y0 * fy + 0.5) - fr.y0;
            cw = (int)(cw * fx + 0.5), ch = (int)(ch * fy + 0.5);
            if (x0 < 0) x0 = 0;
            if (y0 < 0) y0 = 0;
            if (cw < 1) cw = 1;
            if (ch < 1) ch = 1;
            if (cw > im.w) cw = im.w;
            if (ch > im.h) ch = im.h;
            if (x0 + cw > im.w) x0 = im.w - cw;
            if (y0 + ch > im.h) y0 = im.h - ch;
        }
        out.pixels = malloc((size_t)size * (size_t)size * (size_t)im.c);
        if (!out.pixels) st = kiln_fail(ctx, KILN_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        else if (cw == size && ch == size) {
            for (int y = 0; y < size; y++)
                memcpy(out.pixels + (size_t)y * size * im.c, im.pixels + ((size_t)(y0 + y) * im.w + x0) * im.c,
                       (size_t)size * im.c);
        } else {
            st = resample(ctx, &im, x0, y0, cw, ch, size, size, out.pixels);
        }
        if (!st) store_to(out.pixels, im.c, size, na.flip, &s->io.aug, oc, dst);
    } else if (!st) {
        st = kiln_image_resize_crop(ctx, &im, s->io.resize, size, size, &out);
        if (st) kiln_msg_prefix(ctx, "%s: ", path);
        else store_to(out.pixels, im.c, size, false, &s->io.aug, oc, dst);
    }
    kiln_image_free(&im);
    kiln_image_free(&out);
    *label = s->list->labels[index];
    return st;
}

/* ---------------------------------------------------- streaming on the GPU */

static void gpu_src_free(void *arg) {
    stream_src *s = arg;
    if (!s) return;
    for (int i = 0; s->gs && i < s->n_slots; i++) {
        gpu_slot *g = &s->gs[i];
        if (g->out) kiln_jpeg_gpu_done(s->gpu, g->out);
        kiln_host_free(KILN_DEVICE_CUDA, g->bytes);
        free(g->jobs);
        free(g->index);
        kiln_tensor_free(g->x);
    }
    free(s->gs);
    kiln_jpeg_gpu_free(s->gpu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static kiln_status gpu_attach(void *arg, kiln_context *ctx, int slots, int64_t batch) {
    stream_src *s = arg;
    if (batch > s->batch) return kiln_fail(ctx, KILN_ERR_INTERNAL, "image loader: batch %lld over %lld", (long long)batch,
                                           (long long)s->batch);
    s->gs = kiln_calloc(ctx, (size_t)slots, sizeof *s->gs, "the GPU decoder's slots");
    if (!s->gs) return KILN_ERR_OUT_OF_MEMORY;
    s->n_slots = slots;
    const int size = s->io.aug.size;
    for (int i = 0; i < slots; i++) {
        gpu_slot *g = &s->gs[i];
        g->jobs = kiln_calloc(ctx, (size_t)batch, sizeof *g->jobs, "the GPU decoder's jobs");
        g->index = kiln_calloc(ctx, (size_t)batch, sizeof *g->index, "the GPU decoder's jobs");
        if (!g->jobs || !g->index) return KILN_ERR_OUT_OF_MEMORY;
        /* ~120 KB a file (ImageNet's average); grown by the worker when a batch needs more */
        g->cap = (size_t)batch * 128 * 1024;
        kiln_status st = kiln_host_alloc(ctx, KILN_DEVICE_CUDA, g->cap, (void **)&g->bytes);
        if (st) return st;
        /* a view of device memory: the data pointer is set per batch (kiln_jpeg_gpu_run) */
        const int64_t dims[4] = {batch, 3, size, size};
        st = kiln_tensor_wrap_on(ctx, KILN_F32, 4, dims, KILN_DEVICE_CUDA, s->io.device_index, (void *)(uintptr_t)256, &g->x);
        if (st) return st;
    }
    return KILN_OK;
}

/* Sample i of the slot's batch: a JPEG nvJPEG takes is read into the slot's bytes with its
 * box drawn here (the same stream as the CPU path's); anything else is decoded and
 * transformed on this worker by the CPU path into dst. */
static kiln_status gpu_fill_at(void *arg, kiln_context *ctx, int slot, int64_t i, int64_t index, int64_t epoch,
                               float *dst, int64_t *label) {
    stream_src *s = arg;
    gpu_slot *g = &s->gs[slot];
    if (i == 0) g->len = 0;
    g->epoch = epoch;
    g->index[i] = index;
    kiln_jpeg_job *j = &g->jobs[i];
    memset(j, 0, sizeof *j);
    const char *path = s->list->paths[index];
    unsigned char *data = NULL;
    size_t n = 0;
    kiln_status st = read_file(ctx, path, &data, &n);
    if (st) return st;
    kiln_jpeg_info info;
    if (kiln_jpeg_probe(data, n, &info) && info.gpu_ok) {
        j->w = info.w, j->h = info.h;
        if (s->io.train)
            kiln_rrc_box(s->seed, epoch, index, info.w, info.h, s->smin, s->smax, s->rmin, s->rmax, s->io.aug.flip, &j->box);
        else if ((st = kiln_center_box(ctx, info.w, info.h, s->io.resize, s->io.aug.size, &j->box)) != KILN_OK)
            kiln_msg_prefix(ctx, "%s: ", path);
        if (!st && g->len + n > g->cap) {
            /* grow the pinned bytes: the jobs hold offsets, not pointers */
            size_t cap = 2 * g->cap > g->len + n ? 2 * g->cap : g->len + n;
            unsigned char *nb = NULL;
            st = kiln_host_alloc(ctx, KILN_DEVICE_CUDA, cap, (void **)&nb);
            if (!st) {
                memcpy(nb, g->bytes, g->len);
                kiln_host_free(KILN_DEVICE_CUDA, g->bytes);
                g->bytes = nb;
                g->cap = cap;
            }
        }
        if (!st) {
            memcpy(g->bytes + g->len, data, n);
            j->offset = g->len;
            j->size = n;
            g->len += n;
            *label = s->list->labels[index];
        }
        free(data);
        return st;
    }
    free(data); /* read again by the CPU path (rare: progressive, grey, CMYK, PNG files) */
    pthread_mutex_lock(&s->mu);
    s->host_images++;
    pthread_mutex_unlock(&s->mu);
    return stream_fill(s, ctx, index, epoch, dst, label);
}

typedef struct gpu_fallback_arg {
    stream_src *s;
    gpu_slot *g;
} gpu_fallback_arg;

static kiln_status gpu_fallback(void *arg, kiln_context *ctx, int64_t i, float *dst) {
    gpu_fallback_arg *a = arg;
    int64_t label;
    return stream_fill(a->s, ctx, a->g->index[i], a->g->epoch, dst, &label);
}

static kiln_status gpu_finish(void *arg, kiln_context *ctx, kiln_batch *b) {
    stream_src *s = arg;
    gpu_slot *g = &s->gs[b->slot];
    gpu_fallback_arg fa = {s, g};
    float *out = NULL;
    kiln_status st = kiln_jpeg_gpu_run(s->gpu, ctx, g->bytes, g->jobs, b->size, b->images, gpu_fallback, &fa, &out);
    if (st) return st;
    g->out = out;
    g->x->data = out;
    g->x->dims[0] = b->size;
    b->x = g->x;
    return KILN_OK;
}

static void gpu_release(void *arg, const kiln_batch *b) {
    stream_src *s = arg;
    gpu_slot *g = &s->gs[b->slot];
    if (g->out) kiln_jpeg_gpu_done(s->gpu, g->out);
    g->out = NULL;
}

static void gpu_set_stream(void *arg, void *stream) { kiln_jpeg_gpu_set_stream(((stream_src *)arg)->gpu, stream); }

static void gpu_stats(void *arg, kiln_load_stats *out, bool reset) {
    stream_src *s = arg;
    kiln_jpeg_gpu_stats gs;
    kiln_jpeg_gpu_stats_get(s->gpu, &gs, reset);
    pthread_mutex_lock(&s->mu);
    const int64_t host = s->host_images;
    if (reset) s->host_images = 0;
    pthread_mutex_unlock(&s->mu);
    snprintf(out->decoder, sizeof out->decoder, "nvJPEG %s", gs.backend);
    out->gpu_images = gs.gpu_images;
    out->cpu_images = gs.cpu_images + host;
    out->gpu_decode_s = gs.decode_s;
}

bool kiln_gpu_decode_available(char *why, size_t n) { return kiln_nvjpeg_load(why, n); }

kiln_status kiln_loader_create_images(kiln_context *ctx, const kiln_image_list *list,
                                      const kiln_image_stream_options *io, const kiln_loader_options *opts,
                                      kiln_loader **out) {
    if (!ctx || !list || !io || !out) return KILN_ERR_INVALID_ARGUMENT;
    *out = NULL;
    const kiln_augment_options *o = &io->aug;
    if (io->channels != 1 && io->channels != 3)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "image loader: channels must be 1 or 3, got %d", io->channels);
    if (o->size < 1 || o->size > KILN_IMAGE_MAX_SIDE || io->resize < 0)
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "image loader: size %d and resize %d are out of range", o->size,
                         io->resize);
    for (int c = 0; c < io->channels; c++)
        if (!(o->std[c] > 0))
            return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "image loader: std[%d] must be > 0, got %g", c,
                             (double)o->std[c]);
    stream_src *s = kiln_calloc(ctx, 1, sizeof *s, "an image loader");
    if (!s) return KILN_ERR_OUT_OF_MEMORY;
    s->list = list;
    s->io = *io;
    s->smin = o->scale_min > 0 ? o->scale_min : 0.08, s->smax = o->scale_max > 0 ? o->scale_max : 1.0;
    s->rmin = o->ratio_min > 0 ? o->ratio_min : 3.0 / 4.0, s->rmax = o->ratio_max > 0 ? o->ratio_max : 4.0 / 3.0;
    if (!(s->smin <= s->smax && s->smax <= 1.0 && s->rmin <= s->rmax)) {
        kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "image loader: scale %g..%g, ratio %g..%g", s->smin, s->smax, s->rmin,
                  s->rmax);
        free(s);
        return KILN_ERR_INVALID_ARGUMENT;
    }
    s->seed = opts ? opts->seed : 0;
    kiln_loader_source src = {.n = list->n, .ndim = 3, .dims = {io->channels, o->size, o->size}, .arg = s,
                              .fill = stream_fill, .free_arg = free};
    bool gpu = io->decode == KILN_DECODE_GPU;
    if (io->decode == KILN_DECODE_GPU || io->decode == KILN_DECODE_AUTO) {
        char why[256];
        if (io->channels != 3 || !kiln_gpu_decode_available(why, sizeof why)) {
            if (io->channels != 3) snprintf(why, sizeof why, "GPU decoding makes 3 channels, the model takes %d", io->channels);
            if (io->decode == KILN_DECODE_GPU) {
                free(s);
                return kiln_fail(ctx, KILN_ERR_UNSUPPORTED, "image loader: no GPU decoding: %s", why);
            }
            gpu = false;
        } else {
            gpu = true;
        }
    } else if (io->decode != KILN_DECODE_CPU) {
        free(s);
        return kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "image loader: decode must be KILN_DECODE_CPU, _GPU or _AUTO, got %d",
                         io->decode);
    }
    if (gpu) {
        s->batch = opts ? opts->batch_size : kiln_loader_options_default().batch_size;
        int err = pthread_mutex_init(&s->mu, NULL);
        if (err) {
            free(s);
            return kiln_fail(ctx, KILN_ERR_INTERNAL, "image loader: cannot create its lock: %s", strerror(err));
        }
        const float *mean = o->mean, *sd = o->std;
        kiln_status st = s->batch >= 1 && s->batch <= (1 << 20)
                             ? kiln_jpeg_gpu_create(ctx, io->device_index, s->batch, o->size, mean, sd, &s->gpu)
                             : kiln_fail(ctx, KILN_ERR_INVALID_ARGUMENT, "image loader: batch %lld", (long long)s->batch);
        if (st) {
            gpu_src_free(s);
            return st;
        }
        src.free_arg = gpu_src_free;
        src.attach = gpu_attach;
        src.fill_at = gpu_fill_at;
        src.finish = gpu_finish;
        src.release = gpu_release;
        src.set_stream = gpu_set_stream;
        src.stats = gpu_stats;
    }
    return kiln_loader_create_source(ctx, &src, opts, out);
}
