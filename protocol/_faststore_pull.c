/* A pull's walk over consume-queue units (rmq.protocol._faststore, issue #30): both calls of the mmap
 * store's StoreReader run the one loop of ``walk`` below, the pure loop of StoreReader._scan compiled.
 *
 *   scan(units, files, first_idx, fsize, offset, max_count, max_bytes, match_tags)
 *       -> (scanned, messages, queue_offsets, total, removing) or None
 *       ``match_tags``: a Python callable on each unit's tags code, or None for everything; a bytes
 *       object and a queue offset per record found (the kernel's GetResult).
 *
 *   pull_join(units, files, first_idx, fsize, offset, max_count, max_bytes, codes)
 *       -> (scanned, body, count, total, removing, last_phys) or None
 *       ``codes``: None (everything) or a frozenset of tag hash codes matched as the TAG filter's
 *       match_tags_code does (a code, or the low 32 bits of a code wider than an int, in the set); the
 *       records found copied into one bytes ``body`` (the pull answer's body), no Python object per
 *       message; ``last_phys`` is the PHYSICAL_OFFSET field of the last record (-1: none).
 *
 * Each 20-byte unit (offset, size, tags code) that matches points at a record that is taken from the
 * commitlog segment (``files``: MappedFile objects with start, wrote, mm) holding it, within the
 * segment's written bytes; a unit past them marks the rest of that segment gone (MESSAGE_WAS_REMOVING
 * when nothing was found yet), a hole's filler unit is stepped over. None, with nothing done, for
 * anything the pure loop must decide (a unit pointing outside its segment's mapping, a segment's fields
 * of an unexpected type, a code that is not an int64, more segments than one call holds).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_faststore.h"

#define MAX_SEGS 8

typedef struct {
    PyObject *file; /* borrowed from ``files`` */
    Py_buffer buf;
    long long start, wrote;
} Seg;

typedef struct {
    int seg;
    long long p, size, unit;
} Span;

typedef struct {
    /* in */
    const unsigned char *u;
    Py_ssize_t nunits;
    PyObject *files, *match; /* match: a callable, or NULL with codes */
    const long long *codes;  /* sorted; NULL: everything (with match NULL) */
    Py_ssize_t ncodes;
    long long first_idx, fsize, offset, max_count, max_bytes;
    /* out */
    Span *spans;
    Py_ssize_t i, n;
    long long total;
    int removing;
    Seg segs[MAX_SEGS];
    int nsegs;
} Walk;

static PyObject *s_start, *s_wrote, *s_mm;

static inline long long rd_be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int k = 0; k < n; k++) v = (v << 8) | p[k];
    return n == 4 ? (long long)(int32_t)(uint32_t)v : (long long)v;
}

