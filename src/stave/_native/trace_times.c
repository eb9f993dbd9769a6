/* stave._trace_times: a trace's event times as exact integer nanoseconds, in C.
 *
 * literal_ns is the JSON decoder's hook for fractional time literals (stave.trace.times): it turns
 * the literal's text into its time in whole nanoseconds, held by a float (exact below 2**53 ns), so
 * an event keeps no text. event_times reads the ``ts`` and ``dur`` of a list of events and turns
 * them into int64 nanoseconds with the rule of stave.trace.times: up to three digits after the dot
 * are whole nanoseconds, a fourth rounds half away from zero, the rest are ignored; |time| >=
 * MAX_TIME_US microseconds is not a time. It reads only what it can read exactly (a Python int in
 * microseconds, a float of nanoseconds from literal_ns, text of the form -?[0-9]+(.[0-9]+)?, or
 * None); for anything else it returns None and the caller takes the Python path, so both paths give
 * the same numbers by construction.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* 2**62 ns from the epoch (year 2116), in microseconds: as in stave.trace.times. */
#define MAX_TIME_US (((int64_t)1 << 62) / 1000)
/* More integer digits than this cannot be below MAX_TIME_US (4.6e15 has 16). */
#define MAX_INT_DIGITS 16

enum { OK = 0, INVALID = 1, OTHER = 2 };

/* The text of a number literal -?[0-9]+(.[0-9]+)? to ns (see value_ns). */
static int text_ns(const unsigned char *s, Py_ssize_t n, int64_t *ns);

/* One value to ns. Returns OK (ns set), INVALID (not a usable time: ns 0) or OTHER (a spelling this
 * module does not read: the caller falls back to Python). A value is None or a Python int or str
 * (the decoder's), or a float of whole nanoseconds made by literal_ns. */
static int value_ns(PyObject *v, int none_is_zero, int64_t *ns) {
    *ns = 0;
    if (v == Py_None) {
        /* No duration is a zero one (``e.dur or 0``); no timestamp is not a time. */
        return none_is_zero ? OK : INVALID;
    }
    if (PyFloat_CheckExact(v)) {
        /* Only literal_ns makes floats here: whole nanoseconds, exact below 2**53. */
        *ns = (int64_t)PyFloat_AS_DOUBLE(v);
        return OK;
    }
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) {
            return INVALID;
        }
        if (x == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return OTHER;
        }
        if (x >= MAX_TIME_US || x <= -MAX_TIME_US) {
            return INVALID;
        }
        *ns = (int64_t)x * 1000;
        return OK;
    }
    if (!PyUnicode_CheckExact(v) || PyUnicode_KIND(v) != PyUnicode_1BYTE_KIND) {
        return OTHER;
    }
    return text_ns(PyUnicode_1BYTE_DATA(v), PyUnicode_GET_LENGTH(v), ns);
}

static int text_ns(const unsigned char *s, Py_ssize_t n, int64_t *ns) {
    Py_ssize_t i = 0;
    int neg = 0;
    if (i < n && s[i] == '-') {
        neg = 1;
        i++;
    }
    Py_ssize_t int_start = i;
    int64_t whole = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (i - int_start >= MAX_INT_DIGITS) {
            return OTHER; /* leading zeros or an absurd value: the Python path decides */
        }
        whole = whole * 10 + (s[i] - '0');
        i++;
    }
    if (i == int_start) {
        return OTHER;
    }
    int64_t sub = 0;
    if (i < n) {
        if (s[i] != '.') {
            return OTHER;
        }
        i++;
        Py_ssize_t frac_start = i;
        int digits[4] = {0, 0, 0, 0};
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (i - frac_start < 4) {
                digits[i - frac_start] = s[i] - '0';
            }
            i++;
        }
        if (i == frac_start || i != n) {
            return OTHER;
        }
        sub = digits[0] * 100 + digits[1] * 10 + digits[2] + (digits[3] >= 5);
    }
    if (whole >= MAX_TIME_US) {
        return INVALID;
    }
    *ns = neg ? -(whole * 1000 + sub) : whole * 1000 + sub;
    return OK;
}

