/* The compiled decoder of a PULL_MESSAGE request of rmq.protocol._faststore (issue #30): per-request pulls
 * without a RemotingCommand or a header dict.
 *
 *   pull_decode(src, pos, max_frame)
 *       -> None | (end, opaque, group, topic, queue_id, queue_offset, max_nums, sys_flag, commit_offset,
 *                  suspend_ms, subscription, expression_type, sub_version)
 *
 * The frame at ``pos`` of ``src`` (the bytes a connection read), when it is whole and a PULL_MESSAGE (11) or
 * LITE_PULL_MESSAGE (361) request (not oneway) in the plain JSON shape parse_head accepts (Java's fastjson,
 * rmq's and the C++ client's headers, its numeric extFields too): its end and the fields pull.py reads, as
 * ext_str / ext_i32 / ext_int would give them. consumerGroup, topic, queueId, queueOffset, maxMsgNums and
 * sysFlag must be there; commitOffset (-1), suspendTimeoutMillis (0) and subVersion (0) may be left out;
 * subscription and expressionType are None when absent or empty (pull.py's defaults apply). A number must
 * be plain (an optional minus, 1..9 digits for a Java int, 1..18 for a long); a duplicate field, a body,
 * or anything else gives None: the Python path decodes that request and answers it, as the reference.
 * Every read of client bytes is bounds-checked against the frame (parse_head, this loop).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_faststore.h"
#include "_faststore_send.h"

enum { P_GROUP, P_TOPIC, P_QID, P_OFFSET, P_MAX, P_SYSFLAG, P_COMMIT, P_SUSPEND, P_SUB, P_ETYPE, P_SUBVER, N_PULL };
static const char *const pull_keys[N_PULL] = {"consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums",
                                              "sysFlag", "commitOffset", "suspendTimeoutMillis", "subscription",
                                              "expressionType", "subVersion"};
/* the numbers' widths in digits (a Java int: 9, fewer than its 10 so no range check; a long: 18) */
static const int pull_digits[N_PULL] = {0, 0, 9, 18, 9, 9, 18, 18, 0, 0, 18};

static int pull_field(const Span *k) {
    for (int i = 0; i < N_PULL; i++) {
        size_t n = strlen(pull_keys[i]);
        if ((size_t)k->n == n && memcmp(pull_keys[i], k->p, n) == 0) return i;
    }
    return -1;
}

