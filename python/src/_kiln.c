/*
 * kiln._kiln — the C extension under `import kiln`: handles over kiln.h's objects and
 * nothing more. Argument conversion (devices, options, dicts by name, array protocols)
 * is python/kiln/__init__.py's; this file calls the C API and turns a failed status into
 * kiln.Error's subclass for it with the context's message.
 *
 * Python's limited API (abi3), so one wheel serves every CPython >= 3.8.
 *
 * Tensors cross the boundary through DLPack (kiln_tensor_from_dlpack / _to_dlpack): from_dlpack
 * takes a "dltensor" capsule (renamed "used_dltensor" once kiln owns it) and Tensor.to_dlpack
 * gives one whose destructor calls the deleter only when no consumer took it. Host and
 * CUDA tensors alike: a session's device inputs and outputs stay on the device.
 */
#define Py_LIMITED_API 0x03080000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "kiln_models.h"

/* One context for the module: kiln keeps its messages per thread, so threads share it. */
static kiln_context *g_ctx;
static PyObject *g_error;          /* kiln.Error */
static PyObject *g_errors[16];     /* per kiln_status */

static PyObject *raise_status(kiln_status st)
{
    PyObject *cls = (st > 0 && st < 16 && g_errors[st]) ? g_errors[st] : g_error;
    const char *msg = kiln_context_message(g_ctx);
    PyObject *exc = PyObject_CallFunction(cls, "s", (msg && *msg) ? msg : kiln_status_name(st));
    if (!exc) return NULL;
    PyObject *code = PyLong_FromLong((long)st);
    if (code) {
        PyObject_SetAttrString(exc, "status", code);
        Py_DECREF(code);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

#define CHECK(call)                                                                   \
    do {                                                                              \
        kiln_status st_ = (call);                                                     \
        if (st_ != KILN_OK) return raise_status(st_);                                 \
    } while (0)

static void dealloc_heap(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

/* ------------------------------------------------------------------- Tensor */

typedef struct {
    PyObject_HEAD
    kiln_tensor *t;
} TensorObject;

static PyTypeObject *Tensor_Type;

/* Tensor and Model handles come from this module's functions only (a handle with no object
 * behind it would reach kiln as NULL). */
static PyObject *no_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    PyErr_Format(PyExc_TypeError, "kiln: %s handles are made by kiln's functions, not called", "Tensor and Model");
    return NULL;
}

static PyObject *tensor_new_from(kiln_tensor *t)
{
    TensorObject *o = PyObject_New(TensorObject, Tensor_Type);
    if (!o) {
        kiln_tensor_free(t);
        return NULL;
    }
    o->t = t;
    return (PyObject *)o;
}

static void Tensor_dealloc(PyObject *self)
{
    TensorObject *o = (TensorObject *)self;
    kiln_tensor_free(o->t);
    dealloc_heap(self);
}

static kiln_tensor *as_tensor(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, Tensor_Type)) {
        PyErr_Format(PyExc_TypeError, "expected a kiln._kiln.Tensor, got %R", (PyObject *)Py_TYPE(obj));
        return NULL;
    }
    return ((TensorObject *)obj)->t;
}

static PyObject *Tensor_shape(PyObject *self, void *c)
{
    kiln_tensor *t = ((TensorObject *)self)->t;
    int nd = kiln_tensor_ndim(t);
    PyObject *tup = PyTuple_New(nd);
    if (!tup) return NULL;
    for (int i = 0; i < nd; i++) PyTuple_SetItem(tup, i, PyLong_FromLongLong(kiln_tensor_dim(t, i)));
    return tup;
}

static PyObject *Tensor_dtype(PyObject *self, void *c)
{
    return PyLong_FromLong((long)kiln_tensor_dtype(((TensorObject *)self)->t));
}

static PyObject *Tensor_device(PyObject *self, void *c)
{
    int index = 0;
    kiln_device dev = kiln_tensor_device(((TensorObject *)self)->t, &index);
    return Py_BuildValue("(ii)", (int)dev, index);
}

static PyObject *Tensor_data_ptr(PyObject *self, void *c)
{
    return PyLong_FromVoidPtr(kiln_tensor_data(((TensorObject *)self)->t));
}

static PyObject *Tensor_nbytes(PyObject *self, void *c)
{
    return PyLong_FromSize_t(kiln_tensor_nbytes(((TensorObject *)self)->t));
}

static PyObject *Tensor_channels_last(PyObject *self, void *c)
{
    return PyBool_FromLong(kiln_tensor_format(((TensorObject *)self)->t) == KILN_FORMAT_NHWC);
}

/* The capsule's destructor: a capsule no consumer renamed still owns its tensor. */
static void dltensor_capsule_free(PyObject *cap)
{
    if (!PyCapsule_IsValid(cap, "dltensor")) return; /* consumed ("used_dltensor") */
    DLManagedTensor *m = (DLManagedTensor *)PyCapsule_GetPointer(cap, "dltensor");
    if (m && m->deleter) m->deleter(m);
}