/* Floats hold integers exactly up to 2**53: a time in ns below it travels as a float. */
#define FLOAT_EXACT_NS ((int64_t)1 << 53)

/* literal_ns(text) -> float or text: the decoder's hook for a fractional literal. A plain literal
 * becomes its time in whole nanoseconds as a float (24 bytes, like the float a plain decode would
 * make, and exact); anything else (or a time past 2**53 ns) stays the text. */
static PyObject *literal_ns(PyObject *self, PyObject *text) {
    (void)self;
    if (PyUnicode_CheckExact(text) && PyUnicode_KIND(text) == PyUnicode_1BYTE_KIND) {
        int64_t ns;
        if (text_ns(PyUnicode_1BYTE_DATA(text), PyUnicode_GET_LENGTH(text), &ns) == OK && ns < FLOAT_EXACT_NS &&
            ns > -FLOAT_EXACT_NS) {
            return PyFloat_FromDouble((double)ns);
        }
    }
    Py_INCREF(text);
    return text;
}

/* event_times(events) -> (start, ts_ok, dur, dur_ok) as bytes (int64 ns, bool) or None. */
static PyObject *event_times(PyObject *self, PyObject *arg) {
    (void)self;
    static PyObject *ts_name = NULL, *dur_name = NULL;
    if (ts_name == NULL) {
        ts_name = PyUnicode_InternFromString("ts");
        dur_name = PyUnicode_InternFromString("dur");
        if (ts_name == NULL || dur_name == NULL) {
            return NULL;
        }
    }
    if (!PyList_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "event_times() takes a list of events");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(arg);
    PyObject *start = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *dur = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *ts_ok = PyBytes_FromStringAndSize(NULL, n);
    PyObject *dur_ok = PyBytes_FromStringAndSize(NULL, n);
    if (start == NULL || dur == NULL || ts_ok == NULL || dur_ok == NULL) {
        goto fail;
    }
    int64_t *start_p = (int64_t *)PyBytes_AS_STRING(start), *dur_p = (int64_t *)PyBytes_AS_STRING(dur);
    char *ts_ok_p = PyBytes_AS_STRING(ts_ok), *dur_ok_p = PyBytes_AS_STRING(dur_ok);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *e = PyList_GET_ITEM(arg, k);
        for (int which = 0; which < 2; which++) {
            PyObject *v = PyObject_GetAttr(e, which ? dur_name : ts_name);
            if (v == NULL) {
                goto fail;
            }
            int64_t ns;
            int r = value_ns(v, which, &ns);
            Py_DECREF(v);
            if (r == OTHER) {
                Py_DECREF(start);
                Py_DECREF(dur);
                Py_DECREF(ts_ok);
                Py_DECREF(dur_ok);
                Py_RETURN_NONE;
            }
            if (which) {
                dur_p[k] = ns;
                dur_ok_p[k] = (char)(r == OK);
            } else {
                start_p[k] = ns;
                ts_ok_p[k] = (char)(r == OK);
            }
        }
    }
    return Py_BuildValue("(NNNN)", start, ts_ok, dur, dur_ok);
fail:
    Py_XDECREF(start);
    Py_XDECREF(dur);
    Py_XDECREF(ts_ok);
    Py_XDECREF(dur_ok);
    return NULL;
}

static PyMethodDef methods[] = {
    {"literal_ns", literal_ns, METH_O,
     "literal_ns(text) -> float | str: a fractional time literal as whole nanoseconds (a float, exact), or the "
     "text itself when it is not a plain literal below 2**53 ns."},
    {"event_times", event_times, METH_O,
     "event_times(events) -> (start_ns, ts_ok, dur_ns, dur_ok) as bytes (int64, bool), or None when some "
     "value needs the Python path (stave.trace.times)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_trace_times",
                                    "Trace times as exact integer nanoseconds (stave.trace.times).", -1, methods};

PyMODINIT_FUNC PyInit__trace_times(void) { return PyModule_Create(&module); }
