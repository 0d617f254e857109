/* rmq.protocol._faststore, the consume-queue unit writer of the reput (issue #30):
 *
 *   cq_put(requests, i, queues, last_ts) -> (i, last_ts)
 *       the loop of ConsumeQueueDispatcher.dispatch over requests[i:] (DispatchRequests): prepared and
 *       rolled-back transaction records are skipped, replays (a record that ends at or below the queue's
 *       max_phys) are ignored, and every other record's unit (commitlog offset, size, tags code; 20
 *       bytes, big-endian) is written at the end of its queue's last mapped file, whose ``wrote`` and
 *       the queue's ``max_phys`` then move on, as ConsumeQueue.put does. ``last_ts`` is the store
 *       timestamp of the last record put (or the value given when none was).
 *
 *       It stops, and returns the index of the request, wherever ConsumeQueue.put has more to decide:
 *       a queue that does not exist yet, a queue without files or whose last file is full (file roll),
 *       a queue offset that is not the queue's next one (the gap and misplacement rules of _place and
 *       _fill), a unit past the file's reserved disk, and anything outside the common case (another
 *       type, a field outside its range, a mapping shorter than the file says). The dispatcher's pure
 *       loop takes that one request and calls again after it, so those rules are the pure path's by
 *       construction. A unit is written only when its 20 bytes lie inside the file's mapping, below
 *       both the file's size and its reserved bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_faststore.h"

#define UNIT 20

enum { A_MAX_PHYS, A_FILES, A_START, A_WROTE, A_SIZE, A_RESERVED, A_MM, N_NAMES };
static const char *const cq_names[N_NAMES] = {"max_phys", "files", "start", "wrote", "size", "reserved", "mm"};
static PyObject *cq_attr[N_NAMES]; /* interned by cq_init */

int cq_init(void) {
    for (int k = 0; k < N_NAMES; k++)
        if ((cq_attr[k] = PyUnicode_InternFromString(cq_names[k])) == NULL) return -1;
    return 0;
}

static int set_ll(PyObject *o, PyObject *attr, long long v) {
    PyObject *n = PyLong_FromLongLong(v);
    if (n == NULL) return -1;
    int rc = PyObject_SetAttr(o, attr, n);
    Py_DECREF(n);
    return rc;
}

/* The unit at the end of file ``f`` when it is the queue's next offset and fits: 1 written, 0 the pure
 * path decides, -1 error. */
static int write_unit(PyObject *f, long long phys, long long size, long long tags, long long qoff) {
    long long start, wrote, fsize, reserved, here, after;
    if (!attr_ll(f, cq_attr[A_START], &start) || !attr_ll(f, cq_attr[A_WROTE], &wrote) || !attr_ll(f, cq_attr[A_SIZE], &fsize)
        || !attr_ll(f, cq_attr[A_RESERVED], &reserved))
        return 0;
    if (wrote < 0 || wrote >= fsize || __builtin_add_overflow(start, wrote, &here) || here != qoff * UNIT)
        return 0;
    if (__builtin_add_overflow(wrote, UNIT, &after) || after > fsize || after > reserved) return 0;
    PyObject *mm = PyObject_GetAttr(f, cq_attr[A_MM]);
    if (mm == NULL) { PyErr_Clear(); return 0; }
    Py_buffer view;
    if (PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE) < 0) {
        PyErr_Clear();
        Py_DECREF(mm);
        return 0;
    }
    int fits = after <= view.len;
    if (fits) {
        unsigned char *p = (unsigned char *)view.buf + wrote;
        wr_i64(p, phys);
        wr_i32(p + 8, size);
        wr_i64(p + 12, tags);
    }
    PyBuffer_Release(&view);
    Py_DECREF(mm);
    if (!fits) return 0;
    return set_ll(f, cq_attr[A_WROTE], after) < 0 ? -1 : 1;
}

/* The queues' ``files`` lists met in one call: the property (which maps a parked queue and marks it used)
 * runs once per queue and call, as often as the pure loop would need it to have any effect. */
void seen_clear(Seen *seen, int n) {
    for (int k = 0; k < n; k++) {
        Py_DECREF(seen[k].cq);
        Py_DECREF(seen[k].files);
    }
}

/* ConsumeQueue.put for the common case: 1 done (written, or a replay ignored), 0 the pure path decides,
 * -1 error (from the queue's ``files``, which maps a parked queue: raised as the pure path would). */
