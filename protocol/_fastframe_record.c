/* rmq.protocol._fastframe, part 2: the compiled stored-record decoder for the client (issue #30).
 *
 * decode_records(data, decompress) is rmq.protocol.message.decode_messages in one C call per pull body:
 * it walks the records laid back to back in ``data`` and builds each MessageExt by writing its slots
 * directly (tp_alloc + the member offsets found by configure_records), properties left raw exactly as
 * the pure decoder leaves them. Any record it does not take on itself -- a truncated or inconsistent
 * one, a topic that is not UTF-8, a COMPRESSED body to inflate -- goes to the pure decoder of one
 * record (message._decode_one), so values and error messages stay the pure path's by construction.
 * Host strings come from the pure path's own renderer (message._host_str), remembered here by their
 * raw bytes: a pull body has one store host and few born hosts.
 *
 * Every read of peer bytes is bounds-checked against the end of the record, itself within ``data``.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MIN_RECORD 91 /* IPv4 hosts, empty body, topic and properties */
#define SF_COMPRESSED 0x1
#define SF_BORN_V6 0x10
#define SF_STORE_V6 0x20

enum {
    M_TOPIC, M_BODY, M_FLAG, M_PROPS, M_PROPS_RAW, M_SYS_FLAG, M_QUEUE_ID, M_QUEUE_OFFSET, M_COMMIT_LOG_OFFSET,
    M_STORE_SIZE, M_BODY_CRC, M_BORN_TIMESTAMP, M_BORN_HOST, M_STORE_TIMESTAMP, M_STORE_HOST, M_RECONSUME_TIMES,
    M_PREPARED, M_STORE_HOST_RAW, N_MSG
};
static const char *const msg_slot_names[N_MSG] = {
    "topic", "body", "flag", "_props", "_props_raw", "sys_flag", "queue_id", "queue_offset", "commit_log_offset",
    "store_size", "body_crc", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
    "prepared_transaction_offset", "store_host_raw",
};

static PyTypeObject *msg_type = NULL; /* MessageExt */
static Py_ssize_t msg_off[N_MSG];
static PyObject *slow_record = NULL; /* (data, start, n, decompress) -> (msg, end): message._decode_one */
static PyObject *host_str = NULL;    /* raw host bytes -> "ip:port": message._host_str */

/* raw host bytes -> (bytes, str), a few remembered across calls (replaced round robin) */
#define HOSTS 8
typedef struct {
    unsigned char raw[20];
    Py_ssize_t len;
    PyObject *bytes, *str;
} HostEntry;
static HostEntry hosts[HOSTS];
static int host_next = 0;

/* the last topic decoded: its UTF-8 bytes and str */
static unsigned char last_topic[255];
static Py_ssize_t last_topic_len = -1;
static PyObject *last_topic_str = NULL;

int slot_offsets(PyTypeObject *t, const char *const *names, int n, Py_ssize_t *off, const char *what); /* _fastframe.c */

static inline int32_t rd32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int64_t rd64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)rd32(p) << 32) | (uint32_t)rd32(p + 4));
}

static void hosts_clear(void) {
    for (int i = 0; i < HOSTS; i++) {
        Py_CLEAR(hosts[i].bytes);
        Py_CLEAR(hosts[i].str);
        hosts[i].len = 0;
    }
    last_topic_len = -1;
    Py_CLEAR(last_topic_str);
}

/* The remembered entry for host bytes ``raw`` (8 or 20 of them), rendered by host_str on a miss; NULL on error. */
static HostEntry *host(const unsigned char *raw, Py_ssize_t len) {
    for (int i = 0; i < HOSTS; i++)
        if (hosts[i].len == len && memcmp(hosts[i].raw, raw, (size_t)len) == 0) return &hosts[i];
    PyObject *b = PyBytes_FromStringAndSize((const char *)raw, len);
    if (b == NULL) return NULL;
    PyObject *s = PyObject_CallOneArg(host_str, b);
    if (s == NULL) {
        Py_DECREF(b);
        return NULL;
    }
    HostEntry *e = &hosts[host_next];
    host_next = (host_next + 1) % HOSTS;
    Py_XSETREF(e->bytes, b);
    Py_XSETREF(e->str, s);
    memcpy(e->raw, raw, (size_t)len);
    e->len = len;
    return e;
}

/* The topic str of UTF-8 ``s``; NULL with no error set when it is not UTF-8 (the pure path says why). */
static PyObject *topic_str(const unsigned char *s, Py_ssize_t n) {
    if (n == last_topic_len && memcmp(last_topic, s, (size_t)n) == 0) return Py_NewRef(last_topic_str);
    PyObject *t = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (t == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
        return NULL;
    }
    memcpy(last_topic, s, (size_t)n);
    last_topic_len = n;
    Py_XSETREF(last_topic_str, Py_NewRef(t));
    return t;
}

/* One record at ``start`` into ``out``: the new position, 0 when the pure decoder must take this record,
 * -1 on error. ``d``..``d + n`` is the body; the caller checked start < n. */