static PyObject *Tensor_to_dlpack(PyObject *self, PyObject *noargs)
{
    TensorObject *o = (TensorObject *)self;
    DLManagedTensor *m = NULL;
    CHECK(kiln_tensor_to_dlpack(g_ctx, o->t, &m));
    PyObject *cap = PyCapsule_New(m, "dltensor", dltensor_capsule_free);
    if (!cap && m->deleter) m->deleter(m);
    return cap;
}

/* A host copy of a tensor (of a CUDA one: through kiln_tensor_copy, which waits for it). */
static PyObject *Tensor_to_host(PyObject *self, PyObject *noargs)
{
    kiln_tensor *t = ((TensorObject *)self)->t, *h = NULL;
    int64_t dims[KILN_MAX_DIMS];
    int nd = kiln_tensor_ndim(t);
    for (int i = 0; i < nd; i++) dims[i] = kiln_tensor_dim(t, i);
    CHECK(kiln_tensor_create(g_ctx, kiln_tensor_dtype(t), nd, dims, &h));
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS
    st = kiln_tensor_copy(g_ctx, t, h);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) {
        kiln_tensor_free(h);
        return raise_status(st);
    }
    return tensor_new_from(h);
}

static PyGetSetDef Tensor_getset[] = {
    {"shape", Tensor_shape, NULL, "dims (tuple of int)", NULL},
    {"dtype", Tensor_dtype, NULL, "kiln_dtype code (ONNX's numbering)", NULL},
    {"device", Tensor_device, NULL, "(kiln_device, index)", NULL},
    {"data_ptr", Tensor_data_ptr, NULL, "address of the first element", NULL},
    {"nbytes", Tensor_nbytes, NULL, "bytes of data", NULL},
    {"channels_last", Tensor_channels_last, NULL, "True for NHWC memory", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef Tensor_methods[] = {
    {"to_dlpack", Tensor_to_dlpack, METH_NOARGS, "a 'dltensor' capsule viewing this tensor"},
    {"to_host", Tensor_to_host, METH_NOARGS, "a host copy"},
    {NULL, NULL, 0, NULL}};

static PyType_Slot Tensor_slots[] = {
    {Py_tp_new, no_new},
    {Py_tp_dealloc, Tensor_dealloc},
    {Py_tp_getset, Tensor_getset},
    {Py_tp_methods, Tensor_methods},
    {Py_tp_doc, "a kiln_tensor handle"},
    {0, NULL}};

static PyType_Spec Tensor_spec = {"kiln._kiln.Tensor", sizeof(TensorObject), 0, Py_TPFLAGS_DEFAULT, Tensor_slots};

/* from_dlpack(capsule) -> Tensor, bound without a copy. */
static PyObject *mod_from_dlpack(PyObject *mod, PyObject *cap)
{
    if (!PyCapsule_IsValid(cap, "dltensor")) {
        PyErr_SetString(PyExc_TypeError, "kiln: expected an unused 'dltensor' capsule (from __dlpack__)");
        return NULL;
    }
    DLManagedTensor *m = (DLManagedTensor *)PyCapsule_GetPointer(cap, "dltensor");
    kiln_tensor *t = NULL;
    CHECK(kiln_tensor_from_dlpack(g_ctx, m, &t));
    if (PyCapsule_SetName(cap, "used_dltensor") != 0) {
        kiln_tensor_free(t); /* kiln owns m now: this calls its deleter */
        return NULL;
    }
    return tensor_new_from(t);
}

/* empty(dtype, shape, device, device_index) -> a zeroed Tensor of its own. */
static PyObject *mod_empty(PyObject *mod, PyObject *args)
{
    int dtype, device = 0, index = 0;
    PyObject *shape;
    if (!PyArg_ParseTuple(args, "iO|ii", &dtype, &shape, &device, &index)) return NULL;
    int64_t dims[KILN_MAX_DIMS];
    PyObject *seq = PySequence_Fast(shape, "shape must be a sequence of ints");
    if (!seq) return NULL;
    Py_ssize_t nd = PySequence_Size(seq);
    if (nd > KILN_MAX_DIMS) {
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "kiln: %zd dims (at most %d)", nd, KILN_MAX_DIMS);
    }
    for (Py_ssize_t i = 0; i < nd; i++) {
        PyObject *v = PySequence_GetItem(seq, i); /* a new reference */
        dims[i] = v ? PyLong_AsLongLong(v) : -1;
        Py_XDECREF(v);
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) return NULL;
    kiln_tensor *t = NULL;
    CHECK(kiln_tensor_create_on(g_ctx, (kiln_dtype)dtype, (int)nd, dims, (kiln_device)device, index, &t));
    return tensor_new_from(t);
}

/* -------------------------------------------------------------------- Model */

typedef struct {
    PyObject_HEAD
    kiln_model *m;
} ModelObject;

static PyTypeObject *Model_Type;

static PyObject *model_new_from(kiln_model *m)
{
    ModelObject *o = PyObject_New(ModelObject, Model_Type);
    if (!o) {
        kiln_model_free(m);
        return NULL;
    }
    o->m = m;
    return (PyObject *)o;
}

static void Model_dealloc(PyObject *self)
{
    kiln_model_free(((ModelObject *)self)->m);
    dealloc_heap(self);
}

static PyObject *mod_load_onnx(PyObject *mod, PyObject *args)
{
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    kiln_model *m = NULL;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS
    st = kiln_model_load_onnx(g_ctx, path, &m);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) return raise_status(st);
    return model_new_from(m);
}

