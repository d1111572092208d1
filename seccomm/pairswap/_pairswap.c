/* seccomm._pairswap: the repeated two-rank swap of one sealed frame each way, compiled.
 *
 * This is the hot path of a repeated small allreduce on two ranks over MPI (recursive doubling's
 * one swap; timed by benchmarks/lean_path.py): per op it writes the op's number into the two
 * slots' nonce and AAD header, computes the op's argument record (its tag through the agreement's
 * `cryptography` HMAC object), seals the frame (`cryptography`'s AEAD `encrypt_into`), posts the
 * send (frame and record trailer, as seccomm.engine.OpRun.swap_step sends them) and the receive
 * (MPI_Isend / MPI_Irecv on the communicator's handle), polls the receive, checks the length and
 * the peer's record, opens the peer's frame (`decrypt_into`, into private memory) and reduces.
 * A clear hop (suite none) is the same with the payload copied in place of the seal and no open.
 * All cryptography stays in `cryptography`: this file calls its objects' methods, nothing else.
 *
 * Anything but the usual case is handed back to Python with a code, and seccomm.comm runs the
 * general path's code on the same state (the waits with deadlines and give-up notices, every
 * error with its peer and op).  Same bytes on the wire as the Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <mpi.h>
#include <stdint.h>
#include <string.h>

/* reductions done here: sum of these element types (the lower rank's operand first, as the
 * Python reducer; IEEE addition, integers wrapping as numpy's do) */
enum { R_F32 = 1, R_F64 = 2, R_I32 = 3, R_I64 = 4, R_U8 = 5 };

/* codes of finish() and start() */
enum {
    OK = 0,
    PENDING = -1,  /* start(): the receive is not in yet (Python waits: wait_recv) */
    LENGTH = 1,    /* another length than the frame and its record (Python: take_record, _check_len) */
    RECORD = 2,    /* the peer's record differs from the one an agreeing peer sends */
    TAG = 3,       /* the frame failed to open (Python: OpRun._open raises AuthenticationError) */
    MPIERR = 4,    /* an MPI call failed: mpi_error holds its code */
};

static PyObject *s_copy, *s_update, *s_finalize;

typedef struct {
    PyObject_HEAD
    MPI_Comm comm;
    int peer, tag, spins, red, theirs_first, clear, lower;
    Py_ssize_t frame_len, count;
    Py_buffer snonce, shdr, swire, rnonce, rhdr, rwire, cur, theirs, res, piece;
    int have; /* how many of the buffers above are held (released in that order) */
    PyObject *seal, *open, *mac;          /* bound encrypt_into / decrypt_into, labelled HMAC */
    PyObject *seal_args[4], *open_args[4]; /* (nonce, data, aad, out) memoryviews */
    unsigned char tail[16], want[32];
    MPI_Request sreq, rreq;
    int mpi_error, ready; /* ready: initialised (every method refuses before) */
    Py_ssize_t done, waits; /* ops that finished here (finish() OK); starts that returned PENDING */
    PyObject *python; /* what the Python path needs of the step when it takes over (seccomm.engine) */
} Swap;

static Py_buffer *bufs(Swap *s) { return &s->snonce; }

static void Swap_dealloc(Swap *s)
{
    Py_buffer *b = bufs(s);
    /* a request still live (never the case through seccomm: its requests are adopted or
     * complete) may still read or write the buffers: keep them rather than free them under MPI */
    int live = s->ready && (s->sreq != MPI_REQUEST_NULL || s->rreq != MPI_REQUEST_NULL);
    for (int i = 0; i < s->have && !live; i++)
        PyBuffer_Release(&b[i]);
    Py_XDECREF(s->seal);
    Py_XDECREF(s->open);
    Py_XDECREF(s->mac);
    Py_XDECREF(s->python);
    for (int i = 0; i < 4; i++) {
        Py_XDECREF(s->seal_args[i]);
        Py_XDECREF(s->open_args[i]);
    }
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int take(Swap *s, PyObject *o, int writable)
{
    Py_buffer *b = &bufs(s)[s->have];
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    s->have++;
    return 0;
}

static int bytes16(PyObject *o, unsigned char *out, Py_ssize_t n, const char *what)
{
    char *p;
    Py_ssize_t len;
    if (PyBytes_AsStringAndSize(o, &p, &len) < 0)
        return -1;
    if (len != n) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, want %zd", what, len, n);
        return -1;
    }
    memcpy(out, p, n);
    return 0;
}

