"""The compiled codec (issue #30): built where a C compiler exists, else rmq runs on its pure-Python path.

Everything else about the package lives in pyproject.toml; ``optional=True`` turns a failed compile
into a warning, and ``rmqd`` then says ``codec pure`` on its start line.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rmq.protocol._fastframe",
            sources=["protocol/_fastframe.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
            optional=True,
        )
    ]
)