static Py_ssize_t fast_one(const unsigned char *d, Py_ssize_t start, Py_ssize_t n, int decompress, PyObject *out) {
    if (n - start < MIN_RECORD) return 0;
    const unsigned char *r = d + start;
    int32_t total = rd32(r);
    if (total < MIN_RECORD || total > n - start) return 0;
    Py_ssize_t end = total; /* offsets below are relative to the record */
    int32_t sysflag = rd32(r + 36);
    if (decompress && (sysflag & SF_COMPRESSED)) return 0;
    Py_ssize_t bl = (sysflag & SF_BORN_V6) ? 20 : 8, sl = (sysflag & SF_STORE_V6) ? 20 : 8;
    Py_ssize_t born_at = 48, store_at = 48 + bl + 8, p = store_at + sl;
    if (p + 16 > end) return 0;
    int32_t body_len = rd32(r + p + 12);
    p += 16;
    if (body_len < 0 || p + body_len + 1 > end) return 0;
    Py_ssize_t body_at = p;
    p += body_len;
    Py_ssize_t topic_len = r[p];
    p += 1;
    if (p + topic_len + 2 > end) return 0;
    Py_ssize_t topic_at = p;
    p += topic_len;
    Py_ssize_t prop_len = ((Py_ssize_t)r[p] << 8) | r[p + 1];
    p += 2;
    if (p + prop_len != end) return 0;

    PyObject *topic = topic_str(r + topic_at, topic_len);
    if (topic == NULL) return PyErr_Occurred() ? -1 : 0;
    /* references taken at once: a later miss (Python code, maybe another thread's call) may replace an entry */
    HostEntry *born = host(r + born_at, bl);
    PyObject *born_str = born == NULL ? NULL : Py_NewRef(born->str);
    HostEntry *store = born == NULL ? NULL : host(r + store_at, sl);
    if (store == NULL) {
        Py_DECREF(topic);
        Py_XDECREF(born_str);
        return -1;
    }
    PyObject *store_str = Py_NewRef(store->str), *store_raw = Py_NewRef(store->bytes);
    PyObject *v[N_MSG];
    v[M_TOPIC] = topic;
    v[M_BODY] = PyBytes_FromStringAndSize((const char *)r + body_at, body_len);
    v[M_FLAG] = PyLong_FromLong(rd32(r + 16));
    if (prop_len) {
        v[M_PROPS] = Py_NewRef(Py_None);
        v[M_PROPS_RAW] = PyBytes_FromStringAndSize((const char *)r + p, prop_len);
    } else {
        v[M_PROPS] = PyDict_New();
        v[M_PROPS_RAW] = Py_NewRef(Py_None);
    }
    v[M_SYS_FLAG] = PyLong_FromLong(sysflag);
    v[M_QUEUE_ID] = PyLong_FromLong(rd32(r + 12));
    v[M_QUEUE_OFFSET] = PyLong_FromLongLong(rd64(r + 20));
    v[M_COMMIT_LOG_OFFSET] = PyLong_FromLongLong(rd64(r + 28));
    v[M_STORE_SIZE] = PyLong_FromLong(total);
    v[M_BODY_CRC] = PyLong_FromLong(rd32(r + 8));
    v[M_BORN_TIMESTAMP] = PyLong_FromLongLong(rd64(r + 40));
    v[M_BORN_HOST] = born_str;
    v[M_STORE_TIMESTAMP] = PyLong_FromLongLong(rd64(r + 48 + bl));
    v[M_STORE_HOST] = store_str;
    v[M_RECONSUME_TIMES] = PyLong_FromLong(rd32(r + store_at + sl));
    v[M_PREPARED] = PyLong_FromLongLong(rd64(r + store_at + sl + 4));
    v[M_STORE_HOST_RAW] = store_raw;
    PyObject *msg = NULL;
    int ok = 1;
    for (int i = 0; i < N_MSG; i++) ok &= v[i] != NULL;
    if (ok) msg = msg_type->tp_alloc(msg_type, 0);
    if (msg == NULL) {
        for (int i = 0; i < N_MSG; i++) Py_XDECREF(v[i]);
        return -1;
    }
    for (int i = 0; i < N_MSG; i++) *(PyObject **)((char *)msg + msg_off[i]) = v[i];
    int rc = PyList_Append(out, msg);
    Py_DECREF(msg);
    return rc < 0 ? -1 : start + end;
}

/* The pure decoder of the record at ``start``: appends its message, returns the next position (-1 on error). */
static Py_ssize_t slow_one(PyObject *data, Py_ssize_t start, Py_ssize_t n, int decompress, PyObject *out) {
    PyObject *res = PyObject_CallFunction(slow_record, "OnnO", data, start, n, decompress ? Py_True : Py_False);
    if (res == NULL) return -1;
    Py_ssize_t next = -1;
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
        PyErr_SetString(PyExc_TypeError, "the pure record decoder must return (message, end)");
    } else {
        next = PyLong_AsSsize_t(PyTuple_GET_ITEM(res, 1));
        if (next == -1 && PyErr_Occurred()) {
            next = -1;
        } else if (next <= start || next > n) {
            PyErr_SetString(PyExc_ValueError, "the pure record decoder did not advance within the body");
            next = -1;
        } else if (PyList_Append(out, PyTuple_GET_ITEM(res, 0)) < 0) {
            next = -1;
        }
    }
    Py_DECREF(res);
    return next;
}

