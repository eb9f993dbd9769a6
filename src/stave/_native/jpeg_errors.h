/*
 * Error handling shared by stave's libjpeg calls. Input is untrusted: libjpeg's fatal errors longjmp
 * back to the caller with libjpeg's message, corrupt-data warnings are counted (a strict caller fails
 * on them), and a progress monitor bounds the number of scans (a progressive file with thousands of
 * tiny scans is a known CPU bomb). Header-only: each translation unit gets its own static copies.
 */
#ifndef STAVE_JPEG_ERRORS_H
#define STAVE_JPEG_ERRORS_H

#include <setjmp.h>
#include <stdio.h>

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

static void stave_on_error_exit(j_common_ptr cinfo) {
    stave_error_mgr *err = (stave_error_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void stave_on_emit_message(j_common_ptr cinfo, int level) {
    stave_error_mgr *err = (stave_error_mgr *)cinfo->err;
    if (level < 0) {
        /* A warning: corrupt or truncated data that libjpeg would paper over with grey. Keep the first. */
        if (err->warnings == 0) {
            (*cinfo->err->format_message)(cinfo, err->message);
        }
        err->warnings++;
    }
}

static void stave_on_progress(j_common_ptr cinfo) {
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

/* Points cinfo at err (cleared) with stave's handlers; the caller still has to setjmp(err->jump). */
static void stave_init_errors(struct jpeg_error_mgr **slot, stave_error_mgr *err) {
    *slot = jpeg_std_error(&err->pub);
    err->pub.error_exit = stave_on_error_exit;
    err->pub.emit_message = stave_on_emit_message;
    err->warnings = 0;
    err->message[0] = '\0';
}

#endif