static PyObject *mod_load_onnx_bytes(PyObject *mod, PyObject *args)
{
    PyObject *bytes;
    const char *base_dir = NULL;
    if (!PyArg_ParseTuple(args, "O!|z", &PyBytes_Type, &bytes, &base_dir)) return NULL;
    char *data;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(bytes, &data, &n) != 0) return NULL;
    kiln_model *m = NULL;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS
    st = kiln_model_load_onnx_buffer(g_ctx, data, (size_t)n, base_dir, &m);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) return raise_status(st);
    return model_new_from(m);
}

static PyObject *mod_mnist_net(PyObject *mod, PyObject *args)
{
    long long batch;
    unsigned long long seed;
    int dropout;
    if (!PyArg_ParseTuple(args, "LKp", &batch, &seed, &dropout)) return NULL;
    kiln_model *m = NULL;
    CHECK(kiln_model_mnist_net(g_ctx, batch, seed, dropout, &m));
    return model_new_from(m);
}

/* (name, dtype, dims) with -1 where symbolic, or the dim's name where the model has one. */
static PyObject *io_info(const kiln_model *m, int i, int output)
{
    const char *name = output ? kiln_model_output_name(m, i) : kiln_model_input_name(m, i);
    kiln_dtype dt = KILN_DTYPE_UNDEFINED;
    int nd = -1;
    int64_t dims[KILN_MAX_DIMS];
    kiln_status st = KILN_OK;
    if (!output)
        st = kiln_model_input_info(m, i, &dt, &nd, dims);
    else
        st = kiln_model_output_info(m, i, &dt, &nd, dims);
    if (st != KILN_OK) return raise_status(st);
    if (nd < 0) return Py_BuildValue("(siO)", name, (int)dt, Py_None);
    PyObject *shape = PyTuple_New(nd);
    if (!shape) return NULL;
    for (int d = 0; d < nd; d++) {
        PyObject *v = NULL;
        const char *dn = output ? kiln_model_output_dim_name(m, i, d) : kiln_model_input_dim_name(m, i, d);
        if (dims[d] < 0 && dn && *dn) v = PyUnicode_FromString(dn);
        if (!v) v = dims[d] < 0 ? (Py_INCREF(Py_None), Py_None) : PyLong_FromLongLong(dims[d]);
        PyTuple_SetItem(shape, d, v);
    }
    PyObject *r = Py_BuildValue("(siO)", name, (int)dt, shape);
    Py_DECREF(shape);
    return r;
}

static PyObject *model_io(PyObject *self, int output)
{
    kiln_model *m = ((ModelObject *)self)->m;
    int n = output ? kiln_model_num_outputs(m) : kiln_model_num_inputs(m);
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *it = io_info(m, i, output);
        if (!it) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SetItem(list, i, it);
    }
    return list;
}

static PyObject *Model_inputs(PyObject *self, void *c) { return model_io(self, 0); }
static PyObject *Model_outputs(PyObject *self, void *c) { return model_io(self, 1); }
static PyObject *Model_num_nodes(PyObject *self, void *c)
{
    return PyLong_FromLong(kiln_model_num_nodes(((ModelObject *)self)->m));
}

