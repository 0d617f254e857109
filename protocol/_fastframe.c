/* rmq.protocol._fastframe: the compiled frame splitter, header decoder and JSON frame encoder (issue #30, step 1).
 *
 * One call per socket read: split() walks the received bytes, cuts every whole frame (length
 * word, header word, header, body) and decodes its header into a RemotingCommand, writing the
 * command's slots directly. It decodes only the common shapes (see json_header below and
 * binary_header); any other frame -- a bad header length, an unknown serialize type, a JSON
 * header with escapes, floats, nesting, unknown keys, a binary header that does not parse --
 * goes to the pure Python decoder (rmq.protocol.frame) for that one frame, so results and
 * errors stay the pure path's by construction. split() stops before a frame length the pure
 * loop refuses (below 4, above the limit) and before an incomplete frame: the caller's pure
 * loop then raises or buffers exactly as before.
 *
 * Every read of client bytes is bounds-checked against the end of the frame or header.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define MAX_FAST_JSON 8192 /* the pure path's own fast-path bound (headercodec._FAST_MAX_CHARS) */
#define N_SLOTS 9

enum { S_CODE, S_LANGUAGE, S_VERSION, S_OPAQUE, S_FLAG, S_REMARK, S_EXT, S_BODY, S_ST };
static const char *const slot_names[N_SLOTS] = {
    "code", "language", "version", "opaque", "flag", "remark", "ext", "body", "serialize_type",
};

static PyTypeObject *cmd_type = NULL; /* RemotingCommand */
static Py_ssize_t slot_off[N_SLOTS];
static PyObject *slow_decode = NULL; /* (src, start, end, recover) -> command; the pure path */
static PyObject *slow_encode = NULL; /* cmd -> (head, body); the pure path */
static PyObject *lang_names = NULL;  /* tuple: binary language byte -> name */
static PyObject *str_true = NULL, *str_false = NULL;
static PyObject *st_json = NULL, *st_rocketmq = NULL;

enum { FALLBACK = 0, DECODED = 1, FAILED = -1 };

static inline int32_t rd_i32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline int16_t rd_i16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }
static inline uint16_t rd_u16(const unsigned char *p) { return (uint16_t)(((uint16_t)p[0] << 8) | p[1]); }

/* A command with every slot set; steals the references passed (all non-NULL). */
static PyObject *make_command(PyObject *vals[N_SLOTS]) {
    PyObject *cmd = cmd_type->tp_alloc(cmd_type, 0);
    if (cmd == NULL) {
        for (int i = 0; i < N_SLOTS; i++) Py_DECREF(vals[i]);
        return NULL;
    }
    for (int i = 0; i < N_SLOTS; i++) *(PyObject **)((char *)cmd + slot_off[i]) = vals[i];
    return cmd;
}

/* UTF-8 bytes to str; FALLBACK (error cleared) on invalid UTF-8, FAILED on anything else. */
static int utf8(const unsigned char *s, Py_ssize_t n, PyObject **out) {
    *out = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (*out != NULL) return DECODED;
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
        return FALLBACK;
    }
    return FAILED;
}

/* ------------------------------------------------------------------ ROCKETMQ binary header */

