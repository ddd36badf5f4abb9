/*
 * kiln train --plot: the training curves drawn with cairo (PNG or SVG by the file's
 * extension). Three panels over one step axis: the loss of each step with its moving
 * average, the test accuracy at the end of each epoch, and the learning rate of each step.
 * Built only with cairo (CMake option KILN_PLOT, found through pkg-config); without it
 * --plot is refused up front.
 */
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLOT_PI 3.14159265358979323846

#ifdef KILN_HAVE_CAIRO
#include <cairo.h>
#ifdef CAIRO_HAS_SVG_SURFACE
#include <cairo-svg.h>
#endif

bool plot_available(void) { return true; }

typedef struct axis {
    double lo, hi, step; /* range and tick spacing */
} axis;

/* Ticks at 1, 2 or 5 times a power of ten, about n of them, over [lo, hi]. */
static axis nice_axis(double lo, double hi, int n) {
    if (!(hi > lo)) {
        const double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad;
        hi += pad;
    }
    const double raw = (hi - lo) / n, mag = pow(10, floor(log10(raw))), f = raw / mag;
    const double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
    return (axis){floor(lo / step) * step, ceil(hi / step) * step, step};
}

static void tick_label(char *buf, size_t n, double v, double step) {
    if (fabs(v) < step * 1e-6) v = 0;
    const double a = fabs(step);
    if (a >= 1 && fabs(v) < 1e6) snprintf(buf, n, "%.0f", v);
    else if (a >= 0.1 && a < 1) snprintf(buf, n, "%.1f", v);
    else if (a >= 0.01 && a < 1) snprintf(buf, n, "%.2f", v);
    else if (a >= 0.001 && a < 1) snprintf(buf, n, "%.3f", v);
    else snprintf(buf, n, "%.0e", v);
}

typedef struct panel {
    double x, y, w, h; /* plot area in device units */
    axis ax, ay;
} panel;

static double px(const panel *p, double v) { return p->x + (v - p->ax.lo) / (p->ax.hi - p->ax.lo) * p->w; }
static double py(const panel *p, double v) { return p->y + p->h - (v - p->ay.lo) / (p->ay.hi - p->ay.lo) * p->h; }

static void text(cairo_t *cr, double x, double y, const char *s, double ax, double ay) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s, &e);
    cairo_move_to(cr, x - e.x_bearing - e.width * ax, y - e.y_bearing - e.height * ay);
    cairo_show_text(cr, s);
}

/* The frame, grid, ticks with labels, axis names and the panel's title. */
static void draw_axes(cairo_t *cr, const panel *p, const char *title, const char *xname, const char *yname, double fs) {
    char buf[32];
    cairo_set_line_width(cr, 1);
    cairo_set_font_size(cr, fs * 0.85);
    for (double v = p->ay.lo; v <= p->ay.hi + p->ay.step * 1e-6; v += p->ay.step) {
        const double y = round(py(p, v)) + 0.5;
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, p->x, y);
        cairo_line_to(cr, p->x + p->w, y);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        cairo_move_to(cr, p->x - 5, y);
        cairo_line_to(cr, p->x, y);
        cairo_stroke(cr);
        tick_label(buf, sizeof buf, v, p->ay.step);
        text(cr, p->x - 8, y, buf, 1, 0.5);
    }
    for (double v = p->ax.lo; v <= p->ax.hi + p->ax.step * 1e-6; v += p->ax.step) {
        const double x = round(px(p, v)) + 0.5;
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, x, p->y);
        cairo_line_to(cr, x, p->y + p->h);
        cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        cairo_move_to(cr, x, p->y + p->h);
        cairo_line_to(cr, x, p->y + p->h + 5);
        cairo_stroke(cr);
        tick_label(buf, sizeof buf, v, p->ax.step);
        text(cr, x, p->y + p->h + 8, buf, 0.5, 0);
    }
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    cairo_rectangle(cr, round(p->x) + 0.5, round(p->y) + 0.5, round(p->w), round(p->h));
    cairo_stroke(cr);
    cairo_set_font_size(cr, fs * 0.9);
    text(cr, p->x + p->w / 2, p->y + p->h + 10 + fs * 1.2, xname, 0.5, 0);
    cairo_save(cr);
    cairo_translate(cr, p->x - fs * 4.2, p->y + p->h / 2);
    cairo_rotate(cr, -PLOT_PI / 2);
    text(cr, 0, 0, yname, 0.5, 0.5);
    cairo_restore(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, fs);
    text(cr, p->x, p->y - 8, title, 0, 1);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
}