static PyGetSetDef Model_getset[] = {
    {"inputs", Model_inputs, NULL, "[(name, dtype, shape)]", NULL},
    {"outputs", Model_outputs, NULL, "[(name, dtype, shape)]", NULL},
    {"num_nodes", Model_num_nodes, NULL, "nodes of the graph", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot Model_slots[] = {
    {Py_tp_new, no_new}, {Py_tp_dealloc, Model_dealloc}, {Py_tp_getset, Model_getset}, {Py_tp_doc, "a kiln_model handle"}, {0, NULL}};
static PyType_Spec Model_spec = {"kiln._kiln.Model", sizeof(ModelObject), 0, Py_TPFLAGS_DEFAULT, Model_slots};

/* ------------------------------------------------------------ option dicts */

/* Reads key from an options dict into *out when present (absent: untouched). */
static int opt_long(PyObject *d, const char *key, long long *out)
{
    PyObject *v = PyDict_GetItemString(d, key); /* borrowed */
    if (!v || v == Py_None) return 0;
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = x;
    return 0;
}

static int opt_int(PyObject *d, const char *key, int *out)
{
    long long x = *out;
    if (opt_long(d, key, &x) != 0) return -1;
    *out = (int)x;
    return 0;
}

static int opt_float(PyObject *d, const char *key, float *out)
{
    PyObject *v = PyDict_GetItemString(d, key);
    if (!v || v == Py_None) return 0;
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) return -1;
    *out = (float)x;
    return 0;
}

/* ------------------------------------------------------------------ Session */

typedef struct {
    PyObject_HEAD
    kiln_session *s;
    PyObject *model;
    int device, device_index;
    int n_in, n_out;
} SessionObject;

static PyTypeObject *Session_Type;

static void Session_dealloc(PyObject *self)
{
    SessionObject *o = (SessionObject *)self;
    kiln_session_free(o->s);
    Py_XDECREF(o->model);
    dealloc_heap(self);
}

/* Session(model, options: dict) */
static PyObject *Session_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    PyObject *model, *opts;
    if (!PyArg_ParseTuple(args, "O!O!", Model_Type, &model, &PyDict_Type, &opts)) return NULL;
    kiln_session_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    int dev = 0, prec = 0, index = 0;
    long long disable = 0, stream = 0;
    if (opt_int(opts, "device", &dev) || opt_int(opts, "threads", &o.threads) ||
        opt_int(opts, "no_fold", &o.no_fold) || opt_int(opts, "precision", &prec) ||
        opt_long(opts, "disable_passes", &disable) || opt_int(opts, "deterministic", &o.deterministic) ||
        opt_int(opts, "strict_fp32", &o.strict_fp32) || opt_int(opts, "device_index", &index) ||
        opt_long(opts, "stream", &stream))
        return NULL;
    o.device = (kiln_device)dev;
    o.precision = (kiln_precision)prec;
    o.disable_passes = (unsigned)disable;
    o.device_index = index;
    o.stream = (void *)(intptr_t)stream;
    kiln_session *s = NULL;
    kiln_model *m = ((ModelObject *)model)->m;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS
    st = kiln_session_create(m, &o, &s);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) return raise_status(st);
    allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    SessionObject *self = (SessionObject *)alloc(tp, 0);
    if (!self) {
        kiln_session_free(s);
        return NULL;
    }
    self->s = s;
    self->model = model;
    Py_INCREF(model);
    self->device = dev;
    self->device_index = index;
    self->n_in = kiln_model_num_inputs(m);
    self->n_out = kiln_model_num_outputs(m);
    return (PyObject *)self;
}

/* Fills ts[0..n) from a sequence of Tensor handles (or None where allowed). */
static int tensor_list(PyObject *seq_in, int want, const char *what, kiln_tensor **ts, PyObject **objs, int allow_none)
{
    PyObject *seq = PySequence_Fast(seq_in, "expected a sequence of tensors");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Size(seq);
    if (n != want) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "kiln: %zd %s given, the model has %d", n, what, want);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_GetItem(seq, i); /* new reference */
        if (!it) {
            Py_DECREF(seq);
            return -1;
        }
        objs[i] = it;
        if (it == Py_None && allow_none) {
            ts[i] = NULL;
            continue;
        }
        ts[i] = as_tensor(it);
        if (!ts[i]) {
            for (Py_ssize_t k = 0; k <= i; k++) Py_DECREF(objs[k]);
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

/* run(inputs, outputs) -> list of Tensor: inputs in model order; outputs a list with a
 * Tensor to write output j into, or None where kiln allocates one for the caller. */
static PyObject *Session_run(PyObject *self, PyObject *args)
{
    SessionObject *so = (SessionObject *)self;
    PyObject *in_seq, *out_seq;
    if (!PyArg_ParseTuple(args, "OO", &in_seq, &out_seq)) return NULL;
    kiln_tensor *ins[64], *outs[64];
    PyObject *in_objs[64], *out_objs[64];
    PyObject *result = NULL;
    if (so->n_in > 64 || so->n_out > 64) {
        PyErr_SetString(PyExc_ValueError, "kiln: the binding runs models of at most 64 inputs and outputs");
        return NULL;
    }
    if (tensor_list(in_seq, so->n_in, "inputs", ins, in_objs, 0) != 0) return NULL;
    if (tensor_list(out_seq, so->n_out, "outputs", outs, out_objs, 1) != 0) {
        for (int i = 0; i < so->n_in; i++) Py_DECREF(in_objs[i]);
        return NULL;
    }
    result = PyList_New(so->n_out);
    if (!result) goto done;
    kiln_status st;
    for (int j = 0; j < so->n_out; j++) {
        PyObject *o;
        if (outs[j]) {
            o = out_objs[j];
            Py_INCREF(o);
        } else {
            kiln_dtype dt;
            int nd;
            int64_t dims[KILN_MAX_DIMS];
            kiln_tensor *t = NULL;
            st = kiln_session_output_info(so->s, so->n_in, ins, j, &dt, &nd, dims);
            if (st == KILN_OK)
                st = kiln_tensor_create_on(g_ctx, dt, nd, dims, (kiln_device)so->device, so->device_index, &t);
            if (st != KILN_OK) {
                raise_status(st);
                Py_CLEAR(result);
                goto done;
            }
            o = tensor_new_from(t);
            if (!o) {
                Py_CLEAR(result);
                goto done;
            }
            outs[j] = t;
        }
        PyList_SetItem(result, j, o);
    }
    Py_BEGIN_ALLOW_THREADS
    st = kiln_session_run_into(so->s, so->n_in, ins, so->n_out, outs);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) {
        raise_status(st);
        Py_CLEAR(result);
    }
done:
    for (int i = 0; i < so->n_in; i++) Py_DECREF(in_objs[i]);
    for (int j = 0; j < so->n_out; j++) Py_DECREF(out_objs[j]);
    return result;
}

