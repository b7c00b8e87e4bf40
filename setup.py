"""Build the Cython extension, or on purpose a pure-Python wheel.

``MQTTWIRE_PURE_PYTHON=1`` at build time builds without the extension (for PyPy and
platforms without a compiler).  Otherwise the extension is required: a failed compile fails
the build loudly, because a silently slow install is worse than a clear error.
"""

import os
import platform

from setuptools import Extension, setup

PURE = bool(os.environ.get("MQTTWIRE_PURE_PYTHON")) or platform.python_implementation() != "CPython"

if PURE:
    print("*** mqttwire: pure-Python build (no C extension) ***")
    ext_modules = []
    options = {}
else:
    from Cython.Build import cythonize

    print("*** mqttwire: accelerated build (Cython extension) ***")
    # Every core, for the translation to C and for the C compiler (build_ext's parallel
    # option below): the modules build side by side.
    jobs = os.cpu_count() or 1
    ext_modules = cythonize(
        [
            Extension("mqttwire._speedups", ["mqttwire/_speedups.pyx"]),
            Extension("mqttwire._topics_c", ["mqttwire/_topics_c.pyx"]),
            Extension("mqttwire.capture.arrow_c", ["mqttwire/capture/arrow_c.pyx"]),
            Extension("mqttwire.capture.loop_c", ["mqttwire/capture/loop_c.pyx"]),
            Extension("mqttwire.capture.sections_c", ["mqttwire/capture/sections_c.pyx"]),
            Extension("mqttwire.spark.columns_c", ["mqttwire/spark/columns_c.pyx"]),
            Extension("mqttwire.spark.derive_c", ["mqttwire/spark/derive_c.pyx"]),
        ],
        compiler_directives={
            "language_level": 3,
            # No embedsignature: Cython 3.3 prints keyword-only parameters in the wrong
            # place, and without it the docstrings equal the fallback's exactly.
            # binding=True makes inspect.signature work on the extension's classes, which
            # the API-parity test compares with the fallback's.
            "binding": True,
            "freethreading_compatible": True,
        },
        nthreads=jobs,
    )
    options = {"build_ext": {"parallel": jobs}}

setup(ext_modules=ext_modules, options=options)