static int binary_header(const unsigned char *h, Py_ssize_t n, PyObject *vals[N_SLOTS]) {
    if (n < 21) return FALLBACK;
    int16_t code = rd_i16(h);
    int8_t lang = (int8_t)h[2];
    int16_t version = rd_i16(h + 3);
    int32_t opaque = rd_i32(h + 5), flag = rd_i32(h + 9), rlen = rd_i32(h + 13);
    Py_ssize_t pos = 17;
    if (rlen < 0 || pos + (Py_ssize_t)rlen + 4 > n) return FALLBACK;
    PyObject *remark = NULL, *ext = NULL, *key = NULL, *val = NULL;
    int r;
    if (rlen) {
        if ((r = utf8(h + pos, rlen, &remark)) != DECODED) return r;
    } else {
        remark = Py_NewRef(Py_None);
    }
    pos += rlen;
    int32_t elen = rd_i32(h + pos);
    pos += 4;
    if (elen < 0 || pos + (Py_ssize_t)elen != n) { r = FALLBACK; goto bad; }
    if ((ext = PyDict_New()) == NULL) { r = FAILED; goto bad; }
    while (pos < n) {
        if (pos + 2 > n) { r = FALLBACK; goto bad; }
        uint16_t kl = rd_u16(h + pos);
        pos += 2;
        if (pos + (Py_ssize_t)kl + 4 > n) { r = FALLBACK; goto bad; }
        if (kl && (r = utf8(h + pos, kl, &key)) != DECODED) goto bad;
        pos += kl;
        int32_t vl = rd_i32(h + pos);
        pos += 4;
        if (vl < 0 || pos + (Py_ssize_t)vl > n) { r = FALLBACK; goto bad; }
        if (vl && (r = utf8(h + pos, vl, &val)) != DECODED) goto bad;
        pos += vl;
        if (key != NULL && val != NULL && PyDict_SetItem(ext, key, val) < 0) { r = FAILED; goto bad; }
        Py_CLEAR(key);
        Py_CLEAR(val);
    }
    PyObject *name;
    if (lang >= 0 && lang < PyTuple_GET_SIZE(lang_names)) {
        name = PyTuple_GET_ITEM(lang_names, lang);
    } else {
        name = PyTuple_GET_ITEM(lang_names, 7); /* OTHER, checked at configure */
    }
    if ((vals[S_CODE] = PyLong_FromLong(code)) == NULL ||
        (vals[S_VERSION] = PyLong_FromLong(version)) == NULL ||
        (vals[S_OPAQUE] = PyLong_FromLong(opaque)) == NULL ||
        (vals[S_FLAG] = PyLong_FromLong(flag)) == NULL) {
        r = FAILED;
        goto bad;
    }
    vals[S_LANGUAGE] = Py_NewRef(name);
    vals[S_REMARK] = remark;
    vals[S_EXT] = ext;
    vals[S_ST] = Py_NewRef(st_rocketmq);
    return DECODED;
bad:
    Py_XDECREF(remark);
    Py_XDECREF(ext);
    Py_XDECREF(key);
    Py_XDECREF(val);
    return r;
}

/* ------------------------------------------------------------------ JSON header, common shape
 *
 * What the pure path's orjson branch accepts and returns as is: a flat object of the known
 * top-level keys, each at most once; code/opaque/flag/version canonical JSON integers within a
 * Java int; language one of LanguageCode's names; remark a string or null; serializeTypeCurrentRPC
 * an ASCII string or null; extFields an object whose values are strings, canonical integers of at
 * most 18 digits (kept as their decimal text, as str(int) writes them), true/false, or null
 * (dropped). Strings are valid UTF-8 without control characters; remark and extFields may use
 * JSON's escapes (RocketMQ's properties always do: \u0001, \u0002), except a lone surrogate.
 * Anything else returns FALLBACK and the pure decoder decides.
 */

typedef struct {
    const unsigned char *p, *end;
} cursor;

static inline void ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

/* A string at c->p (the opening quote) without control characters; sets [*s, *s + *n) to its raw
 * text, *ascii whether all of it is < 0x80 and *esc whether it holds a backslash escape. */
static int raw_string(cursor *c, const unsigned char **s, Py_ssize_t *n, int *ascii, int *esc) {
    if (c->p >= c->end || *c->p != '"') return 0;
    const unsigned char *q = ++c->p;
    int hi = 0, bs = 0;
    while (q < c->end) {
        unsigned char ch = *q;
        if (ch == '"') {
            *s = c->p;
            *n = q - c->p;
            *ascii = !hi;
            *esc = bs;
            c->p = q + 1;
            return 1;
        }
        if (ch < 0x20) return 0;
        if (ch == '\\') {
            bs = 1;
            if (++q >= c->end) return 0; /* the escaped character is checked by unescape() */
        }
        hi |= *q & 0x80;
        q++;
    }
    return 0;
}

static int hex4(const unsigned char *p, unsigned *v) {
    unsigned acc = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char ch = p[i];
        acc <<= 4;
        if (ch >= '0' && ch <= '9') acc |= ch - '0';
        else if (ch >= 'a' && ch <= 'f') acc |= ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F') acc |= ch - 'A' + 10;
        else return 0;
    }
    *v = acc;
    return 1;
}

/* JSON's escapes in [s, s + n) written out as UTF-8 into out (n bytes suffice: no escape grows);
 * 0 for a malformed escape or a lone surrogate (the pure path refuses or words those). */