/* Swap(comm_handle, peer, tag, spins, reduction, theirs_first,
 *      snonce, shdr, piece, sframe, swire, rnonce, rhdr, rframe, rwire, out, cur, res,
 *      encrypt_into, decrypt_into, labelled_hmac, tail, lower)
 * piece: this rank's payload (bytes); swire/rwire: the message sent / the receive posted: the
 * frame and the record room after it; sframe/rframe: the frame alone (the AEAD's output /
 * input); out: where the peer's plaintext is (private memory the AEAD decrypts into); cur: this
 * rank's operand; res: the result (may be cur).  A clear hop (encrypt_into and decrypt_into
 * None: suite none, or a hop the encrypt policy leaves in the clear): the frame is the payload
 * alone, copied into swire before the record, and out is the received frame itself.
 * labelled_hmac: the pair's HMAC with label and ranks in (seccomm.control), or None: suite none
 * (the record's tag is zero); lower: this rank is the lower of the pair (its records carry the
 * digest's first half, the peer's the second). */
static int Swap_init(Swap *s, PyObject *args, PyObject *kw)
{
    unsigned long long comm;
    PyObject *snonce, *shdr, *piece, *sframe, *swire, *rnonce, *rhdr, *rframe, *rwire, *out, *cur, *res;
    PyObject *seal, *open, *mac, *tail;
    if (s->have) {
        PyErr_SetString(PyExc_RuntimeError, "Swap is initialised once");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "KiiiiiOOOOOOOOOOOOOOOOp", &comm, &s->peer, &s->tag, &s->spins, &s->red,
                          &s->theirs_first, &snonce, &shdr, &piece, &sframe, &swire, &rnonce, &rhdr,
                          &rframe, &rwire, &out, &cur, &res, &seal, &open, &mac, &tail, &s->lower))
        return -1;
    s->comm = (MPI_Comm)comm;
    if (take(s, snonce, 1) || take(s, shdr, 1) || take(s, swire, 1) || take(s, rnonce, 1) ||
        take(s, rhdr, 1) || take(s, rwire, 1) || take(s, cur, 0) || take(s, out, 0) || take(s, res, 1) ||
        take(s, piece, 0))
        return -1;
    s->clear = seal == Py_None;
    if (s->snonce.len != 12 || s->rnonce.len != 12 || s->shdr.len != 89 || s->rhdr.len != 89) {
        PyErr_SetString(PyExc_ValueError, "nonce of 12 bytes and header of 89 expected");
        return -1;
    }
    s->frame_len = s->swire.len - 32;
    if (s->rwire.len != s->swire.len || s->cur.len != s->res.len || s->theirs.len != s->res.len ||
        s->piece.len != s->res.len || s->frame_len != s->res.len + (s->clear ? 0 : 16) ||
        (s->clear != (open == Py_None))) {
        PyErr_SetString(PyExc_ValueError, "buffer sizes do not match");
        return -1;
    }
    switch (s->red) {
    case R_F32: case R_I32: s->count = s->res.len / 4; break;
    case R_F64: case R_I64: s->count = s->res.len / 8; break;
    case R_U8: s->count = s->res.len; break;
    default: PyErr_SetString(PyExc_ValueError, "unknown reduction"); return -1;
    }
    if (bytes16(tail, s->tail, 16, "tail"))
        return -1;
    PyObject *sa[4] = {snonce, piece, shdr, sframe}, *oa[4] = {rnonce, rframe, rhdr, out};
    for (int i = 0; i < 4; i++) {
        Py_INCREF(sa[i]);
        s->seal_args[i] = sa[i];
        Py_INCREF(oa[i]);
        s->open_args[i] = oa[i];
    }
    if (mac != Py_None && !PyObject_HasAttr(mac, s_copy)) {
        PyErr_SetString(PyExc_TypeError, "mac: an HMAC object or None");
        return -1;
    }
    Py_INCREF(seal);
    Py_INCREF(open);
    Py_INCREF(mac);
    s->seal = seal, s->open = open, s->mac = mac;
    s->sreq = s->rreq = MPI_REQUEST_NULL;
    s->ready = 1;
    return 0;
}