typedef struct legend_item {
    const char *name;
    double r, g, b, width;
    bool marker;
} legend_item;

/* A legend box in the panel's top right corner. */
static void draw_legend(cairo_t *cr, const panel *p, const legend_item *items, int n, double fs) {
    cairo_set_font_size(cr, fs * 0.85);
    double wmax = 0;
    for (int i = 0; i < n; i++) {
        cairo_text_extents_t e;
        cairo_text_extents(cr, items[i].name, &e);
        if (e.x_advance > wmax) wmax = e.x_advance;
    }
    const double line = fs * 1.3, bw = wmax + fs * 3.5, bh = line * n + fs * 0.6;
    const double bx = p->x + p->w - bw - 8, by = p->y + 8;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
    cairo_rectangle(cr, bx, by, bw, bh);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.6, 0.6, 0.6);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    for (int i = 0; i < n; i++) {
        const double y = by + fs * 0.3 + line * (i + 0.5);
        cairo_set_source_rgb(cr, items[i].r, items[i].g, items[i].b);
        cairo_set_line_width(cr, items[i].width);
        cairo_move_to(cr, bx + fs * 0.5, y);
        cairo_line_to(cr, bx + fs * 2.3, y);
        cairo_stroke(cr);
        if (items[i].marker) {
            cairo_arc(cr, bx + fs * 1.4, y, 4, 0, 2 * PLOT_PI);
            cairo_fill(cr);
        }
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        text(cr, bx + fs * 2.8, y, items[i].name, 0, 0.5);
    }
}

static void draw_message(cairo_t *cr, const panel *p, const char *msg, double fs) {
    cairo_set_source_rgb(cr, 0.4, 0.4, 0.4);
    cairo_set_font_size(cr, fs);
    text(cr, p->x + p->w / 2, p->y + p->h / 2, msg, 0.5, 0.5);
}

