"""Builds the extension ferry._ferry with CMake (the project's own build, target _ferry)
for the interpreter running pip, and ships it in the package. pyproject.toml holds the
metadata; see it for the pip command."""
import os
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("FERRY_BUILD_DIR") or os.path.join(HERE, "build-pip", "cmake")
        build = os.path.abspath(build)
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", HERE, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                                   "-DFERRY_BUILD_TESTS=OFF", "-DFERRY_BUILD_BENCH=OFF",
                                   "-DPython3_EXECUTABLE=" + sys.executable])
        subprocess.check_call(["cmake", "--build", build, "--target", "_ferry", "-j", str(os.cpu_count() or 1)])
        built = os.path.join(build, "python", "ferry")
        name = [f for f in os.listdir(built) if f.startswith("_ferry") and f.endswith(".so")]
        if len(name) != 1:
            raise RuntimeError("the CMake build made no single _ferry*.so in %s: %s" % (built, name))
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        self.copy_file(os.path.join(built, name[0]), dest)


setup(ext_modules=[Extension("ferry._ferry", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": os.path.join(HERE, "build-pip", "setuptools")}})