int cq_put_one(PyObject *cq, long long phys, long long size, long long tags, long long qoff, Seen *seen, int *nseen) {
    long long max_phys, end;
    if (!attr_ll(cq, cq_attr[A_MAX_PHYS], &max_phys) || __builtin_add_overflow(phys, size, &end)) return 0;
    if (end <= max_phys) return 1;
    PyObject *files = NULL;
    for (int k = 0; k < *nseen && files == NULL; k++)
        if (seen[k].cq == cq) files = Py_NewRef(seen[k].files);
    if (files == NULL) {
        files = PyObject_GetAttr(cq, cq_attr[A_FILES]);
        if (files == NULL) return -1;
        if (*nseen < SEEN) {
            seen[*nseen] = (Seen){Py_NewRef(cq), Py_NewRef(files)};
            ++*nseen;
        }
    }
    int rc = 0;
    if (PyList_CheckExact(files) && PyList_GET_SIZE(files) > 0) {
        PyObject *last = Py_NewRef(PyList_GET_ITEM(files, PyList_GET_SIZE(files) - 1));
        rc = write_unit(last, phys, size, tags, qoff);
        Py_DECREF(last);
        if (rc == 1 && set_ll(cq, cq_attr[A_MAX_PHYS], end) < 0) rc = -1;
    }
    Py_DECREF(files);
    return rc;
}

/* The slot ``k`` of request ``r`` as an int in [lo, hi]. */
static inline int req_ll(PyObject *r, int k, long long lo, long long hi, long long *out) {
    PyObject *v = *(PyObject **)((char *)r + req_off[k]);
    return v != NULL && int_in(v, lo, hi, out);
}

PyObject *cq_put(PyObject *self, PyObject *args) {
    PyObject *reqs, *queues, *last_ts;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!nO!O:cq_put", &PyList_Type, &reqs, &i, &PyDict_Type, &queues, &last_ts))
        return NULL;
    if (req_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_faststore.configure() was not given the request type");
        return NULL;
    }
    if (i < 0) {
        PyErr_SetString(PyExc_ValueError, "cq_put: negative start index");
        return NULL;
    }
    Py_INCREF(last_ts);
    Seen seen[SEEN];
    int nseen = 0;
    for (; i < PyList_GET_SIZE(reqs); i++) {
        PyObject *r = PyList_GET_ITEM(reqs, i);
        if (!Py_IS_TYPE(r, req_type)) break;
        long long sys_flag, phys, size, tags, qoff;
        if (!req_ll(r, R_SYSFLAG, INT64_MIN, INT64_MAX, &sys_flag)) break;
        long long tx = sys_flag & 0xC;
        if (tx == 4 || tx == 12) continue; /* prepared / rolled back: never queued */
        PyObject *topic = *(PyObject **)((char *)r + req_off[R_TOPIC]);
        PyObject *qid = *(PyObject **)((char *)r + req_off[R_QID]);
        PyObject *ts = *(PyObject **)((char *)r + req_off[R_TS]);
        if (topic == NULL || !PyUnicode_CheckExact(topic) || qid == NULL || !PyLong_CheckExact(qid) || ts == NULL
            || !req_ll(r, R_PHYS, INT64_MIN, INT64_MAX, &phys) || !req_ll(r, R_SIZE, INT32_MIN, INT32_MAX, &size)
            || !req_ll(r, R_TAGS, INT64_MIN, INT64_MAX, &tags) || !req_ll(r, R_QOFF, 0, INT64_MAX / UNIT, &qoff))
            break;
        PyObject *t = PyDict_GetItemWithError(queues, topic);
        if (t == NULL || !PyDict_CheckExact(t)) {
            if (PyErr_Occurred()) goto error;
            break;
        }
        PyObject *cq = PyDict_GetItemWithError(t, qid);
        if (cq == NULL) {
            if (PyErr_Occurred()) goto error;
            break; /* a new queue: the pure path creates it */
        }
        Py_INCREF(r);
        Py_INCREF(cq);
        int rc = cq_put_one(cq, phys, size, tags, qoff, seen, &nseen);
        Py_DECREF(cq);
        if (rc == 1) Py_SETREF(last_ts, Py_NewRef(ts));
        Py_DECREF(r);
        if (rc < 0) goto error;
        if (rc == 0) break;
    }
    seen_clear(seen, nseen);
    return Py_BuildValue("(nN)", i, last_ts);
error:
    seen_clear(seen, nseen);
    Py_DECREF(last_ts);
    return NULL;
}
