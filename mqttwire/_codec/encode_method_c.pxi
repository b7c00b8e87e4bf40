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

    /* The acknowledgements' common packet (reason code 0, no properties, a one-digit
       packet id, the version one of the small ints 3, 4, 5) written here, the fields
       read at their offsets in the instance: no Cython frame, no reference taken.
       Anything else goes to _encode_ack (mqttwire_ack_any), which handles it or hands
       it to the reference encoder. */
    static Py_ssize_t mqttwire_ack_pid_at, mqttwire_ack_code_at, mqttwire_ack_props_at;
    static PyObject *mqttwire_encode_three, *mqttwire_encode_four;
    static PyObject *(*mqttwire_ack_any)(PyObject *, PyObject *);

    MQTTWIRE_ALWAYS_INLINE long long mqttwire_digit(PyObject *v) {
        /* an int of one digit (below 2**30) and not negative, else -1 */
        if (Py_TYPE(v) != &PyLong_Type) return -1;
    #if PY_VERSION_HEX >= 0x030C0000
        if (!PyUnstable_Long_IsCompact((PyLongObject *)v)) return -1;
        return (long long)PyUnstable_Long_CompactValue((PyLongObject *)v);
    #else
        if (Py_SIZE(v) == 1) return (long long)((PyLongObject *)v)->ob_digit[0];
        return Py_SIZE(v) == 0 ? 0 : -1;
    #endif
    }

    MQTTWIRE_ALWAYS_INLINE PyObject *mqttwire_ack_encode(PyObject *self, PyObject *version,
                                                         unsigned int first) {
        char *base = (char *)self;
        long long pid = mqttwire_digit(*(PyObject **)(base + mqttwire_ack_pid_at));
        PyObject *code = *(PyObject **)(base + mqttwire_ack_code_at);
        PyObject *result;
        if (pid <= 0 || pid > 0xFFFF || mqttwire_digit(code) != 0
                || *(PyObject **)(base + mqttwire_ack_props_at) != Py_None
                || (version != mqttwire_encode_five && version != mqttwire_encode_four
                    && version != mqttwire_encode_three))
            return mqttwire_ack_any(self, version);
        result = mqttwire_bytes_new(4);
        if (result != NULL) {
            unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
            out[0] = (unsigned char)first;
            out[1] = 2;
            out[2] = (unsigned char)(pid >> 8);
            out[3] = (unsigned char)(pid & 0xFF);
        }
        return result;
    }
    static PyObject *mqttwire_puback_c(PyObject *self, PyObject *version) {
        return mqttwire_ack_encode(self, version, 0x40);
    }
    static PyObject *mqttwire_pubrec_c(PyObject *self, PyObject *version) {
        return mqttwire_ack_encode(self, version, 0x50);
    }
    static PyObject *mqttwire_pubrel_c(PyObject *self, PyObject *version) {
        return mqttwire_ack_encode(self, version, 0x62);  /* flags 0010 [MQTT-3.6.1-1] */
    }
    static PyObject *mqttwire_pubcomp_c(PyObject *self, PyObject *version) {
        return mqttwire_ack_encode(self, version, 0x70);
    }
    static int mqttwire_ack_prepare(void *any, Py_ssize_t pid_at, Py_ssize_t code_at,
                                    Py_ssize_t props_at) {
        mqttwire_ack_any = (PyObject *(*)(PyObject *, PyObject *))any;
        mqttwire_ack_pid_at = pid_at;
        mqttwire_ack_code_at = code_at;
        mqttwire_ack_props_at = props_at;
        mqttwire_encode_three = PyLong_FromLong(3);  /* kept for the module's life */
        mqttwire_encode_four = PyLong_FromLong(4);
        return mqttwire_encode_three == NULL || mqttwire_encode_four == NULL ? -1 : 0;
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
    int _ack_prepare "mqttwire_ack_prepare"(void* any, Py_ssize_t pid_at, Py_ssize_t code_at,
                                            Py_ssize_t props_at) except -1
    void* _puback_c "mqttwire_puback_c"
    void* _pubrec_c "mqttwire_pubrec_c"
    void* _pubrel_c "mqttwire_pubrel_c"
    void* _pubcomp_c "mqttwire_pubcomp_c"


# PUBLISH's encoder, in C for the common packet: its C code uses the output helpers of
# _codec/encode_c.pxi's C blocks (mqttwire_bytes_new, mqttwire_copy, mqttwire_plain,
# mqttwire_varint_write), which that file, included first, defines.
cdef extern from *:
    """
    /* The PUBLISH of a packet with no properties, or with the block it was decoded with,
       an ASCII topic, bytes payload, bool flags, int QoS and packet id: written in one
       pass into the result, the fields borrowed.  Any other packet goes to ``any``
       (_encode_publish_any), which handles it or hands it to the reference encoder. */
    static PyObject *mqttwire_publish_c(
            PyObject *pkt, PyObject *version_obj, int version, PyObject *topic,
            PyObject *payload, PyObject *qos_obj, PyObject *pid_obj, PyObject *dup_obj,
            PyObject *retain_obj, PyObject *raw, PyObject *props,
            PyObject *(*any)(PyObject *, PyObject *)) {
        long long qos = mqttwire_uint_in_range(qos_obj, 2), pid = 0;
        Py_ssize_t topic_len, props_len = 0, payload_len, body, n;
        const char *t, *block = NULL;
        unsigned char *out;
        PyObject *result;
        int flags;
        if (qos < 0 || Py_TYPE(topic) != &PyUnicode_Type || !PyUnicode_IS_COMPACT_ASCII(topic)
                || Py_TYPE(payload) != &PyBytes_Type)
            goto other;
        flags = (int)(qos << 1);
        if (dup_obj == Py_True && qos) flags |= 0x08;
        else if (dup_obj != Py_False) goto other;  /* DUP with QoS 0 is refused there */
        if (retain_obj == Py_True) flags |= 0x01;
        else if (retain_obj != Py_False) goto other;
        if (qos) {
            pid = mqttwire_uint_in_range(pid_obj, 0xFFFF);
            if (pid <= 0) goto other;
        } else if (pid_obj != Py_None) {
            goto other;
        }
        topic_len = PyUnicode_GET_LENGTH(topic);
        t = (const char *)PyUnicode_DATA(topic);
        if (topic_len == 0 || topic_len > 0xFFFF || !mqttwire_plain(t, topic_len, 1)) goto other;
        if (raw != Py_None) {  /* decoded, properties not read: copied as it is */
            if (version != 5) goto other;  /* which refuses it */
            block = PyBytes_AS_STRING(raw);
            props_len = PyBytes_GET_SIZE(raw);
        } else if (props != Py_None) {
            goto other;
        }
        payload_len = PyBytes_GET_SIZE(payload);
        body = 2 + topic_len + (qos ? 2 : 0) + payload_len;
        if (version == 5) body += (props_len < 0x80 ? 1 : props_len < 0x4000 ? 2 : 4) + props_len;
        if (body > MQTTWIRE_MAX_REMAINING_LENGTH) goto other;
        result = mqttwire_bytes_new(1 + (body < 0x80 ? 1 : body < 0x4000 ? 2 : body < 0x200000 ? 3 : 4) + body);
        if (result == NULL) return NULL;
        out = (unsigned char *)PyBytes_AS_STRING(result);
        out[0] = (unsigned char)(0x30 | flags);
        n = 1 + mqttwire_varint_write(out + 1, body);
        out[n] = (unsigned char)(topic_len >> 8);
        out[n + 1] = (unsigned char)(topic_len & 0xFF);
        mqttwire_copy(out + n + 2, t, topic_len);
        n += 2 + topic_len;
        if (qos) {
            out[n] = (unsigned char)(pid >> 8);
            out[n + 1] = (unsigned char)(pid & 0xFF);
            n += 2;
        }
        if (version == 5) {
            n += mqttwire_varint_write(out + n, props_len);
            mqttwire_copy(out + n, block, props_len);
            n += props_len;
        }
        mqttwire_copy(out + n, PyBytes_AS_STRING(payload), payload_len);
        return result;
    other:
        return any(pkt, version_obj);
    }
    """
    object _publish_c "mqttwire_publish_c"(
        PyObject* pkt, PyObject* version_obj, int version, PyObject* topic,
        PyObject* payload, PyObject* qos_obj, PyObject* pid_obj, PyObject* dup_obj,
        PyObject* retain_obj, PyObject* raw, PyObject* props, void* any)


cdef object _encode_publish(Publish pkt, object version_obj):
    """PUBLISH: the common packet in C (mqttwire_publish_c), the fields borrowed."""
    return _publish_c(<PyObject*>pkt, <PyObject*>version_obj, _check_version(version_obj),
                      <PyObject*>pkt.topic, <PyObject*>pkt.payload, <PyObject*>pkt.qos,
                      <PyObject*>pkt.packet_id, <PyObject*>pkt.dup, <PyObject*>pkt.retain,
                      <PyObject*>pkt._raw, <PyObject*>pkt._properties,
                      <void*>_encode_publish_any)


cdef object _encode_connect_call(Connect pkt, object version):
    return _encode_connect(pkt)  # encode()'s version is ignored: the packet has its own


_ack_prepare(<void*>_encode_ack, _field_offset(PubAck, "packet_id"),
             _field_offset(PubAck, "reason_code"), _field_offset(PubAck, "properties"))
_install_puback(<PyTypeObject*>PubAck, _puback_c)
_install_pubrec(<PyTypeObject*>PubRec, _pubrec_c)
_install_pubrel(<PyTypeObject*>PubRel, _pubrel_c)
_install_pubcomp(<PyTypeObject*>PubComp, _pubcomp_c)
_install_publish(<PyTypeObject*>Publish, <void*>_encode_publish)
_install_subscribe(<PyTypeObject*>Subscribe, <void*>_encode_subscribe)
_install_connect(<PyTypeObject*>Connect, <void*>_encode_connect_call)