static int unescape(const unsigned char *s, Py_ssize_t n, unsigned char *out, Py_ssize_t *outn) {
    Py_ssize_t i = 0, o = 0;
    while (i < n) {
        unsigned char ch = s[i++];
        if (ch != '\\') {
            out[o++] = ch;
            continue;
        }
        if (i >= n) return 0;
        ch = s[i++];
        switch (ch) {
        case '"': case '\\': case '/': out[o++] = ch; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'n': out[o++] = '\n'; break;
        case 'r': out[o++] = '\r'; break;
        case 't': out[o++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (n - i < 4 || !hex4(s + i, &cp)) return 0;
            i += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return 0;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (n - i < 6 || s[i] != '\\' || s[i + 1] != 'u' || !hex4(s + i + 2, &lo) || lo < 0xDC00 ||
                    lo > 0xDFFF)
                    return 0;
                i += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp < 0x80) {
                out[o++] = (unsigned char)cp;
            } else if (cp < 0x800) {
                out[o++] = (unsigned char)(0xC0 | (cp >> 6));
                out[o++] = (unsigned char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                out[o++] = (unsigned char)(0xE0 | (cp >> 12));
                out[o++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                out[o++] = (unsigned char)(0x80 | (cp & 0x3F));
            } else {
                out[o++] = (unsigned char)(0xF0 | (cp >> 18));
                out[o++] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                out[o++] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                out[o++] = (unsigned char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default:
            return 0;
        }
    }
    *outn = o;
    return 1;
}

/* A JSON string's text (escapes resolved) as str; FALLBACK on a bad escape or invalid UTF-8. */
static int json_str(const unsigned char *s, Py_ssize_t n, int esc, PyObject **out) {
    if (!esc) return utf8(s, n, out);
    unsigned char buf[MAX_FAST_JSON];
    Py_ssize_t m;
    if (n > MAX_FAST_JSON || !unescape(s, n, buf, &m)) return FALLBACK;
    return utf8(buf, m, out);
}

/* A canonical JSON integer (-?(0|[1-9][0-9]*), not -0, no fraction or exponent) of at most
 * max_digits digits; sets [*s, *s + *n) to its text and *v to its value. */
static int raw_int(cursor *c, int max_digits, const unsigned char **s, Py_ssize_t *n, long long *v) {
    const unsigned char *q = c->p;
    int neg = 0;
    if (q < c->end && *q == '-') {
        neg = 1;
        q++;
    }
    const unsigned char *d = q;
    long long acc = 0;
    while (q < c->end && *q >= '0' && *q <= '9') {
        if (q - d >= max_digits) return 0;
        acc = acc * 10 + (*q - '0');
        q++;
    }
    Py_ssize_t nd = q - d;
    if (nd == 0 || (nd > 1 && *d == '0') || (neg && acc == 0)) return 0;
    if (q < c->end && (*q == '.' || *q == 'e' || *q == 'E')) return 0;
    *s = c->p;
    *n = q - c->p;
    *v = neg ? -acc : acc;
    c->p = q;
    return 1;
}

static inline int literal(cursor *c, const char *word, Py_ssize_t n) {
    if (c->end - c->p >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* After a value: ',' (more follows) -> 1, '}' -> 2, anything else -> 0. */
static inline int next_member(cursor *c) {
    ws(c);
    if (c->p >= c->end) return 0;
    unsigned char ch = *c->p++;
    if (ch == ',') {
        ws(c);
        return 1;
    }
    return ch == '}' ? 2 : 0;
}

static int java_int(cursor *c, PyObject **out) {
    const unsigned char *s;
    Py_ssize_t n;
    long long v;
    if (!raw_int(c, 10, &s, &n, &v) || v < INT32_MIN || v > INT32_MAX) return FALLBACK;
    return (*out = PyLong_FromLongLong(v)) ? DECODED : FAILED;
}

static int drop_nulls(PyObject *ext) {
    PyObject *keys = PyList_New(0), *k, *v;
    Py_ssize_t i = 0;
    if (keys == NULL) return -1;
    while (PyDict_Next(ext, &i, &k, &v)) {
        if (v == Py_None && PyList_Append(keys, k) < 0) goto fail;
    }
    for (i = 0; i < PyList_GET_SIZE(keys); i++) {
        if (PyDict_DelItem(ext, PyList_GET_ITEM(keys, i)) < 0) goto fail;
    }
    Py_DECREF(keys);
    return 0;
fail:
    Py_DECREF(keys);
    return -1;
}

static int json_ext(cursor *c, PyObject **out) {
    if (c->p >= c->end || *c->p != '{') return FALLBACK;
    c->p++;
    ws(c);
    PyObject *ext = PyDict_New(), *key = NULL, *val = NULL;
    if (ext == NULL) return FAILED;
    int r = FALLBACK;
    Py_ssize_t nulls = 0;
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        *out = ext;
        return DECODED;
    }
    for (;;) {
        const unsigned char *s;
        Py_ssize_t n;
        int ascii, esc;
        long long v;
        if (!raw_string(c, &s, &n, &ascii, &esc)) goto bad;
        if ((r = json_str(s, n, esc, &key)) != DECODED) goto bad;
        r = FALLBACK;
        ws(c);
        if (c->p >= c->end || *c->p != ':') goto bad;
        c->p++;
        ws(c);
        if (c->p >= c->end) goto bad;
        unsigned char ch = *c->p;
        if (ch == '"') {
            if (!raw_string(c, &s, &n, &ascii, &esc)) goto bad;
            if ((r = json_str(s, n, esc, &val)) != DECODED) goto bad;
        } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
            if (!raw_int(c, 18, &s, &n, &v)) goto bad;
            if ((val = PyUnicode_DecodeASCII((const char *)s, n, NULL)) == NULL) { r = FAILED; goto bad; }
        } else if (literal(c, "true", 4)) {
            val = Py_NewRef(str_true);
        } else if (literal(c, "false", 5)) {
            val = Py_NewRef(str_false);
        } else if (literal(c, "null", 4)) {
            val = NULL;
        } else {
            goto bad;
        }
        r = FALLBACK;
        /* a null is held as None and dropped at the end, so the order stays the pure path's
           (which drops it in place); a repeated key is the pure path's to decide */
        Py_ssize_t before = PyDict_GET_SIZE(ext);
        if (PyDict_SetItem(ext, key, val != NULL ? val : Py_None) < 0) { r = FAILED; goto bad; }
        if (PyDict_GET_SIZE(ext) == before) goto bad;
        nulls += val == NULL;
        Py_CLEAR(key);
        Py_CLEAR(val);
        int m = next_member(c);
        if (m == 2) break;
        if (m == 0) goto bad;
    }
    if (nulls && drop_nulls(ext) < 0) { r = FAILED; goto bad; }
    *out = ext;
    return DECODED;
bad:
    Py_XDECREF(ext);
    Py_XDECREF(key);
    Py_XDECREF(val);
    return r;
}

static int json_header(const unsigned char *h, Py_ssize_t n, PyObject *vals[N_SLOTS]) {
    if (n > MAX_FAST_JSON || n < 2 || h[0] != '{') return FALLBACK;
    cursor cur = {h + 1, h + n}, *c = &cur;
    PyObject *got[N_SLOTS] = {NULL};
    unsigned seen = 0;
    int r = FALLBACK;
    ws(c);
    if (c->p < c->end && *c->p == '}') goto bad; /* no code */
    for (;;) {
        const unsigned char *k, *s;
        Py_ssize_t kn, n2;
        int ascii, esc, slot;
        if (!raw_string(c, &k, &kn, &ascii, &esc) || esc) goto bad;
        ws(c);
        if (c->p >= c->end || *c->p != ':') goto bad;
        c->p++;
        ws(c);
#define KEY(lit) (kn == (Py_ssize_t)sizeof(lit) - 1 && memcmp(k, lit, kn) == 0)
        if (KEY("code")) slot = S_CODE;
        else if (KEY("opaque")) slot = S_OPAQUE;
        else if (KEY("flag")) slot = S_FLAG;
        else if (KEY("version")) slot = S_VERSION;
        else if (KEY("language")) slot = S_LANGUAGE;
        else if (KEY("remark")) slot = S_REMARK;
        else if (KEY("extFields")) slot = S_EXT;
        else if (KEY("serializeTypeCurrentRPC")) slot = S_ST;
        else goto bad;
#undef KEY
        if (seen & (1u << slot)) goto bad;
        seen |= 1u << slot;
        switch (slot) {
        case S_CODE:
        case S_OPAQUE:
        case S_FLAG:
        case S_VERSION:
            if ((r = java_int(c, &got[slot])) != DECODED) goto bad;
            break;
        case S_LANGUAGE: {
            if (!raw_string(c, &s, &n2, &ascii, &esc) || !ascii || esc) goto bad;
            Py_ssize_t nl = PyTuple_GET_SIZE(lang_names);
            for (Py_ssize_t i = 0; i < nl; i++) {
                PyObject *name = PyTuple_GET_ITEM(lang_names, i);
                if (PyUnicode_GET_LENGTH(name) == n2 && memcmp(PyUnicode_DATA(name), s, n2) == 0) {
                    got[slot] = Py_NewRef(name);
                    break;
                }
            }
            if (got[slot] == NULL) goto bad;
            break;
        }
        case S_REMARK:
            if (literal(c, "null", 4)) {
                got[slot] = Py_NewRef(Py_None);
            } else {
                if (!raw_string(c, &s, &n2, &ascii, &esc)) goto bad;
                if ((r = json_str(s, n2, esc, &got[slot])) != DECODED) goto bad;
            }
            break;
        case S_ST: /* its value is not kept: the header word's byte is the serialize type */
            if (!literal(c, "null", 4) && (!raw_string(c, &s, &n2, &ascii, &esc) || !ascii || esc)) goto bad;
            break;
        case S_EXT:
            if ((r = json_ext(c, &got[slot])) != DECODED) goto bad;
            break;
        }
        r = FALLBACK;
        int m = next_member(c);
        if (m == 2) break;
        if (m == 0) goto bad;
    }
    ws(c);
    if (c->p != c->end || got[S_CODE] == NULL) goto bad;
    if (got[S_EXT] == NULL && (got[S_EXT] = PyDict_New()) == NULL) { r = FAILED; goto bad; }
    if (got[S_LANGUAGE] == NULL) got[S_LANGUAGE] = Py_NewRef(PyTuple_GET_ITEM(lang_names, 7));
    if (got[S_REMARK] == NULL) got[S_REMARK] = Py_NewRef(Py_None);
    for (int i = S_VERSION; i <= S_FLAG; i++) { /* version, opaque, flag: absent is 0 */
        if (got[i] == NULL && (got[i] = PyLong_FromLong(0)) == NULL) { r = FAILED; goto bad; }
    }
    for (int i = 0; i < N_SLOTS; i++) {
        if (i == S_BODY) continue;
        vals[i] = i == S_ST ? Py_NewRef(st_json) : got[i];
    }
    return DECODED;
bad:
    for (int i = 0; i < N_SLOTS; i++) Py_XDECREF(got[i]);
    return r;
}

/* ------------------------------------------------------------------ frames */

/* The frame whose header word starts at b[start] and which ends at b[end] (end - start >= 4). */
static int decode_frame(const unsigned char *b, Py_ssize_t start, Py_ssize_t end, PyObject **out) {
    int32_t word = rd_i32(b + start);
    int st = (int)(((uint32_t)word >> 24) & 0xFF);
    Py_ssize_t hl = word & 0xFFFFFF;
    Py_ssize_t hs = start + 4, he = hs + hl;
    if (he > end) return FALLBACK;
    PyObject *vals[N_SLOTS] = {NULL};
    int r;
    if (st == 0) r = json_header(b + hs, hl, vals);
    else if (st == 1) r = binary_header(b + hs, hl, vals);
    else return FALLBACK;
    if (r != DECODED) return r;
    vals[S_BODY] = PyBytes_FromStringAndSize((const char *)b + he, end - he);
    if (vals[S_BODY] == NULL) {
        for (int i = 0; i < N_SLOTS; i++) Py_XDECREF(vals[i]);
        return FAILED;
    }
    *out = make_command(vals);
    return *out ? DECODED : FAILED;
}

PyDoc_STRVAR(split_doc,
"split(src, limit, recover) -> (commands, pos)\n\n"
"Decode the whole frames at the start of ``src`` (a bytes-like object); stop before an incomplete\n"
"frame or a frame length the pure loop refuses. ``pos`` is where the pure loop takes over.");

static PyObject *split(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "split(src, limit, recover)");
        return NULL;
    }
    if (cmd_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastframe.configure() was not called");
        return NULL;
    }
    int overflow = 0;
    long long limit = PyLong_AsLongLongAndOverflow(args[1], &overflow);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (overflow > 0) limit = LLONG_MAX;
    else if (overflow < 0) limit = LLONG_MIN;
    PyObject *src = args[0], *recover = args[2];
    Py_buffer view;
    if (PyObject_GetBuffer(src, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len, pos = 0;
    PyObject *out = PyList_New(0);
    if (out == NULL) goto fail;
    while (n - pos >= 4) {
        int32_t length = rd_i32(b + pos);
        if (length < 4 || (long long)length + 4 > limit) break;
        Py_ssize_t end = pos + 4 + (Py_ssize_t)length;
        if (end > n) break;
        PyObject *cmd = NULL;
        int r = decode_frame(b, pos + 4, end, &cmd);
        if (r == FAILED) goto fail;
        if (r == FALLBACK) {
            PyObject *start_o = PyLong_FromSsize_t(pos + 4), *end_o = PyLong_FromSsize_t(end);
            if (start_o && end_o) {
                PyObject *cargs[4] = {src, start_o, end_o, recover};
                cmd = PyObject_Vectorcall(slow_decode, cargs, 4, NULL);
            }
            Py_XDECREF(start_o);
            Py_XDECREF(end_o);
            if (cmd == NULL) goto fail;
        }
        int a = PyList_Append(out, cmd);
        Py_DECREF(cmd);
        if (a < 0) goto fail;
        pos = end;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", out, pos);
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(out);
    return NULL;
}


/* ------------------------------------------------------------------ encode (JSON headers)
 *
 * encode_parts(cmd) -> (length word + header word + header, body), byte for byte what the pure
 * encode_parts writes for a JSON command whose slots hold exact ints (within a C long long), str,
 * None, bytes and a dict of str to str: fastjson's key order, every string quoted as the json
 * module's encode_basestring_ascii does (ASCII only, \uXXXX in lowercase hex, surrogate pairs
 * above U+FFFF). Anything else is the pure function's (slow_encode) to write or refuse.
 */

typedef struct {
    char *p;
    Py_ssize_t n, cap;
    char local[1024];
} obuf;

static int ob_grow(obuf *b, Py_ssize_t more) {
    if (b->n + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap * 2;
    while (cap < b->n + more) cap *= 2;
    char *np = b->p == b->local ? PyMem_Malloc(cap) : PyMem_Realloc(b->p, cap);
    if (np == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (b->p == b->local) memcpy(np, b->local, b->n);
    b->p = np;
    b->cap = cap;
    return 0;
}

static inline int ob_put(obuf *b, const char *s, Py_ssize_t n) {
    if (ob_grow(b, n) < 0) return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}
#define OB_LIT(b, lit) ob_put((b), (lit), (Py_ssize_t)sizeof(lit) - 1)

static int ob_int(obuf *b, long long v) {
    char tmp[24];
    int i = 24;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) tmp[--i] = '-';
    return ob_put(b, tmp + i, 24 - i);
}

static const char hexdig[] = "0123456789abcdef";

static inline void put_u(char *o, unsigned c) {
    o[0] = '\\';
    o[1] = 'u';
    o[2] = hexdig[(c >> 12) & 0xF];
    o[3] = hexdig[(c >> 8) & 0xF];
    o[4] = hexdig[(c >> 4) & 0xF];
    o[5] = hexdig[c & 0xF];
}

/* The str quoted as json.encoder.encode_basestring_ascii quotes it. */
static int ob_quote(obuf *b, PyObject *str) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(str);
    if (ob_grow(b, n * 12 + 2) < 0) return -1;
    int kind = PyUnicode_KIND(str);
    const void *data = PyUnicode_DATA(str);
    char *o = b->p + b->n;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~' && c != '\\' && c != '"') {
            *o++ = (char)c;
            continue;
        }
        switch (c) {
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '"': *o++ = '\\'; *o++ = '"'; break;
        case '\b': *o++ = '\\'; *o++ = 'b'; break;
        case '\f': *o++ = '\\'; *o++ = 'f'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        default:
            if (c >= 0x10000) {
                Py_UCS4 v = c - 0x10000;
                put_u(o, 0xD800 | ((v >> 10) & 0x3FF));
                put_u(o + 6, 0xDC00 | (v & 0x3FF));
                o += 12;
            } else {
                put_u(o, c);
                o += 6;
            }
        }
    }
    *o++ = '"';
    b->n = o - b->p;
    return 0;
}

static inline PyObject *slot(PyObject *cmd, int i) { return *(PyObject **)((char *)cmd + slot_off[i]); }

/* An exact int within long long; 0 when it is not one (the pure path decides). */
static int exact_ll(PyObject *o, long long *v) {
    if (o == NULL || !PyLong_CheckExact(o)) return 0;
    int overflow = 0;
    *v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow) return 0;
    return !(*v == -1 && PyErr_Occurred());
}

/* FALLBACK, DECODED (written into b) or FAILED. */
static int encode_json(PyObject *cmd, obuf *b) {
    long long code, flag, opaque, version, st;
    PyObject *lang = slot(cmd, S_LANGUAGE), *remark = slot(cmd, S_REMARK), *ext = slot(cmd, S_EXT);
    if (!exact_ll(slot(cmd, S_ST), &st) || st != 0 || !exact_ll(slot(cmd, S_CODE), &code) ||
        !exact_ll(slot(cmd, S_FLAG), &flag) || !exact_ll(slot(cmd, S_OPAQUE), &opaque) ||
        !exact_ll(slot(cmd, S_VERSION), &version) || lang == NULL || !PyUnicode_CheckExact(lang) ||
        remark == NULL || (remark != Py_None && !PyUnicode_CheckExact(remark)) || ext == NULL ||
        !PyDict_CheckExact(ext))
        return FALLBACK;
    if (OB_LIT(b, "{\"code\":") < 0 || ob_int(b, code) < 0) return FAILED;
    if (PyDict_GET_SIZE(ext) || (flag & 1)) {
        PyObject *k, *v;
        Py_ssize_t i = 0;
        int first = 1;
        if (OB_LIT(b, ",\"extFields\":{") < 0) return FAILED;
        while (PyDict_Next(ext, &i, &k, &v)) {
            if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v)) return FALLBACK;
            if ((!first && OB_LIT(b, ",") < 0) || ob_quote(b, k) < 0 || OB_LIT(b, ":") < 0 || ob_quote(b, v) < 0)
                return FAILED;
            first = 0;
        }
        if (OB_LIT(b, "}") < 0) return FAILED;
    }
    if (OB_LIT(b, ",\"flag\":") < 0 || ob_int(b, flag) < 0 || OB_LIT(b, ",\"language\":") < 0 ||
        ob_quote(b, lang) < 0 || OB_LIT(b, ",\"opaque\":") < 0 || ob_int(b, opaque) < 0)
        return FAILED;
    if (remark != Py_None && (OB_LIT(b, ",\"remark\":") < 0 || ob_quote(b, remark) < 0)) return FAILED;
    if (OB_LIT(b, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":") < 0 || ob_int(b, version) < 0 ||
        OB_LIT(b, "}") < 0)
        return FAILED;
    return DECODED;
}

