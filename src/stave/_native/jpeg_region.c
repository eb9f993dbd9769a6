/*
 * stave._jpeg_region: the two host-side steps of the image loader that Python bindings cannot do well.
 *
 * decode_region(data, denom, x, y, w, h, out, strict=True)
 *     Decodes only a region of a JPEG with libjpeg-turbo's partial-decode API: jpeg_crop_scanline()
 *     narrows IDCT, upsampling and colour conversion to the iMCU columns around the region,
 *     jpeg_skip_scanlines() skips the IDCT of the rows above it (their entropy-coded data must still
 *     be read: JPEG has no row index), and decoding stops after the region's last row. simplejpeg and
 *     Debian's TurboJPEG 2.1 API expose none of this. Returns (x0, width, height): the region starts
 *     at column x0 (x rounded down to an iMCU boundary) and is width x height RGB pixels, rows packed
 *     at width * 3 bytes in ``out``. With strict, a corrupt-data warning fails the decode.
 *
 * planar_normalize(src, dst, scale, shift, flip)
 *     HxWx3 uint8 -> 3xHxW float32, dst = src * scale[c] - shift[c], mirrored when flip: one pass
 *     through a 256-entry table per channel instead of a transpose, a cast and two broadcast passes.
 *
 * Both release the GIL: the loader calls them from several decode threads at once.
 *
 * Input is untrusted: libjpeg's errors are caught (longjmp back to the caller, reported as ValueError
 * with libjpeg's message), corrupt-data warnings fail the decode, the number of scans is bounded
 * (a progressive file with thousands of tiny scans is a known CPU bomb), and the output buffer's size
 * is checked before any row is written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

/* More scans than any real encoder writes (libjpeg's progressive scripts use about ten per image);
 * the same bound TurboJPEG 3 applies when asked to limit scans. */
#define MAX_SCANS 500
/* stave.data.decode.MAX_PIXELS: a 16k x 16k photo. The Python caller checks the header first; direct
 * callers get the same bound here, and libjpeg's own allocations are capped as well. */
#define MAX_PIXELS (1LL << 28)
#define MAX_MEMORY_BYTES (2LL << 30)

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    int warnings;
} stave_error_mgr;

typedef struct {
    struct jpeg_progress_mgr pub;
    int too_many_scans;
} stave_progress_mgr;