static void draw(cairo_t *cr, const train_log *l, const char *title, int width, int height) {
    const double fs = fmax(10, fmin(width, height) / 60.0); /* font size */
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, fs * 1.3);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text(cr, width / 2.0, fs * 0.8, title, 0.5, 0);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);

    /* one step axis for the three panels */
    double s0 = 0, s1 = 1;
    if (l->n_steps) {
        s0 = (double)l->steps[0].step;
        s1 = (double)l->steps[l->n_steps - 1].step;
        if (s0 > 1 && l->n_steps > 1) s0 = s0 - 1; /* a resumed run starts where it left off */
        else s0 = 0;
    }
    const axis ax = nice_axis(s0, s1 > s0 ? s1 : s0 + 1, 8);
    const double left = fs * 6, right = fs * 1.5, top = fs * 3.5, gap = fs * 4.5, bottom = fs * 3.5;
    const double ph = (height - top - bottom - 2 * gap), w = width - left - right;
    panel pl = {left, top, w, ph * 0.45, ax, {0, 1, 1}}, pa = {left, top + ph * 0.45 + gap, w, ph * 0.3, ax, {0, 1, 1}},
          pr = {left, top + ph * 0.75 + 2 * gap, w, ph * 0.25, ax, {0, 1, 1}};

    /* loss: each step (light) and a moving average (dark) */
    const size_t n = l->n_steps;
    const int win = n >= 200 ? (int)(n / 40) : n >= 20 ? 5 : 1;
    double lmax = 0, lmin = INFINITY;
    for (size_t i = 0; i < n; i++)
        if (isfinite(l->steps[i].loss)) {
            lmax = fmax(lmax, l->steps[i].loss);
            lmin = fmin(lmin, l->steps[i].loss);
        }
    pl.ay = nice_axis(lmin < 0 ? lmin : 0, lmax > 0 ? lmax : 1, 5);
    char avg[64];
    snprintf(avg, sizeof avg, "moving average (%d steps)", win);
    draw_axes(cr, &pl, "Training loss", "step", "loss", fs);
    if (!n) draw_message(cr, &pl, "no step recorded", fs);
    cairo_save(cr);
    cairo_rectangle(cr, pl.x, pl.y, pl.w, pl.h);
    cairo_clip(cr);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_set_source_rgb(cr, 0.65, 0.78, 0.95);
    cairo_set_line_width(cr, 1);
    bool pen = false;
    for (size_t i = 0; i < n; i++) {
        const double v = l->steps[i].loss;
        if (!isfinite(v)) { pen = false; continue; }
        if (pen) cairo_line_to(cr, px(&pl, (double)l->steps[i].step), py(&pl, v));
        else cairo_move_to(cr, px(&pl, (double)l->steps[i].step), py(&pl, v));
        pen = true;
    }
    if (n == 1) cairo_arc(cr, px(&pl, (double)l->steps[0].step), py(&pl, l->steps[0].loss), 3, 0, 2 * PLOT_PI);
    cairo_stroke(cr);
    if (win > 1) {
        cairo_set_source_rgb(cr, 0.05, 0.25, 0.65);
        cairo_set_line_width(cr, 2.5);
        double sum = 0;
        int cnt = 0;
        pen = false;
        for (size_t i = 0; i < n; i++) {
            if (isfinite(l->steps[i].loss)) sum += l->steps[i].loss, cnt++;
            if (i >= (size_t)win && isfinite(l->steps[i - win].loss)) sum -= l->steps[i - win].loss, cnt--;
            if (i + 1 < (size_t)win || cnt == 0) continue;
            const double x = px(&pl, (double)l->steps[i].step), y = py(&pl, sum / cnt);
            if (pen) cairo_line_to(cr, x, y);
            else cairo_move_to(cr, x, y);
            pen = true;
        }
        cairo_stroke(cr);
    }
    cairo_restore(cr);
    const legend_item li[] = {{"loss of each step", 0.65, 0.78, 0.95, 1, false}, {avg, 0.05, 0.25, 0.65, 2.5, false}};
    if (n) draw_legend(cr, &pl, li, win > 1 ? 2 : 1, fs);

    /* test accuracy at the end of each epoch */
    double amin = 1, amax = 0;
    for (size_t i = 0; i < l->n_epochs; i++)
        if (isfinite(l->epochs[i].test_accuracy)) {
            amin = fmin(amin, l->epochs[i].test_accuracy);
            amax = fmax(amax, l->epochs[i].test_accuracy);
        }
    pa.ay = amax >= amin ? nice_axis(fmax(0, amin - 0.05), fmin(1, amax + 0.05), 4) : nice_axis(0, 1, 4);
    draw_axes(cr, &pa, "Test accuracy (end of each epoch)", "step", "accuracy", fs);
    if (!l->n_epochs) draw_message(cr, &pa, "no epoch evaluated", fs);
    cairo_set_source_rgb(cr, 0.8, 0.35, 0.05);
    cairo_set_line_width(cr, 2);
    for (size_t i = 0; i < l->n_epochs; i++) {
        const double x = px(&pa, (double)l->epochs[i].end_step), y = py(&pa, l->epochs[i].test_accuracy);
        if (i) cairo_line_to(cr, x, y);
        else cairo_move_to(cr, x, y);
    }
    cairo_stroke(cr);
    cairo_set_font_size(cr, fs * 0.8);
    for (size_t i = 0; i < l->n_epochs; i++) {
        const double x = px(&pa, (double)l->epochs[i].end_step), y = py(&pa, l->epochs[i].test_accuracy);
        char buf[48];
        cairo_set_source_rgb(cr, 0.8, 0.35, 0.05);
        cairo_arc(cr, x, y, 4.5, 0, 2 * PLOT_PI);
        cairo_fill(cr);
        cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
        snprintf(buf, sizeof buf, "epoch %lld: %.4f", (long long)l->epochs[i].epoch, l->epochs[i].test_accuracy);
        text(cr, x - 6, y + 8, buf, 1, 0);
    }
    const legend_item la[] = {{"test accuracy", 0.8, 0.35, 0.05, 2, true}};
    if (l->n_epochs) draw_legend(cr, &pa, la, 1, fs);

    /* learning rate of each step */
    double rmax = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(l->steps[i].lr)) rmax = fmax(rmax, l->steps[i].lr);
    pr.ay = nice_axis(0, rmax > 0 ? rmax : 1, 3);
    draw_axes(cr, &pr, "Learning rate", "step", "lr", fs);
    cairo_set_source_rgb(cr, 0.1, 0.55, 0.25);
    cairo_set_line_width(cr, 2);
    for (size_t i = 0; i < n; i++) {
        /* constant between steps: a staircase */
        const double x = px(&pr, (double)l->steps[i].step), y = py(&pr, l->steps[i].lr);
        if (i == 0) cairo_move_to(cr, px(&pr, (double)l->steps[i].step - 1 < ax.lo ? ax.lo : (double)l->steps[i].step - 1), y);
        else cairo_line_to(cr, px(&pr, (double)l->steps[i - 1].step), y);
        cairo_line_to(cr, x, y);
    }
    cairo_stroke(cr);
    const legend_item lr[] = {{"learning rate", 0.1, 0.55, 0.25, 2, false}};
    if (n) draw_legend(cr, &pr, lr, 1, fs);
}