static int not_ready(Swap *s)
{
    if (!s->ready)
        PyErr_SetString(PyExc_RuntimeError, "Swap is not initialised");
    return !s->ready;
}

static void put_be(unsigned char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

/* The record's tags: d = HMAC(labelled | seq | tail); this rank's is d[:16] when it is the lower
 * of the pair, else d[16:], the peer's the other half (seccomm.agreement); writes the trailer
 * this rank sends into `mine` (32 bytes: tail | tag) and the one the peer must send into
 * s->want. */
static int record(Swap *s, uint64_t seq, unsigned char *mine)
{
    unsigned char desc[24];
    if (s->mac == Py_None) { /* (suite none: the tag is zero, nothing authenticates the record) */
        memcpy(mine, s->tail, 16);
        memcpy(s->want, s->tail, 16);
        memset(mine + 16, 0, 16);
        memset(s->want + 16, 0, 16);
        return 0;
    }
    put_be(desc, seq, 8);
    memcpy(desc + 8, s->tail, 16);
    PyObject *h = PyObject_CallMethodNoArgs(s->mac, s_copy);
    if (h == NULL)
        return -1;
    PyObject *d = PyBytes_FromStringAndSize((const char *)desc, 24), *r = NULL;
    if (d != NULL)
        r = PyObject_CallMethodOneArg(h, s_update, d);
    Py_XDECREF(d);
    Py_XDECREF(r);
    PyObject *fin = r == NULL ? NULL : PyObject_CallMethodNoArgs(h, s_finalize);
    Py_DECREF(h);
    if (fin == NULL)
        return -1;
    if (!PyBytes_Check(fin) || PyBytes_GET_SIZE(fin) < 32) {
        Py_DECREF(fin);
        PyErr_SetString(PyExc_ValueError, "HMAC too short");
        return -1;
    }
    const unsigned char *m = (const unsigned char *)PyBytes_AS_STRING(fin);
    memcpy(mine, s->tail, 16);
    memcpy(s->want, s->tail, 16);
    memcpy(mine + 16, m + (s->lower ? 0 : 16), 16);
    memcpy(s->want + 16, m + (s->lower ? 16 : 0), 16);
    Py_DECREF(fin);
    return 0;
}

/* start(seq, op_index, epoch) -> bytes received, or PENDING (-1: poll on in Python), or
 * -MPIERR-1 on an MPI error (mpi_error) */
static PyObject *Swap_start(Swap *s, PyObject *args)
{
    unsigned long long seq, op_index, epoch;
    if (not_ready(s) || !PyArg_ParseTuple(args, "KKK", &seq, &op_index, &epoch))
        return NULL;
    if (op_index > 0xFFFFFFFFull || epoch > 0xFFFFFFFFull) { /* (32-bit fields of nonce and AAD) */
        PyErr_SetString(PyExc_OverflowError, "op index and epoch are 32-bit");
        return NULL;
    }
    if (s->sreq != MPI_REQUEST_NULL || s->rreq != MPI_REQUEST_NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Swap.start: the last op's requests are still held");
        return NULL;
    }
    unsigned char *sn = s->snonce.buf, *rn = s->rnonce.buf, *sh = s->shdr.buf, *rh = s->rhdr.buf;
    unsigned char *sw = s->swire.buf;
    put_be(sn, op_index, 4); /* nonce: op index (32) | step | chunk | sender: only the first changes */
    put_be(rn, op_index, 4);
    put_be(sh + 41, epoch, 4); /* AAD: epoch (u32) at 41, op sequence number (u64) at 45 */
    put_be(sh + 45, seq, 8);
    put_be(rh + 41, epoch, 4);
    put_be(rh + 45, seq, 8);
    if (record(s, seq, sw + s->frame_len) < 0)
        return NULL;
    if (s->clear) {
        memcpy(sw, s->piece.buf, s->piece.len); /* (a clear frame: the payload, copied before its record) */
    } else {
        PyObject *r = PyObject_Vectorcall(s->seal, s->seal_args, 4, NULL);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    int n = (int)(s->frame_len + 32), err, flag = 0;
    MPI_Status st;
    err = MPI_Isend(sw, n, MPI_BYTE, s->peer, s->tag, s->comm, &s->sreq);
    if (err != MPI_SUCCESS)
        s->sreq = MPI_REQUEST_NULL; /* (a failed call's request is undefined) */
    else if ((err = MPI_Irecv(s->rwire.buf, n, MPI_BYTE, s->peer, s->tag, s->comm, &s->rreq)) != MPI_SUCCESS)
        s->rreq = MPI_REQUEST_NULL;
    for (int i = 0; err == MPI_SUCCESS && i < s->spins; i++) {
        err = MPI_Test(&s->rreq, &flag, &st);
        if (flag)
            break;
    }
    if (err != MPI_SUCCESS) {
        s->mpi_error = err;
        return PyLong_FromLong(-MPIERR - 1);
    }
    if (!flag) {
        s->waits++;
        return PyLong_FromLong(PENDING);
    }
    int got;
    MPI_Get_count(&st, MPI_BYTE, &got);
    return PyLong_FromLong(got);
}

static void reduce(Swap *s)
{
    Py_ssize_t n = s->count;
    const void *a = s->cur.buf, *b = s->theirs.buf;
    if (s->theirs_first) {
        const void *t = a;
        a = b, b = t;
    }
/* (integers as unsigned: wrapping, as numpy's; floats: one IEEE addition each, as numpy's add) */
#define SUM(T)                                                                                     \
    {                                                                                              \
        const T *x = a, *y = b;                                                                    \
        T *z = s->res.buf;                                                                         \
        for (Py_ssize_t i = 0; i < n; i++)                                                         \
            z[i] = (T)(x[i] + y[i]);                                                               \
        break;                                                                                     \
    }
    switch (s->red) {
    case R_F32: SUM(float)
    case R_F64: SUM(double)
    case R_I32: SUM(uint32_t)
    case R_I64: SUM(uint64_t)
    default: SUM(uint8_t)
    }
#undef SUM
}

/* finish(got) -> OK once the peer's record agrees, its frame opened and the result is written;
 * else LENGTH, RECORD or TAG (nothing written to the result) */
static PyObject *Swap_finish(Swap *s, PyObject *arg)
{
    if (not_ready(s))
        return NULL;
    Py_ssize_t got = PyLong_AsSsize_t(arg);
    if (got == -1 && PyErr_Occurred())
        return NULL;
    if (got != s->frame_len + 32)
        return PyLong_FromLong(LENGTH);
    if (memcmp((unsigned char *)s->rwire.buf + s->frame_len, s->want, 32) != 0)
        return PyLong_FromLong(RECORD);
    if (!s->clear) {
        PyObject *r = PyObject_Vectorcall(s->open, s->open_args, 4, NULL);
        if (r == NULL) {
            PyErr_Clear(); /* (InvalidTag: the Python path opens it again and raises with the context) */
            return PyLong_FromLong(TAG);
        }
        Py_DECREF(r);
    }
    reduce(s);
    s->done++;
    return PyLong_FromLong(OK);
}

/* sent() -> True once the send is complete (its request freed), else False */
static PyObject *Swap_sent(Swap *s, PyObject *unused)
{
    int flag = 1;
    if (not_ready(s))
        return NULL;
    if (s->sreq != MPI_REQUEST_NULL) {
        int err = MPI_Test(&s->sreq, &flag, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS) {
            s->mpi_error = err;
            flag = 0;
        }
    }
    return PyBool_FromLong(flag);
}

/* requests() -> (send handle, receive handle) and let go of them: the caller wraps them in
 * mpi4py requests (MPI.Request.fromhandle) and owns them from then on */
static PyObject *Swap_requests(Swap *s, PyObject *unused)
{
    if (not_ready(s))
        return NULL;
    /* (as mpi4py shows a handle: MPICH's int, sign-extended, as an unsigned 64-bit number) */
    PyObject *r = Py_BuildValue("(KK)", (unsigned long long)(long long)s->sreq,
                                (unsigned long long)(long long)s->rreq);
    s->sreq = s->rreq = MPI_REQUEST_NULL;
    return r;
}

static PyObject *Swap_mpi_error(Swap *s, void *closure) { return PyLong_FromLong(s->mpi_error); }

static PyMethodDef Swap_methods[] = {
    {"start", (PyCFunction)Swap_start, METH_VARARGS, "start(seq, op_index, epoch) -> bytes in, or < 0"},
    {"finish", (PyCFunction)Swap_finish, METH_O, "finish(got) -> 0, or the code of what failed"},
    {"sent", (PyCFunction)Swap_sent, METH_NOARGS, "sent() -> whether the send is complete"},
    {"requests", (PyCFunction)Swap_requests, METH_NOARGS, "requests() -> (send, receive) handles, let go"},
    {NULL}};

static PyMemberDef Swap_members[] = {
    {"python", T_OBJECT, offsetof(Swap, python), 0, "what the Python path needs of the step"},
    {"done", T_PYSSIZET, offsetof(Swap, done), READONLY, "ops whose finish() returned 0"},
    {"waits", T_PYSSIZET, offsetof(Swap, waits), READONLY, "starts that returned PENDING"},
    {NULL}};

static PyGetSetDef Swap_getset[] = {{"mpi_error", (getter)Swap_mpi_error, NULL, NULL, NULL}, {NULL}};

static PyTypeObject SwapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "seccomm._pairswap.Swap",
    .tp_basicsize = sizeof(Swap),
    .tp_flags = Py_TPFLAGS_DEFAULT, /* (no GC: what it keeps never leads back to it, see express.py) */
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Swap_init,
    .tp_dealloc = (destructor)Swap_dealloc,
    .tp_methods = Swap_methods,
    .tp_getset = Swap_getset,
    .tp_members = Swap_members,
    .tp_doc = "The repeated two-rank swap of one sealed frame each way (seccomm.comm's express path).",
};

/* library() -> (MPI_Get_library_version's text, MPI_COMM_WORLD's handle as mpi4py shows handles):
 * seccomm.express.built compares both with mpi4py's, so that this module is used only with the
 * MPI library and handle ABI that mpi4py's communicators belong to */
static PyObject *library(PyObject *m, PyObject *unused)
{
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(text, &len) != MPI_SUCCESS)
        len = 0;
    return Py_BuildValue("(s#K)", text, (Py_ssize_t)len, (unsigned long long)(long long)MPI_COMM_WORLD);
}

static PyMethodDef module_methods[] = {
    {"library", library, METH_NOARGS, "library() -> (MPI library version text, MPI_COMM_WORLD handle)"},
    {NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pairswap", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit__pairswap(void)
{
    s_copy = PyUnicode_InternFromString("copy");
    s_update = PyUnicode_InternFromString("update");
    s_finalize = PyUnicode_InternFromString("finalize");
    if (!s_copy || !s_update || !s_finalize || PyType_Ready(&SwapType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&SwapType);
    if (PyModule_AddObject(m, "Swap", (PyObject *)&SwapType) < 0 ||
        PyModule_AddIntConstant(m, "PENDING", PENDING) < 0 || PyModule_AddIntConstant(m, "LENGTH", LENGTH) < 0 ||
        PyModule_AddIntConstant(m, "RECORD", RECORD) < 0 || PyModule_AddIntConstant(m, "TAG", TAG) < 0 ||
        PyModule_AddIntConstant(m, "MPIERR", MPIERR) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
