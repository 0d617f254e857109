"""The compiled codec and store append (issue #30): built where a C compiler exists, else rmq runs on its
pure-Python path.

Everything else about the package lives in pyproject.toml; ``optional=True`` turns a failed compile
into a warning, and ``rmqd`` then says ``codec pure`` / ``store pure`` on its start line.
"""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

# each extension's C files (``make fuzz-asan`` builds protocol/<name>*.c the same way)
_SOURCES = {
    "_fastframe": ["protocol/_fastframe.c", "protocol/_fastframe_record.c"],
    "_faststore": ["protocol/_faststore.c", "protocol/_faststore_cq.c", "protocol/_faststore_send.c",
                   "protocol/_faststore_batch.c", "protocol/_faststore_reput.c", "protocol/_faststore_pull.c",
                   "protocol/_faststore_pullreq.c"],
}

setup(
    ext_modules=[
        Extension(f"rmq.protocol.{name}", sources=sources, depends=["protocol/_faststore.h", "protocol/_faststore_send.h"],
                  extra_compile_args=_FLAGS, optional=True)
        for name, sources in _SOURCES.items()
    ]
)