const char decode_records_doc[] = PyDoc_STR(
"decode_records(data, decompress) -> list[MessageExt]: rmq.protocol.message.decode_messages of bytes, compiled.");

PyObject *decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode_records(data: bytes, decompress: bool)");
        return NULL;
    }
    if (msg_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastframe.configure_records() was not called");
        return NULL;
    }
    int decompress = PyObject_IsTrue(args[1]);
    if (decompress < 0) return NULL;
    PyObject *data = args[0];
    const unsigned char *d = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), pos = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    while (pos < n) {
        Py_ssize_t next = fast_one(d, pos, n, decompress, out);
        if (next == 0) next = slow_one(data, pos, n, decompress, out);
        if (next < 0) {
            Py_DECREF(out);
            return NULL;
        }
        pos = next;
    }
    return out;
}

const char configure_records_doc[] = PyDoc_STR(
"configure_records(message_type, slow_record, host_str)\n\n"
"Bind the MessageExt class (its __slots__ are written directly: exactly the 18 this decoder knows), the\n"
"pure decoder of one record, called as slow_record(data, start, n, decompress) -> (message, end), and the\n"
"pure host renderer (raw host bytes -> \"ip:port\"). TypeError when the class is not laid out as expected.");

PyObject *configure_records(PyObject *self, PyObject *args) {
    PyObject *type, *slow, *hs;
    if (!PyArg_ParseTuple(args, "O!OO:configure_records", &PyType_Type, &type, &slow, &hs)) return NULL;
    PyTypeObject *t = (PyTypeObject *)type;
    if (t->tp_itemsize != 0 || t->tp_alloc == NULL || t->tp_new != PyBaseObject_Type.tp_new || t->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "the message type must be a plain class with __slots__ and no __dict__");
        return NULL;
    }
    PyObject *names = PyObject_GetAttrString(type, "__slots__");
    if (names == NULL) return NULL;
    int same = PyTuple_Check(names) && PyTuple_GET_SIZE(names) == N_MSG;
    Py_DECREF(names);
    if (!same) {
        PyErr_Format(PyExc_TypeError, "the message type must have exactly %d slots", N_MSG);
        return NULL;
    }
    Py_ssize_t off[N_MSG];
    if (slot_offsets(t, msg_slot_names, N_MSG, off, "message") < 0) return NULL;
    if (!PyCallable_Check(slow) || !PyCallable_Check(hs)) {
        PyErr_SetString(PyExc_TypeError, "slow_record and host_str must be callable");
        return NULL;
    }
    memcpy(msg_off, off, sizeof off);
    hosts_clear();
    Py_XSETREF(msg_type, (PyTypeObject *)Py_NewRef(type));
    Py_XSETREF(slow_record, Py_NewRef(slow));
    Py_XSETREF(host_str, Py_NewRef(hs));
    Py_RETURN_NONE;
}

const char decode_props_doc[] = PyDoc_STR(
"decode_props(raw: bytes) -> dict: rmq.protocol.common.decode_properties of bytes, compiled.");

/* Split at 0x02, each item at its first 0x01, both sides UTF-8 with U+FFFD for what is not (as the pure
 * path's decode of the whole: neither byte is ever part of a multi-byte sequence); empty names or values
 * are dropped, a later value of a name wins. */
PyObject *decode_props(PyObject *self, PyObject *raw) {
    if (!PyBytes_Check(raw)) {
        PyErr_SetString(PyExc_TypeError, "decode_props(raw: bytes)");
        return NULL;
    }
    const char *s = PyBytes_AS_STRING(raw), *end = s + PyBytes_GET_SIZE(raw);
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    while (s < end) {
        const char *item_end = memchr(s, 0x02, (size_t)(end - s));
        if (item_end == NULL) item_end = end;
        const char *sep = memchr(s, 0x01, (size_t)(item_end - s));
        if (sep != NULL && sep > s && sep + 1 < item_end) {
            PyObject *k = PyUnicode_DecodeUTF8(s, sep - s, "replace");
            PyObject *v = k == NULL ? NULL : PyUnicode_DecodeUTF8(sep + 1, item_end - sep - 1, "replace");
            int rc = v == NULL ? -1 : PyDict_SetItem(out, k, v);
            Py_XDECREF(k);
            Py_XDECREF(v);
            if (rc < 0) {
                Py_DECREF(out);
                return NULL;
            }
        }
        if (item_end == end) break;
        s = item_end + 1;
    }
    return out;
}