static PyObject *Session_stream(PyObject *self, void *c)
{
    return PyLong_FromVoidPtr(kiln_session_stream(((SessionObject *)self)->s));
}

static PyObject *Session_stats(PyObject *self, PyObject *noargs)
{
    kiln_plan_stats s;
    CHECK(kiln_session_stats(((SessionObject *)self)->s, &s));
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:i,s:i}", "arena_bytes", (Py_ssize_t)s.arena_bytes, "naive_bytes",
                         (Py_ssize_t)s.naive_bytes, "constant_bytes", (Py_ssize_t)s.constant_bytes,
                         "workspace_bytes", (Py_ssize_t)s.workspace_bytes, "nodes", s.nodes, "folded", s.folded);
}

static PyMethodDef Session_methods[] = {
    {"run", Session_run, METH_VARARGS, "run(inputs, outputs) -> [Tensor]"},
    {"stats", Session_stats, METH_NOARGS, "the last run's plan statistics"},
    {NULL, NULL, 0, NULL}};
static PyGetSetDef Session_getset[] = {
    {"stream", Session_stream, NULL, "the cudaStream_t runs are ordered on (0 on the CPU)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};
static PyType_Slot Session_slots[] = {
    {Py_tp_new, Session_new},         {Py_tp_dealloc, Session_dealloc}, {Py_tp_methods, Session_methods},
    {Py_tp_getset, Session_getset},   {Py_tp_doc, "a kiln_session handle"}, {0, NULL}};
static PyType_Spec Session_spec = {"kiln._kiln.Session", sizeof(SessionObject), 0, Py_TPFLAGS_DEFAULT, Session_slots};

/* ------------------------------------------------------------------ Trainer */

typedef struct {
    PyObject_HEAD
    kiln_trainer *t;
    PyObject *model;
    int n_in;
} TrainerObject;

static PyTypeObject *Trainer_Type;

static void Trainer_dealloc(PyObject *self)
{
    TrainerObject *o = (TrainerObject *)self;
    kiln_trainer_free(o->t);
    Py_XDECREF(o->model);
    dealloc_heap(self);
}

/* Trainer(model, loss, options: dict) */
static PyObject *Trainer_new(PyTypeObject *tp, PyObject *args, PyObject *kw)
{
    PyObject *model, *d;
    const char *loss;
    if (!PyArg_ParseTuple(args, "O!sO!", Model_Type, &model, &loss, &PyDict_Type, &d)) return NULL;
    kiln_train_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    int dev = 0, optim = 0, sched = 0, amp = 0;
    long long step_size = 0, total = 0, warmup = 0, seed = 0, disable = 0;
    if (opt_int(d, "device", &dev) || opt_int(d, "device_index", &o.device_index) ||
        opt_int(d, "optimizer", &optim) || opt_float(d, "lr", &o.lr) ||
        opt_float(d, "momentum", &o.momentum) || opt_int(d, "nesterov", &o.nesterov) ||
        opt_float(d, "weight_decay", &o.weight_decay) || opt_float(d, "beta1", &o.beta1) ||
        opt_float(d, "beta2", &o.beta2) || opt_float(d, "eps", &o.eps) || opt_float(d, "rho", &o.rho) ||
        opt_int(d, "schedule", &sched) || opt_long(d, "step_size", &step_size) ||
        opt_float(d, "gamma", &o.gamma) || opt_long(d, "total_steps", &total) ||
        opt_long(d, "warmup_steps", &warmup) || opt_int(d, "amp", &amp) ||
        opt_int(d, "accumulate", &o.accumulate) || opt_long(d, "seed", &seed) ||
        opt_int(d, "threads", &o.threads) || opt_int(d, "strict_fp32", &o.strict_fp32) ||
        opt_int(d, "deterministic", &o.deterministic) || opt_long(d, "disable_passes", &disable) ||
        opt_float(d, "lars_eta", &o.lars_eta) || opt_float(d, "clip_grad_norm", &o.clip_grad_norm) ||
        opt_int(d, "no_decay_bn_bias", &o.no_decay_bn_bias))
        return NULL;
    o.device = (kiln_device)dev;
    o.optimizer = (kiln_optimizer)optim;
    o.schedule = (kiln_schedule)sched;
    o.amp = (kiln_amp)amp;
    o.step_size = step_size;
    o.total_steps = total;
    o.warmup_steps = warmup;
    o.seed = (uint64_t)seed;
    o.disable_passes = (unsigned)disable;
    kiln_trainer *t = NULL;
    kiln_model *m = ((ModelObject *)model)->m;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS
    st = kiln_trainer_create(m, loss, &o, &t);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) return raise_status(st);
    allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    TrainerObject *self = (TrainerObject *)alloc(tp, 0);
    if (!self) {
        kiln_trainer_free(t);
        return NULL;
    }
    self->t = t;
    self->model = model;
    Py_INCREF(model);
    self->n_in = kiln_model_num_inputs(m);
    return (PyObject *)self;
}

static PyObject *Trainer_step(PyObject *self, PyObject *args)
{
    TrainerObject *to = (TrainerObject *)self;
    PyObject *in_seq;
    if (!PyArg_ParseTuple(args, "O", &in_seq)) return NULL;
    kiln_tensor *ins[64];
    PyObject *objs[64];
    if (to->n_in > 64) return PyErr_Format(PyExc_ValueError, "kiln: at most 64 inputs");
    if (tensor_list(in_seq, to->n_in, "inputs", ins, objs, 0) != 0) return NULL;
    float loss = 0;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS
    st = kiln_trainer_step(to->t, to->n_in, ins, &loss);
    Py_END_ALLOW_THREADS
    for (int i = 0; i < to->n_in; i++) Py_DECREF(objs[i]);
    if (st != KILN_OK) return raise_status(st);
    return PyFloat_FromDouble(loss);
}

static PyObject *Trainer_train_epoch(PyObject *self, PyObject *args)
{
    PyObject *images, *labels;
    long long batch, epoch, start, end;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOLKLLL", &images, &labels, &batch, &seed, &epoch, &start, &end)) return NULL;
    kiln_tensor *im = as_tensor(images), *lb = im ? as_tensor(labels) : NULL;
    if (!lb) return NULL;
    float loss = 0;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS
    st = kiln_trainer_train_epoch(((TrainerObject *)self)->t, im, lb, batch, seed, epoch, start, end, &loss);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) return raise_status(st);
    return PyFloat_FromDouble(loss);
}