/* A plain number of 1..maxd digits after an optional minus (escapes refused); 0 when not. */
static int plain_number(const Span *s, int maxd, long long *out) {
    if (s->esc || s->n < 1) return 0;
    const unsigned char *p = s->p, *end = s->p + s->n;
    int neg = *p == '-';
    if (neg) p++;
    if (end - p < 1 || end - p > maxd) return 0;
    long long v = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (*p - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

/* A string field as a str (the span is ASCII: parse_head's scan allows nothing else), or NULL. */
static PyObject *text_of(const Span *s, unsigned char *buf) {
    Py_ssize_t n = unescape(s, buf);
    return PyUnicode_DecodeASCII((const char *)buf, n, NULL);
}

/* The whole frame at ``pos`` of the read ``in`` (its length word within ``max_frame``), when its header is JSON
 * and within the frame: its start, *length (the length word) and *hlen (the header's); NULL otherwise. */
static const unsigned char *json_frame(const Py_buffer *in, Py_ssize_t pos, long long max_frame, long long *length,
                                       long long *hlen) {
    if (pos < 0 || in->len - pos < 8) return NULL;
    const unsigned char *f = (const unsigned char *)in->buf + pos;
    *length = ((long long)f[0] << 24) | (f[1] << 16) | (f[2] << 8) | f[3];
    if (*length < 4 || *length + 4 > max_frame || *length > in->len - pos - 4) return NULL;
    long long hword = ((long long)f[4] << 24) | (f[5] << 16) | (f[6] << 8) | f[7];
    *hlen = hword & 0xFFFFFF;
    return (hword >> 24) != 0 || *hlen > *length - 4 ? NULL : f;
}

PyObject *pull_decode(PyObject *self, PyObject *args) {
    PyObject *src;
    Py_ssize_t pos;
    long long max_frame;
    if (!PyArg_ParseTuple(args, "OnL", &src, &pos, &max_frame)) return NULL;
    Py_buffer in;
    if (PyObject_GetBuffer(src, &in, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    long long length, hlen;
    const unsigned char *f = json_frame(&in, pos, max_frame, &length, &hlen);
    if (f == NULL || hlen != length - 4) goto none; /* a JSON header, no body */
    Head h;
    if (!parse_head(f + 8, f + 8 + hlen, &h) || h.flag != 0 || (h.code != 11 && h.code != 361)) goto none;
    Span fld[N_PULL];
    memset(fld, 0, sizeof(fld));
    for (int i = 0; i < h.n_ext; i++) {
        int k = h.ek[i].esc ? -1 : pull_field(&h.ek[i]);
        if (k < 0) continue;
        if (fld[k].p != NULL) goto none; /* a duplicate: the pure decoder's rule decides */
        fld[k] = h.ev[i];
    }
    long long num[N_PULL] = {0};
    num[P_COMMIT] = -1;
    for (int k = 0; k < N_PULL; k++) {
        if (fld[k].p == NULL) {
            if (k <= P_SYSFLAG) goto none; /* required: the Python path's HeaderError */
            continue;
        }
        if (pull_digits[k] && !plain_number(&fld[k], pull_digits[k], &num[k])) goto none;
    }
    unsigned char *scratch = PyMem_Malloc((size_t)(hlen > 0 ? hlen : 1));
    if (scratch == NULL) { PyErr_NoMemory(); goto done; }
    PyObject *group = text_of(&fld[P_GROUP], scratch), *topic = text_of(&fld[P_TOPIC], scratch);
    PyObject *sub = fld[P_SUB].n > 0 ? text_of(&fld[P_SUB], scratch) : Py_NewRef(Py_None);
    PyObject *etype = fld[P_ETYPE].n > 0 ? text_of(&fld[P_ETYPE], scratch) : Py_NewRef(Py_None);
    PyMem_Free(scratch);
    if (group == NULL || topic == NULL || sub == NULL || etype == NULL) {
        Py_XDECREF(group); Py_XDECREF(topic); Py_XDECREF(sub); Py_XDECREF(etype);
        goto done;
    }
    result = Py_BuildValue("(nLNNLLLLLLNNL)", pos + 4 + (Py_ssize_t)length, h.opaque, group, topic, num[P_QID],
                           num[P_OFFSET], num[P_MAX], num[P_SYSFLAG], num[P_COMMIT], num[P_SUSPEND], sub, etype,
                           num[P_SUBVER]);
    goto done;
none:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&in);
    return result;
}

/* beat_decode(src, pos, max_frame) -> None | (end, opaque, language, version, body)
 *
 * The frame at ``pos`` of ``src``, when it is whole and a HEART_BEAT (34) request (not oneway) whose JSON
 * header parse_head accepts with a language and a version, and holds no escape (no backslash anywhere in it):
 * its end, opaque, language (the header's string as written), version and body (bytes). fastbeat.py
 * compares language, version and body with those of the connection's previous heartbeat (the Python path's,
 * whose language a known name): anything else gives None, and the Python path decodes the frame.
 * Every read of client bytes is bounds-checked against the frame (here, parse_head). */
PyObject *beat_decode(PyObject *self, PyObject *args) {
    PyObject *src;
    Py_ssize_t pos;
    long long max_frame;
    if (!PyArg_ParseTuple(args, "OnL", &src, &pos, &max_frame)) return NULL;
    Py_buffer in;
    if (PyObject_GetBuffer(src, &in, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    long long length, hlen;
    const unsigned char *f = json_frame(&in, pos, max_frame, &length, &hlen);
    if (f == NULL) goto none;
    if (memchr(f + 8, '\\', (size_t)hlen) != NULL) goto none;
    Head h;
    if (!parse_head(f + 8, f + 8 + hlen, &h) || h.flag != 0 || h.code != 34 || !h.has_version || h.lang.p == NULL)
        goto none;
    result = Py_BuildValue("(nLs#Ly#)", pos + 4 + (Py_ssize_t)length, h.opaque, (const char *)h.lang.p,
                           h.lang.n, h.version, (const char *)(f + 8 + hlen), (Py_ssize_t)(length - 4 - hlen));
    goto done;
none:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&in);
    return result;
}
