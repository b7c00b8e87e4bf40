# Included by _speedups.pyx (one extension module), after _codec/encode_c.pxi, whose C
# encoders it installs; they are declared in _speedups.pxd.
#
# encode() of the packets that the benchmarks and a broker's hot path encode (PUBLISH, the
# four acknowledgements, SUBSCRIBE, CONNECT): a METH_FASTCALL | METH_KEYWORDS C function,
# installed in the class in place of Cython's method and as a method descriptor too, so
# that CPython still calls it directly (CALL_METHOD_DESCRIPTOR_FAST_WITH_KEYWORDS).
# encode(version) and encode() go straight to the C encoder, the argument borrowed; any
# other call (a keyword, too many arguments) to Cython's method, kept aside, which parses
# the arguments and words their errors as before.  Cython's wrapper did that parsing on
# every call, and took a reference to the argument: about 40 instructions per encode on
# 3.11, a tenth of a PUBACK encode above the benchmark loop (benchmarks/peers.md, "Issue
# 44, fourth pass").
cdef extern from *:
    """
    static PyObject *mqttwire_encode_five;  /* the default version, 5 */

    #if defined(__GNUC__)
    __attribute__((noinline))
    #endif
    static PyObject *mqttwire_encode_parsed(PyObject *method, PyObject *self,
                                            PyObject *const *args, Py_ssize_t nargs,
                                            PyObject *kwnames) {
        PyObject *small[8], **stack = small, *result;
        Py_ssize_t i, n = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
        if (n >= 8) {
            stack = (PyObject **)PyMem_Malloc((size_t)(n + 1) * sizeof(PyObject *));
            if (stack == NULL) return PyErr_NoMemory();
        }
        stack[0] = self;
        for (i = 0; i < n; i++) stack[i + 1] = args[i];
        result = PyObject_Vectorcall(method, stack, (size_t)nargs + 1, kwnames);
        if (stack != small) PyMem_Free(stack);
        return result;
    }

    #define MQTTWIRE_ENCODE_METHOD(name)                                                   \\
        static PyObject *(*mqttwire_##name##_encoder)(PyObject *, PyObject *);             \\
        static PyObject *mqttwire_##name##_parsed;                                         \\
        static PyObject *mqttwire_##name##_encode(PyObject *self, PyObject *const *args,   \\
                                                  Py_ssize_t nargs, PyObject *kwnames) {   \\
            if (kwnames == NULL) {                                                         \\
                if (nargs == 1) return mqttwire_##name##_encoder(self, args[0]);           \\
                if (nargs == 0) return mqttwire_##name##_encoder(self, mqttwire_encode_five); \\
            }                                                                              \\
            return mqttwire_encode_parsed(mqttwire_##name##_parsed, self, args, nargs,     \\
                                          kwnames);                                        \\
        }                                                                                  \\
        static PyMethodDef mqttwire_##name##_def = {                                       \\
            "encode", (PyCFunction)(void (*)(void))mqttwire_##name##_encode,              \\
            METH_FASTCALL | METH_KEYWORDS, "encode(self, version=5)\\n--\\n\\n"};          \\
        static int mqttwire_##name##_install(PyTypeObject *type, void *encoder) {          \\
            PyObject *descr, *dict = type->tp_dict;                                        \\
            if (mqttwire_encode_five == NULL) {                                            \\
                mqttwire_encode_five = PyLong_FromLong(5);  /* kept for the module's life */ \\
                if (mqttwire_encode_five == NULL) return -1;                               \\
            }                                                                              \\
            mqttwire_##name##_parsed = PyDict_GetItemString(dict, "encode");               \\
            if (mqttwire_##name##_parsed == NULL) {                                        \\
                PyErr_SetString(PyExc_ImportError, "no encode() to replace");              \\
                return -1;                                                                 \\
            }                                                                              \\
            Py_INCREF(mqttwire_##name##_parsed);  /* for the module's life */              \\
            mqttwire_##name##_encoder = (PyObject *(*)(PyObject *, PyObject *))encoder;    \\
            descr = PyDescr_NewMethod(type, &mqttwire_##name##_def);                       \\
            if (descr == NULL || PyDict_SetItemString(dict, "encode", descr) < 0) {        \\
                Py_XDECREF(descr);                                                         \\
                return -1;                                                                 \\
            }                                                                              \\
            Py_DECREF(descr);                                                              \\
            PyType_Modified(type);                                                         \\
            return 0;                                                                      \\
        }

    /* one per class: the method descriptor's check is of the exact class, and the C
       function has no other way to know its encoder */
    MQTTWIRE_ENCODE_METHOD(puback)
    MQTTWIRE_ENCODE_METHOD(pubrec)
    MQTTWIRE_ENCODE_METHOD(pubrel)
    MQTTWIRE_ENCODE_METHOD(pubcomp)
    MQTTWIRE_ENCODE_METHOD(publish)
    MQTTWIRE_ENCODE_METHOD(subscribe)
    MQTTWIRE_ENCODE_METHOD(connect)
    """
    int _install_puback "mqttwire_puback_install"(PyTypeObject* t, void* f) except -1
    int _install_pubrec "mqttwire_pubrec_install"(PyTypeObject* t, void* f) except -1
    int _install_pubrel "mqttwire_pubrel_install"(PyTypeObject* t, void* f) except -1
    int _install_pubcomp "mqttwire_pubcomp_install"(PyTypeObject* t, void* f) except -1
    int _install_publish "mqttwire_publish_install"(PyTypeObject* t, void* f) except -1
    int _install_subscribe "mqttwire_subscribe_install"(PyTypeObject* t, void* f) except -1
    int _install_connect "mqttwire_connect_install"(PyTypeObject* t, void* f) except -1


cdef object _encode_connect_call(Connect pkt, object version):
    return _encode_connect(pkt)  # encode()'s version is ignored: the packet has its own


_install_puback(<PyTypeObject*>PubAck, <void*>_encode_ack)
_install_pubrec(<PyTypeObject*>PubRec, <void*>_encode_ack)
_install_pubrel(<PyTypeObject*>PubRel, <void*>_encode_ack)
_install_pubcomp(<PyTypeObject*>PubComp, <void*>_encode_ack)
_install_publish(<PyTypeObject*>Publish, <void*>_encode_publish)
_install_subscribe(<PyTypeObject*>Subscribe, <void*>_encode_subscribe)
_install_connect(<PyTypeObject*>Connect, <void*>_encode_connect_call)