static PyObject *Trainer_warmup(PyObject *self, PyObject *args)
{
    PyObject *images, *labels;
    long long batch;
    if (!PyArg_ParseTuple(args, "OOL", &images, &labels, &batch)) return NULL;
    kiln_tensor *im = as_tensor(images), *lb = im ? as_tensor(labels) : NULL;
    if (!lb) return NULL;
    kiln_status st;
    Py_BEGIN_ALLOW_THREADS
    st = kiln_trainer_warmup(((TrainerObject *)self)->t, im, lb, batch);
    Py_END_ALLOW_THREADS
    if (st != KILN_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *Trainer_save(PyObject *self, PyObject *args)
{
    const char *path;
    long long epoch = 0, step = 0;
    if (!PyArg_ParseTuple(args, "s|LL", &path, &epoch, &step)) return NULL;
    CHECK(kiln_trainer_save(((TrainerObject *)self)->t, path, epoch, step));
    Py_RETURN_NONE;
}

static PyObject *Trainer_load(PyObject *self, PyObject *args)
{
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    int64_t epoch = 0, step = 0;
    CHECK(kiln_trainer_load(((TrainerObject *)self)->t, path, &epoch, &step));
    return Py_BuildValue("(LL)", (long long)epoch, (long long)step);
}

static PyObject *Trainer_export(PyObject *self, PyObject *args)
{
    const char *output;
    if (!PyArg_ParseTuple(args, "s", &output)) return NULL;
    kiln_model *m = NULL;
    CHECK(kiln_trainer_export(((TrainerObject *)self)->t, output, &m));
    return model_new_from(m);
}

static PyObject *Trainer_stats(PyObject *self, PyObject *noargs)
{
    kiln_train_stats s;
    CHECK(kiln_trainer_stats(((TrainerObject *)self)->t, &s));
    return Py_BuildValue("{s:L,s:L,s:L,s:d,s:d,s:i,s:L}", "micro_steps", (long long)s.micro_steps, "steps",
                         (long long)s.steps, "skipped_steps", (long long)s.skipped_steps, "lr", (double)s.lr,
                         "loss_scale", (double)s.loss_scale, "params", s.params, "param_count",
                         (long long)s.param_count);
}

static PyMethodDef Trainer_methods[] = {
    {"step", Trainer_step, METH_VARARGS, "step(inputs) -> loss"},
    {"train_epoch", Trainer_train_epoch, METH_VARARGS, "train_epoch(images, labels, batch, seed, epoch, start, end)"},
    {"warmup", Trainer_warmup, METH_VARARGS, "warmup(images, labels, batch)"},
    {"save", Trainer_save, METH_VARARGS, "save(path, epoch, step_in_epoch)"},
    {"load", Trainer_load, METH_VARARGS, "load(path) -> (epoch, step_in_epoch)"},
    {"export", Trainer_export, METH_VARARGS, "export(output) -> Model"},
    {"stats", Trainer_stats, METH_NOARGS, "counters and learning rate"},
    {NULL, NULL, 0, NULL}};
static PyType_Slot Trainer_slots[] = {
    {Py_tp_new, Trainer_new}, {Py_tp_dealloc, Trainer_dealloc}, {Py_tp_methods, Trainer_methods},
    {Py_tp_doc, "a kiln_trainer handle"}, {0, NULL}};
static PyType_Spec Trainer_spec = {"kiln._kiln.Trainer", sizeof(TrainerObject), 0, Py_TPFLAGS_DEFAULT, Trainer_slots};

/* ------------------------------------------------------------------- module */

static PyObject *mod_version(PyObject *mod, PyObject *noargs) { return PyUnicode_FromString(kiln_version()); }

static PyObject *mod_op_names(PyObject *mod, PyObject *noargs)
{
    int n = kiln_op_count();
    PyObject *l = PyList_New(n);
    if (!l) return NULL;
    for (int i = 0; i < n; i++) PyList_SetItem(l, i, PyUnicode_FromString(kiln_op_name(i)));
    return l;
}

static PyObject *mod_set_threads(PyObject *mod, PyObject *args)
{
    int n;
    if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
    CHECK(kiln_context_set_threads(g_ctx, n));
    Py_RETURN_NONE;
}

/* kiln_context_set_log into a Python callable fn(level: int, message: str), called on the
 * thread of the kiln call that logs (the GIL taken there). */
static PyObject *g_log_fn;

static void log_trampoline(void *user, kiln_log_level level, const char *message)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb); /* a pending exception stays as it was */
    PyObject *fn = g_log_fn;
    if (fn) {
        Py_INCREF(fn);
        PyObject *r = PyObject_CallFunction(fn, "is", (int)level, message);
        if (!r) PyErr_WriteUnraisable(fn);
        Py_XDECREF(r);
        Py_DECREF(fn);
    }
    PyErr_Restore(type, value, tb);
    PyGILState_Release(g);
}

