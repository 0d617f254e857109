/* What the translation units of rmq.protocol._faststore share (_faststore.c: the append, index, reput
 * requests and pull scan; _faststore_cq.c: the consume-queue unit writer). */
#ifndef RMQ_FASTSTORE_H
#define RMQ_FASTSTORE_H

#include <Python.h>
#include <stdint.h>

/* DispatchRequest's slots, by index into req_off (filled by configure()) */
enum { R_TOPIC, R_QID, R_PHYS, R_SIZE, R_TAGS, R_TS, R_QOFF, R_SYSFLAG, R_PREPARED, R_KEYS, R_UNIQ, R_PROPS, N_REQ };
extern PyTypeObject *req_type;
extern Py_ssize_t req_off[N_REQ];

PyObject *cq_put(PyObject *self, PyObject *args);
int cq_init(void);
/* The queues whose ``files`` one call has read already (the property maps a parked queue: once per call). */
#define SEEN 16
typedef struct { PyObject *cq, *files; } Seen;
void seen_clear(Seen *seen, int n);
/* One unit into consume queue ``cq``: 1 done (or a replay ignored), 0 the pure path decides, -1 error. */
int cq_put_one(PyObject *cq, long long phys, long long size, long long tags, long long qoff, Seen *seen, int *nseen);
PyObject *reput_put(PyObject *self, PyObject *args); /* _faststore_reput.c */
PyObject *send_serve(PyObject *self, PyObject *args); /* _faststore_send.c */
int send_init(void);
PyObject *pull_scan(PyObject *self, PyObject *args); /* _faststore_pull.c */
PyObject *pull_join(PyObject *self, PyObject *args);
int pull_init(void);
PyObject *pull_decode(PyObject *self, PyObject *args); /* _faststore_pullreq.c */
PyObject *beat_decode(PyObject *self, PyObject *args); /* _faststore_pullreq.c */
extern PyObject *crc_fn; /* bytes -> int: the pure path's crc32 (configure()) */
extern int32_t magic;

static inline void wr_i32(unsigned char *p, int64_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24); p[1] = (unsigned char)(u >> 16); p[2] = (unsigned char)(u >> 8); p[3] = (unsigned char)u;
}
static inline void wr_i64(unsigned char *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) { p[i] = (unsigned char)u; u >>= 8; }
}

/* Java's String.hashCode continued over code points [a, b) of a str's data, as UTF-16 units (a code point
 * past the BMP as its surrogate pair); 0 at a lone surrogate code point (the pure path decides those). */
static inline int java_hash_on(int kind, const void *data, Py_ssize_t a, Py_ssize_t b, uint32_t *h) {
    uint32_t x = *h;
    for (Py_ssize_t i = a; i < b; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0xD800 && c <= 0xDFFF) return 0;
        if (c > 0xFFFF) {
            c -= 0x10000;
            x = 31 * x + (0xD800 + (c >> 10));
            x = 31 * x + (0xDC00 + (c & 0x3FF));
        } else {
            x = 31 * x + c;
        }
    }
    *h = x;
    return 1;
}

/* An exact int within [lo, hi] into *out; 0 when it is anything else (no exception left set). */
static inline int int_in(PyObject *o, long long lo, long long hi, long long *out) {
    if (!PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
    if (v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* An int attribute (in int64 range) of ``o``; 0 when it is missing or anything else (error cleared). */
static inline int attr_ll(PyObject *o, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) { PyErr_Clear(); return 0; }
    int ok = int_in(v, INT64_MIN, INT64_MAX, out);
    Py_DECREF(v);
    return ok;
}

#endif