PyDoc_STRVAR(encode_parts_doc,
"encode_parts(cmd) -> (head, body): rmq.protocol.frame.encode_parts, compiled for JSON headers.");

static PyObject *encode_parts(PyObject *self, PyObject *cmd) {
    if (cmd_type == NULL || slow_encode == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_fastframe.configure() was not called");
        return NULL;
    }
    if (!PyObject_TypeCheck(cmd, cmd_type)) return PyObject_CallOneArg(slow_encode, cmd);
    PyObject *body = slot(cmd, S_BODY);
    if (body == NULL || !PyBytes_CheckExact(body)) return PyObject_CallOneArg(slow_encode, cmd);
    obuf b;
    b.p = b.local;
    b.cap = sizeof b.local;
    b.n = 8; /* the length and header words, written last */
    int r = encode_json(cmd, &b);
    PyObject *out = NULL;
    Py_ssize_t hl = b.n - 8;
    if (r == DECODED && (hl > 0xFFFFFF || 4 + hl + PyBytes_GET_SIZE(body) > INT32_MAX)) r = FALLBACK;
    if (r == DECODED) {
        uint32_t total = (uint32_t)(4 + hl + PyBytes_GET_SIZE(body)), word = (uint32_t)hl;
        unsigned char *h = (unsigned char *)b.p;
        h[0] = total >> 24; h[1] = total >> 16; h[2] = total >> 8; h[3] = total;
        h[4] = word >> 24; h[5] = word >> 16; h[6] = word >> 8; h[7] = word;
        PyObject *head = PyBytes_FromStringAndSize(b.p, b.n);
        if (head != NULL) out = PyTuple_Pack(2, head, body);
        Py_XDECREF(head);
    } else if (r == FALLBACK) {
        out = PyObject_CallOneArg(slow_encode, cmd);
    }
    if (b.p != b.local) PyMem_Free(b.p);
    return out;
}