static PyObject *mod_set_log(PyObject *mod, PyObject *args)
{
    PyObject *fn;
    int level;
    if (!PyArg_ParseTuple(args, "Oi", &fn, &level)) return NULL;
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "kiln: the log function must be callable (or None)");
        return NULL;
    }
    kiln_status st = fn == Py_None ? kiln_context_set_log(g_ctx, (kiln_log_level)level, NULL, NULL)
                                   : kiln_context_set_log(g_ctx, (kiln_log_level)level, log_trampoline, NULL);
    if (st != KILN_OK) return raise_status(st);
    PyObject *old = g_log_fn;
    g_log_fn = fn == Py_None ? NULL : fn;
    Py_XINCREF(g_log_fn);
    Py_XDECREF(old);
    Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
    {"set_log", mod_set_log, METH_VARARGS, "set_log(fn or None, max_level): kiln_context_set_log"},
    {"version", mod_version, METH_NOARGS, "kiln_version()"},
    {"op_names", mod_op_names, METH_NOARGS, "the ops kiln knows"},
    {"set_threads", mod_set_threads, METH_VARARGS, "kiln_context_set_threads"},
    {"from_dlpack", mod_from_dlpack, METH_O, "from_dlpack(capsule) -> Tensor (no copy)"},
    {"empty", mod_empty, METH_VARARGS, "empty(dtype, shape, device=0, index=0) -> zeroed Tensor"},
    {"load_onnx", mod_load_onnx, METH_VARARGS, "load_onnx(path) -> Model"},
    {"load_onnx_bytes", mod_load_onnx_bytes, METH_VARARGS, "load_onnx_bytes(data, base_dir=None) -> Model"},
    {"mnist_net", mod_mnist_net, METH_VARARGS, "mnist_net(batch, seed, dropout) -> Model"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kiln_module = {PyModuleDef_HEAD_INIT, "_kiln", "kiln's C API (see kiln/__init__.py)", -1,
                                         mod_methods, NULL, NULL, NULL, NULL};

static int add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **out, const char *name)
{
    PyObject *t = PyType_FromSpec(spec);
    if (!t) return -1;
    *out = (PyTypeObject *)t;
    Py_INCREF(t);
    if (PyModule_AddObject(m, name, t) != 0) {
        Py_DECREF(t);
        return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__kiln(void)
{
    static const struct { kiln_status st; const char *name; } errs[] = {
        {KILN_ERR_INVALID_ARGUMENT, "InvalidArgumentError"}, {KILN_ERR_OUT_OF_MEMORY, "OutOfMemoryError"},
        {KILN_ERR_IO, "IOError"},           {KILN_ERR_PARSE, "ParseError"},
        {KILN_ERR_SHAPE, "ShapeError"},     {KILN_ERR_TYPE, "DTypeError"},
        {KILN_ERR_UNSUPPORTED, "UnsupportedError"}, {KILN_ERR_GRAPH, "GraphError"},
        {KILN_ERR_DEVICE, "DeviceError"},   {KILN_ERR_INTERNAL, "InternalError"}};
    PyObject *m = PyModule_Create(&kiln_module);
    if (!m) return NULL;
    if (!g_ctx && kiln_context_create(&g_ctx) != KILN_OK) {
        PyErr_SetString(PyExc_MemoryError, "kiln: kiln_context_create failed");
        goto fail;
    }
    g_error = PyErr_NewExceptionWithDoc("kiln.Error", "kiln's failed status; .status is the kiln_status code",
                                        PyExc_RuntimeError, NULL);
    if (!g_error || PyModule_AddObject(m, "Error", (Py_INCREF(g_error), g_error)) != 0) goto fail;
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++) {
        char full[64];
        snprintf(full, sizeof full, "kiln.%s", errs[i].name);
        PyObject *e = PyErr_NewException(full, g_error, NULL);
        if (!e) goto fail;
        g_errors[errs[i].st] = e;
        Py_INCREF(e);
        if (PyModule_AddObject(m, errs[i].name, e) != 0) goto fail;
    }
    if (add_type(m, &Tensor_spec, &Tensor_Type, "Tensor") || add_type(m, &Model_spec, &Model_Type, "Model") ||
        add_type(m, &Session_spec, &Session_Type, "Session") || add_type(m, &Trainer_spec, &Trainer_Type, "Trainer"))
        goto fail;
    PyObject *passes = Py_BuildValue(
        "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "dead-nodes", (unsigned)KILN_PASS_DEAD_NODES,
        "fold-bn", (unsigned)KILN_PASS_FOLD_BN, "fuse-conv", (unsigned)KILN_PASS_FUSE_CONV, "fuse-eltwise",
        (unsigned)KILN_PASS_FUSE_ELTWISE, "nhwc", (unsigned)KILN_PASS_NHWC, "pad-channels",
        (unsigned)KILN_PASS_PAD_CHANNELS, "cuda-graph", (unsigned)KILN_PASS_CUDA_GRAPH, "autotune",
        (unsigned)KILN_PASS_AUTOTUNE, "conv-gemm", (unsigned)KILN_PASS_CONV_GEMM, "conv-direct",
        (unsigned)KILN_PASS_CONV_DIRECT, "fuse-loss", (unsigned)KILN_PASS_FUSE_LOSS, "streams",
        (unsigned)KILN_PASS_STREAMS, "fuse-pool", (unsigned)KILN_PASS_FUSE_POOL, "fuse-bn",
        (unsigned)KILN_PASS_FUSE_BN, "conv-depthwise", (unsigned)KILN_PASS_CONV_DEPTHWISE, "fuse-attention",
        (unsigned)KILN_PASS_FUSE_ATTENTION, "fuse-silu-gelu", (unsigned)KILN_PASS_FUSE_SILU_GELU,
        "fold-constants", (unsigned)KILN_PASS_FOLD_CONSTANTS, "crop-taps", (unsigned)KILN_PASS_CROP_TAPS,
        "channel-gather", (unsigned)KILN_PASS_CHANNEL_GATHER, "gemm-residual", (unsigned)KILN_PASS_GEMM_RESIDUAL,
        "attention-rows", (unsigned)KILN_PASS_ATTENTION_ROWS, "conv-patch", (unsigned)KILN_PASS_CONV_PATCH, "mean-pool",
        (unsigned)KILN_PASS_MEAN_POOL, "space-to-depth", (unsigned)KILN_PASS_SPACE_TO_DEPTH, "fold-scale",
        (unsigned)KILN_PASS_FOLD_SCALE, "row-gather", (unsigned)KILN_PASS_ROW_GATHER);
    if (!passes || PyModule_AddObject(m, "PASSES", passes) != 0) goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