int plot_train(const train_log *l, const char *title, const char *path, int width, int height) {
    const char *ext = strrchr(path, '.');
    const bool svg = ext && strcmp(ext, ".svg") == 0;
    cairo_surface_t *sf;
#ifdef CAIRO_HAS_SVG_SURFACE
    if (svg) sf = cairo_svg_surface_create(path, width, height);
    else
#endif
        sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
    if (cairo_surface_status(sf) != CAIRO_STATUS_SUCCESS) {
        fprintf(stderr, "kiln train: --plot %s: %s\n", path, cairo_status_to_string(cairo_surface_status(sf)));
        cairo_surface_destroy(sf);
        return 1;
    }
    cairo_t *cr = cairo_create(sf);
    draw(cr, l, title, width, height);
    cairo_status_t st = cairo_status(cr);
    cairo_destroy(cr);
    if (st == CAIRO_STATUS_SUCCESS && !svg) st = cairo_surface_write_to_png(sf, path);
    cairo_surface_finish(sf);
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_status(sf);
    cairo_surface_destroy(sf);
    /* no cairo object is left: give back the font caches (fontconfig patterns), which
     * leak checkers would otherwise report */
    cairo_debug_reset_static_data();
    if (st != CAIRO_STATUS_SUCCESS) {
        fprintf(stderr, "kiln train: --plot %s: %s\n", path, cairo_status_to_string(st));
        return 1;
    }
    return 0;
}

#else /* built without cairo */

bool plot_available(void) { return false; }

int plot_train(const train_log *l, const char *title, const char *path, int width, int height) {
    fprintf(stderr, "kiln train: --plot %s: this kiln was built without cairo\n", path);
    return 2;
}

#endif

int train_plot_check(const char *path) {
    if (!plot_available()) {
        fprintf(stderr, "kiln train: --plot: this kiln was built without cairo (libcairo2-dev, CMake -DKILN_PLOT=ON)\n");
        return 2;
    }
    const char *ext = strrchr(path, '.');
    if (!ext || (strcmp(ext, ".png") != 0 && strcmp(ext, ".svg") != 0)) {
        fprintf(stderr, "kiln train: --plot %s: the file must end in .png or .svg\n", path);
        return 2;
    }
#ifdef KILN_HAVE_CAIRO
#ifndef CAIRO_HAS_SVG_SURFACE
    if (strcmp(ext, ".svg") == 0) {
        fprintf(stderr, "kiln train: --plot %s: this cairo has no SVG surface; write a .png\n", path);
        return 2;
    }
#endif
#endif
    return 0;
}

int train_plot_size(const char *arg, int *width, int *height) {
    int w = 0, h = 0;
    char tail;
    if (sscanf(arg, "%dx%d%c", &w, &h, &tail) != 2 || w < 200 || h < 200 || w > 10000 || h > 10000) {
        fprintf(stderr, "kiln train: --plot-size '%s': want WIDTHxHEIGHT in pixels, each 200 to 10000\n", arg);
        return 2;
    }
    *width = w;
    *height = h;
    return 0;
}

int train_plot(const train_log *l, const char *path, int width, int height, const char *data, int64_t batch) {
    if (l->oom) {
        fprintf(stderr, "kiln train: --plot %s: out of memory recording the steps\n", path);
        return 1;
    }
    char title[512];
    const char *base = strrchr(data, '/');
    while (base && !base[1] && base > data) { /* "dir/": the name before the slash */
        const char *b = base - 1;
        while (b > data && *b != '/') b--;
        base = b;
    }
    base = base ? base + (*base == '/') : data;
    snprintf(title, sizeof title, "kiln train mnist-net on %.*s, batch %lld: %zu epoch%s, %lld steps", (int)strcspn(base, "/"),
             base, (long long)batch, l->n_epochs, l->n_epochs == 1 ? "" : "s",
             l->n_steps ? (long long)l->steps[l->n_steps - 1].step : 0LL);
    const int rc = plot_train(l, title, path, width, height);
    if (!rc) printf("curves written to %s (%dx%d)\n", path, width, height);
    return rc;
}
