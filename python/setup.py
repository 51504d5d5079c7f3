"""Builds libattn from the source tree around this package (CMake) and ships
it inside the package, so `pip install ./python` gives a working attn with
nothing else installed. Offline:

    /usr/bin/python3 -m venv --system-site-packages venv
    venv/bin/pip install --no-build-isolation ./python

ATTN_PREBUILT_LIBRARY=/path/to/libattn.so copies that library instead of
building one (what `make python` links does the same for PYTHONPATH use).
"""
import glob
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)  # the repository: CMakeLists.txt, src/, include/


class BuildWithLibattn(build_py):
    """build_py, then libattn.so into the built package (never a symlink)."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "attn", "libattn.so")
        if os.path.lexists(target):
            os.remove(target)
        shutil.copyfile(self._library(), target)

    def _library(self):
        prebuilt = os.environ.get("ATTN_PREBUILT_LIBRARY")
        if prebuilt:
            return prebuilt
        if not os.path.exists(os.path.join(SOURCE, "CMakeLists.txt")):
            raise RuntimeError("attn: the libattn sources (../CMakeLists.txt) are not next to "
                               "this package; install from the repository's python/ directory "
                               "or set ATTN_PREBUILT_LIBRARY=/path/to/libattn.so")
        build = os.path.join(HERE, "build", "libattn")
        jobs = str(os.cpu_count() or 2)
        subprocess.run(["cmake", "-S", SOURCE, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                        "-DATTN_BUILD_TESTS=OFF", "-DATTN_MPI=OFF"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "attn_shared", "-j", jobs],
                       check=True)
        found = sorted(glob.glob(os.path.join(build, "libattn.so.*.*.*")))
        if not found:
            raise RuntimeError(f"attn: the CMake build left no libattn.so in {build}")
        return found[-1]


class BinaryDistribution(Distribution):
    """The wheel holds a compiled library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibattn}, distclass=BinaryDistribution)