static void on_error_exit(j_common_ptr cinfo) {
    stave_error_mgr *err = (stave_error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void on_emit_message(j_common_ptr cinfo, int level) {
    stave_error_mgr *err = (stave_error_mgr *)cinfo->err;
    if (level < 0) {
        /* A warning: corrupt or truncated data that libjpeg would paper over with grey. Keep the first. */
        if (err->warnings == 0) {
            (*cinfo->err->format_message)(cinfo, err->message);
        }
        err->warnings++;
    }
}

static void on_progress(j_common_ptr cinfo) {
    stave_progress_mgr *progress = (stave_progress_mgr *)cinfo->progress;
    if (cinfo->is_decompressor) {
        j_decompress_ptr dinfo = (j_decompress_ptr)cinfo;
        if (dinfo->input_scan_number > MAX_SCANS) {
            progress->too_many_scans = 1;
            stave_error_mgr *err = (stave_error_mgr *)cinfo->err;
            snprintf(err->message, sizeof(err->message), "more than %d scans (a decompression bomb?)", MAX_SCANS);
            longjmp(err->jump, 1);
        }
    }
}

typedef struct {
    int x0, width, height;
} region_result;

/* Runs without the GIL. Returns 0 on success, -1 with err->message set. */
static int decode_region_nogil(const unsigned char *data, size_t size, int denom, int x, int y, int w, int h,
                               unsigned char *out, size_t out_size, int strict, stave_error_mgr *err,
                               region_result *result) {
    struct jpeg_decompress_struct cinfo;
    stave_progress_mgr progress;
    JSAMPROW rows[16];
    memset(&progress, 0, sizeof(progress));
    cinfo.err = jpeg_std_error(&err->pub);
    err->pub.error_exit = on_error_exit;
    err->pub.emit_message = on_emit_message;
    err->warnings = 0;
    err->message[0] = '\0';
    if (setjmp(err->jump)) {
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    progress.pub.progress_monitor = on_progress;
    cinfo.progress = &progress.pub;
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    cinfo.mem->max_memory_to_use = (long)MAX_MEMORY_BYTES;
    jpeg_read_header(&cinfo, TRUE);
    if ((long long)cinfo.image_width * (long long)cinfo.image_height > MAX_PIXELS) {
        snprintf(err->message, sizeof(err->message), "%ux%u image exceeds the %lld pixel limit (decompression bomb?)",
                 cinfo.image_width, cinfo.image_height, MAX_PIXELS);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    cinfo.out_color_space = JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned int)denom;
    jpeg_start_decompress(&cinfo);
    if (cinfo.output_components != 3) {
        snprintf(err->message, sizeof(err->message), "decoder produced %d components, not RGB", cinfo.output_components);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    long long out_w = (long long)cinfo.output_width, out_h = (long long)cinfo.output_height;
    /* Clamp the region into the scaled image (in 64 bits: x + w must not overflow for any int the
     * caller passes); an empty region is the caller's error. */
    long long left = x, top = y, right = (long long)x + w, bottom = (long long)y + h;
    if (left < 0) left = 0;
    if (top < 0) top = 0;
    if (right > out_w) right = out_w;
    if (bottom > out_h) bottom = out_h;
    x = (int)left;
    y = (int)top;
    w = right > left ? (int)(right - left) : 0;
    h = bottom > top ? (int)(bottom - top) : 0;
    if (w <= 0 || h <= 0) {
        snprintf(err->message, sizeof(err->message), "region outside the %lldx%lld image", out_w, out_h);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    JDIMENSION xoffset = (JDIMENSION)x, width = (JDIMENSION)w;
    if ((long long)width < out_w) {
        /* Rounds xoffset down to an iMCU boundary and widens width to match. */
        jpeg_crop_scanline(&cinfo, &xoffset, &width);
    } else {
        xoffset = 0;
        width = (JDIMENSION)out_w;
    }
    size_t row_bytes = (size_t)width * 3;
    if (row_bytes * (size_t)h > out_size) {  /* width <= 65535 after the crop: no overflow */
        snprintf(err->message, sizeof(err->message), "output buffer of %zu bytes is smaller than the %zu the region needs",
                 out_size, row_bytes * (size_t)h);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    if (y > 0) {
        JDIMENSION skipped = jpeg_skip_scanlines(&cinfo, (JDIMENSION)y);
        if (skipped != (JDIMENSION)y) {
            snprintf(err->message, sizeof(err->message), "could skip only %u of %d rows", skipped, y);
            jpeg_destroy_decompress(&cinfo);
            return -1;
        }
    }
    int done = 0;
    while (done < h) {
        int batch = h - done;
        if (batch > 16) batch = 16;
        for (int i = 0; i < batch; i++) rows[i] = out + (size_t)(done + i) * row_bytes;
        JDIMENSION got = jpeg_read_scanlines(&cinfo, rows, (JDIMENSION)batch);
        if (got == 0) {
            snprintf(err->message, sizeof(err->message), "decoder stopped at row %d of %d", y + done, y + h);
            jpeg_destroy_decompress(&cinfo);
            return -1;
        }
        done += (int)got;
    }
    /* The rows below the region are never decoded: abort instead of finishing the image. */
    jpeg_abort_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    if (strict && err->warnings > 0) return -1;
    result->x0 = (int)xoffset;
    result->width = (int)width;
    result->height = h;
    return 0;
}

static PyObject *decode_region(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    int denom, x, y, w, h, strict = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iiiiiw*|p", &data, &denom, &x, &y, &w, &h, &out, &strict)) return NULL;
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        PyErr_Format(PyExc_ValueError, "denom must be 1, 2, 4 or 8, got %d", denom);
        return NULL;
    }
    stave_error_mgr err;
    region_result result = {0, 0, 0};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = decode_region_nogil((const unsigned char *)data.buf, (size_t)data.len, denom, x, y, w, h,
                             (unsigned char *)out.buf, (size_t)out.len, strict, &err, &result);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (rc != 0) {
        PyErr_Format(PyExc_ValueError, "%s", err.message[0] ? err.message : "JPEG decode failed");
        return NULL;
    }
    return Py_BuildValue("iii", result.x0, result.width, result.height);
}

static void planar_normalize_nogil(const unsigned char *src, float *dst, Py_ssize_t height, Py_ssize_t width,
                                   const float *scale, const float *shift, int flip) {
    /* One table per channel: 768 floats stay in L1, and a load replaces the convert, multiply and
     * subtract; the values are bit-identical to torch's (v * scale - shift) in float32. */
    float table[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) table[c][v] = (float)v * scale[c] - shift[c];
    Py_ssize_t plane = height * width;
    for (Py_ssize_t r = 0; r < height; r++) {
        const unsigned char *row = src + r * width * 3;
        float *restrict d0 = dst + r * width, *restrict d1 = d0 + plane, *restrict d2 = d1 + plane;
        if (flip) {
            for (Py_ssize_t i = 0; i < width; i++) {
                const unsigned char *p = row + (width - 1 - i) * 3;
                d0[i] = table[0][p[0]];
                d1[i] = table[1][p[1]];
                d2[i] = table[2][p[2]];
            }
        } else {
            for (Py_ssize_t i = 0; i < width; i++) {
                const unsigned char *p = row + i * 3;
                d0[i] = table[0][p[0]];
                d1[i] = table[1][p[1]];
                d2[i] = table[2][p[2]];
            }
        }
    }
}

static PyObject *planar_normalize(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    Py_ssize_t height, width;
    float scale[3], shift[3];
    int flip;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*w*nn(fff)(fff)p", &src, &dst, &height, &width, &scale[0], &scale[1], &scale[2],
                          &shift[0], &shift[1], &shift[2], &flip))
        return NULL;
    /* Sizes checked in a way that cannot overflow: a plane of more than 2^40 pixels is refused first. */
    if (height <= 0 || width <= 0 || height > ((Py_ssize_t)1 << 20) || width > ((Py_ssize_t)1 << 20) ||
        src.len < height * width * 3 || dst.len < height * width * 3 * (Py_ssize_t)sizeof(float)) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_Format(PyExc_ValueError, "buffers too small for a %zdx%zd image", height, width);
        return NULL;
    }
    if (((uintptr_t)dst.buf) % sizeof(float) != 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        PyErr_SetString(PyExc_ValueError, "dst is not aligned for float32");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    planar_normalize_nogil((const unsigned char *)src.buf, (float *)dst.buf, height, width, scale, shift, flip);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS,
     "decode_region(data, denom, x, y, w, h, out, strict=True) -> (x0, width, height): decode a region of a JPEG as RGB."},
    {"planar_normalize", planar_normalize, METH_VARARGS,
     "planar_normalize(src, dst, height, width, scale, shift, flip): HWC uint8 -> CHW float32 normalized."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpeg_region",
    "Partial JPEG decode (libjpeg-turbo) and a fused uint8 -> normalized float32 planar copy.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jpeg_region(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyModule_AddIntConstant(m, "JPEG_LIB_VERSION", JPEG_LIB_VERSION);
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
    PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION_NUMBER", LIBJPEG_TURBO_VERSION_NUMBER);
#endif
    PyModule_AddIntConstant(m, "MAX_SCANS", MAX_SCANS);
    return m;
}