/* The offsets of ``t``'s object slots ``names`` (its own __slots__ members, T_OBJECT_EX, within the
 * instance) into ``off``; -1 with TypeError when one is not such a slot. _fastframe_record.c uses it too. */
int slot_offsets(PyTypeObject *t, const char *const *names, int n, Py_ssize_t *off, const char *what) {
    for (int i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttrString((PyObject *)t, names[i]);
        if (d == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
            PyErr_Clear();
        }
        int ok = d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX &&
                 ((PyMemberDescrObject *)d)->d_common.d_type == t;
        if (ok) off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_XDECREF(d);
        if (!ok || off[i] <= 0 || off[i] + (Py_ssize_t)sizeof(PyObject *) > t->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "slot %s is not an object slot of the %s type", names[i], what);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(configure_doc,
"configure(command_type, language_names, slow_decode, slow_encode)\n\n"
"Bind the RemotingCommand class (its slots are read and written directly), LanguageCode's names by\n"
"value, the pure decoder of one frame, called as slow_decode(src, start, end, recover), and the\n"
"pure encode_parts(cmd).");

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *type, *names, *slow, *slow_enc;
    if (!PyArg_ParseTuple(args, "O!O!OO:configure", &PyType_Type, &type, &PyTuple_Type, &names, &slow, &slow_enc))
        return NULL;
    PyTypeObject *t = (PyTypeObject *)type;
    if (t->tp_itemsize != 0 || t->tp_alloc == NULL || t->tp_new != PyBaseObject_Type.tp_new) {
        PyErr_SetString(PyExc_TypeError, "the command type must be a plain class with __slots__");
        return NULL;
    }
    Py_ssize_t off[N_SLOTS];
    if (slot_offsets(t, slot_names, N_SLOTS, off, "command") < 0) return NULL;
    Py_ssize_t nn = PyTuple_GET_SIZE(names);
    if (nn < 8) {
        PyErr_SetString(PyExc_ValueError, "language names: index 7 must be OTHER");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nn; i++) {
        PyObject *s = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s)) {
            PyErr_SetString(PyExc_TypeError, "language names must be ASCII str");
            return NULL;
        }
    }
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(names, 7), "OTHER") != 0) {
        PyErr_SetString(PyExc_ValueError, "language names: index 7 must be OTHER");
        return NULL;
    }
    if (!PyCallable_Check(slow) || !PyCallable_Check(slow_enc)) {
        PyErr_SetString(PyExc_TypeError, "slow_decode and slow_encode must be callable");
        return NULL;
    }
    memcpy(slot_off, off, sizeof off);
    Py_XSETREF(cmd_type, (PyTypeObject *)Py_NewRef(type));
    Py_XSETREF(lang_names, Py_NewRef(names));
    Py_XSETREF(slow_decode, Py_NewRef(slow));
    Py_XSETREF(slow_encode, Py_NewRef(slow_enc));
    Py_RETURN_NONE;
}

/* _fastframe_record.c: the stored-record decoder (rmq.protocol.message.decode_messages) */
PyObject *decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *configure_records(PyObject *self, PyObject *args);
PyObject *decode_props(PyObject *self, PyObject *raw);
extern const char decode_records_doc[], configure_records_doc[], decode_props_doc[];

static PyMethodDef methods[] = {
    {"split", (PyCFunction)(void (*)(void))split, METH_FASTCALL, split_doc},
    {"encode_parts", encode_parts, METH_O, encode_parts_doc},
    {"configure", configure, METH_VARARGS, configure_doc},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL, decode_records_doc},
    {"configure_records", configure_records, METH_VARARGS, configure_records_doc},
    {"decode_props", decode_props, METH_O, decode_props_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastframe",
    "The compiled frame splitter and header decoder; rmq.protocol.frame is its reference.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastframe(void) {
    if ((str_true = PyUnicode_InternFromString("true")) == NULL ||
        (str_false = PyUnicode_InternFromString("false")) == NULL ||
        (st_json = PyLong_FromLong(0)) == NULL || (st_rocketmq = PyLong_FromLong(1)) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
