"""Package layout and the native part that pyproject.toml alone cannot express.

examples/ ships as the ``stave_examples`` package, so ``stave demo`` and ``stave bench`` run the same
plain scripts a user reads in the repository, whether stave is installed from a clone or a wheel.

``stave._jpeg_region`` (src/stave/_native/) is libjpeg-turbo's partial decode, the restart-marker
transcode stave pack stores, and a fused normalize for the image loader. It is optional: it needs a C
compiler and libjpeg-turbo's headers (Debian/Ubuntu ``libjpeg62-turbo-dev`` or ``libjpeg-turbo8-dev``,
Fedora ``libjpeg-turbo-devel``); where it cannot be built the install goes on, stave pack stores JPEG
bytes as given and the loader uses simplejpeg for the whole decode.

``stave._trace_times`` (src/stave/_native/trace_times.c) reads a trace's event times as exact
integer nanoseconds; where it is not built the trace reader takes its Python path (same numbers,
slower on traces with fractional timestamps).
"""

from setuptools import Extension, find_packages, setup

setup(
    packages=find_packages("src") + ["stave_examples"],
    package_dir={"": "src", "stave_examples": "examples"},
    ext_modules=[
        Extension(
            "stave._jpeg_region",
            sources=["src/stave/_native/jpeg_region.c", "src/stave/_native/jpeg_restart.c"],
            depends=["src/stave/_native/jpeg_errors.h", "src/stave/_native/jpeg_restart.h"],
            libraries=["jpeg"],
            # No FMA contraction: the fused normalize must round like torch's separate mul_ and sub_.
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        ),
        # Exact trace times (stave.trace.times): optional, the Python path gives the same numbers.
        Extension(
            "stave._trace_times",
            sources=["src/stave/_native/trace_times.c"],
            extra_compile_args=["-O3"],
            optional=True,
        ),
    ],
)