static inline long long floor_div(long long a, long long b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

static int cmp_ll(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static int has_code(const Walk *w, long long c) {
    return bsearch(&c, w->codes, (size_t)w->ncodes, sizeof(long long), cmp_ll) != NULL;
}

/* 1: the unit's tags code matches; 0: it does not; -1: the callable failed. */
static int matches(const Walk *w, long long tags) {
    if (w->match != NULL) {
        PyObject *t = PyLong_FromLongLong(tags);
        PyObject *r = t == NULL ? NULL : PyObject_CallOneArg(w->match, t);
        Py_XDECREF(t);
        if (r == NULL) return -1;
        int yes = PyObject_IsTrue(r);
        Py_DECREF(r);
        return yes;
    }
    if (w->codes == NULL || has_code(w, tags)) return 1;
    return (tags < INT32_MIN || tags > INT32_MAX) && has_code(w, (long long)(int32_t)(uint32_t)tags);
}

/* The index into w->segs of file ``f`` (its buffer taken on first use); -2 when the pure loop decides. */
static int seg_of(Walk *w, PyObject *f) {
    for (int k = 0; k < w->nsegs; k++)
        if (w->segs[k].file == f) return k;
    if (w->nsegs == MAX_SEGS) return -2;
    Seg *s = &w->segs[w->nsegs];
    PyObject *mm = PyObject_GetAttr(f, s_mm);
    int got = mm != NULL && attr_ll(f, s_start, &s->start) && attr_ll(f, s_wrote, &s->wrote)
              && PyObject_GetBuffer(mm, &s->buf, PyBUF_SIMPLE) == 0;
    Py_XDECREF(mm);
    if (!got) {
        PyErr_Clear();
        return -2;
    }
    s->file = f;
    return w->nsegs++;
}

/* The loop: 1 done (w->spans[0..n) found), 0 the pure loop decides, -1 a Python error. */
static int walk(Walk *w) {
    long long skip_below = INT64_MIN;
    int skip_all = 0; /* skip_below past INT64_MAX: a unit in the last representable segment (a corrupt unit) */
    Py_ssize_t nfiles = PyList_GET_SIZE(w->files);
    for (w->i = 0; w->i < w->nunits; w->i++) {
        const unsigned char *e = w->u + w->i * 20;
        long long phys = rd_be(e, 8), size = rd_be(e + 8, 4), tags = rd_be(e + 12, 8);
        if (skip_all || phys < skip_below) continue;
        if (w->n && (w->n >= w->max_count || w->total + size > w->max_bytes)) break;
        int m = matches(w, tags);
        if (m < 0) return -1;
        if (!m) continue;
        long long fi = floor_div(phys, w->fsize) - w->first_idx;
        PyObject *f = fi >= 0 && fi < nfiles ? PyList_GET_ITEM(w->files, fi) : NULL;
        int k = f != NULL ? seg_of(w, f) : -1;
        if (k == -2) return 0;
        const Seg *s = k >= 0 ? &w->segs[k] : NULL;
        long long p = s != NULL ? phys - s->start : 0;
        if (s == NULL || p + size > s->wrote) {
            if (size == 0x7FFFFFFF && phys == 0) continue; /* a hole's filler unit */
            if (!w->n) w->removing = 1;
            long long seg_no = floor_div(phys, w->fsize);
            if (seg_no >= INT64_MAX / w->fsize) skip_all = 1; /* the next segment's start is past INT64_MAX */
            else skip_below = (seg_no + 1) * w->fsize;
            continue;
        }
        if (p < 0 || size < 0 || p + size > s->buf.len) return 0; /* the pure loop's own slicing rules */
        w->spans[w->n++] = (Span){k, p, size, w->i};
        w->total += size;
        skip_below = INT64_MIN;
        skip_all = 0;
    }
    return 1;
}

/* The common arguments of both calls into ``w``; 0 on a Python error (set). */
static int walk_args(PyObject *args, const char *fmt, Walk *w, Py_buffer *units, PyObject **last) {
    memset(w, 0, sizeof(*w));
    if (!PyArg_ParseTuple(args, fmt, units, &PyList_Type, &w->files, &w->first_idx, &w->fsize, &w->offset, &w->max_count,
                          &w->max_bytes, last))
        return 0;
    w->u = units->buf;
    w->nunits = units->len / 20;
    w->spans = PyMem_Malloc(sizeof(Span) * (size_t)(w->nunits ? w->nunits : 1));
    if (w->spans == NULL) {
        PyBuffer_Release(units);
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

static void walk_free(Walk *w, Py_buffer *units) {
    for (int k = 0; k < w->nsegs; k++) PyBuffer_Release(&w->segs[k].buf);
    PyMem_Free(w->spans);
    PyBuffer_Release(units);
}

/* fsize or the units' length the pure loop would trip over: it decides (its own error) */
static int odd_input(const Walk *w, const Py_buffer *units) { return w->fsize <= 0 || units->len % 20 != 0; }

PyObject *pull_scan(PyObject *self, PyObject *args) {
    Walk w;
    Py_buffer units;
    PyObject *match, *msgs = NULL, *qoffs = NULL, *result = NULL;
    if (!walk_args(args, "y*O!LLLLLO", &w, &units, &match)) return NULL;
    w.match = match == Py_None ? NULL : match;
    int r = odd_input(&w, &units) ? 0 : walk(&w);
    if (r <= 0) {
        result = r == 0 ? Py_NewRef(Py_None) : NULL;
        goto done;
    }
    msgs = PyList_New(w.n);
    qoffs = PyList_New(w.n);
    if (msgs == NULL || qoffs == NULL) goto done;
    for (Py_ssize_t j = 0; j < w.n; j++) {
        const Span *sp = &w.spans[j];
        PyObject *rec = PyBytes_FromStringAndSize((const char *)w.segs[sp->seg].buf.buf + sp->p, (Py_ssize_t)sp->size);
        PyObject *q = PyLong_FromLongLong(w.offset + sp->unit);
        if (rec == NULL || q == NULL) {
            Py_XDECREF(rec);
            Py_XDECREF(q);
            goto done;
        }
        PyList_SET_ITEM(msgs, j, rec);
        PyList_SET_ITEM(qoffs, j, q);
    }
    result = Py_BuildValue("(nOOLO)", w.i, msgs, qoffs, w.total, w.removing ? Py_True : Py_False);
done:
    Py_XDECREF(msgs);
    Py_XDECREF(qoffs);
    walk_free(&w, &units);
    return result;
}

/* ``codes`` (a set of ints) sorted into a new array at *out (NULL for None); 0: not all int64 (or no memory). */
static int code_array(PyObject *codes, long long **out, Py_ssize_t *n) {
    *out = NULL;
    *n = 0;
    if (codes == Py_None) return 1;
    if (!PyAnySet_Check(codes)) return 0;
    Py_ssize_t size = PySet_GET_SIZE(codes), k = 0;
    long long *a = PyMem_Malloc(sizeof(long long) * (size_t)(size ? size : 1));
    if (a == NULL) return 0;
    Py_ssize_t pos = 0;
    PyObject *key;
    Py_hash_t hash;
    while (_PySet_NextEntry(codes, &pos, &key, &hash)) {
        if (k == size || !int_in(key, INT64_MIN, INT64_MAX, &a[k])) {
            PyMem_Free(a);
            return 0;
        }
        k++;
    }
    qsort(a, (size_t)k, sizeof(long long), cmp_ll);
    *out = a;
    *n = k;
    return 1;
}

PyObject *pull_join(PyObject *self, PyObject *args) {
    Walk w;
    Py_buffer units;
    PyObject *codes, *result = NULL;
    long long *arr = NULL;
    if (!walk_args(args, "y*O!LLLLLO", &w, &units, &codes)) return NULL;
    if (odd_input(&w, &units) || !code_array(codes, &arr, &w.ncodes)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    w.codes = arr;
    if (codes == Py_None) w.codes = NULL;
    else if (w.ncodes == 0) { /* an empty set matches nothing: bsearch wants a real array */
        static const long long none_code[1] = {0};
        w.codes = none_code;
    }
    int r = walk(&w);
    if (r > 0 && w.n && w.spans[w.n - 1].size < 36) r = 0; /* no PHYSICAL_OFFSET to read: the pure path's */
    if (r <= 0) {
        result = r == 0 ? Py_NewRef(Py_None) : NULL;
        goto done;
    }
    PyObject *body = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)w.total);
    if (body == NULL) goto done;
    char *o = PyBytes_AS_STRING(body);
    long long last_phys = -1;
    for (Py_ssize_t j = 0; j < w.n; j++) {
        const Span *sp = &w.spans[j];
        const unsigned char *rec = (const unsigned char *)w.segs[sp->seg].buf.buf + sp->p;
        memcpy(o, rec, (size_t)sp->size);
        o += sp->size;
        if (j == w.n - 1) last_phys = rd_be(rec + 28, 8);
    }
    result = Py_BuildValue("(nNnLOL)", w.i, body, w.n, w.total, w.removing ? Py_True : Py_False, last_phys);
done:
    PyMem_Free(arr);
    walk_free(&w, &units);
    return result;
}

int pull_init(void) {
    PyObject **slots[] = {&s_start, &s_wrote, &s_mm}; /* MappedFile's attributes the walk reads */
    const char *names[] = {"start", "wrote", "mm"};
    for (int k = 0; k < 3; k++)
        if ((*slots[k] = PyUnicode_InternFromString(names[k])) == NULL) return -1;
    return 0;
}
