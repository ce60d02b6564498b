"""Ships the C library `make build` produced (../bin/libkvtier.so, or the file
KVTIER_LIB names) inside the built package, so `pip install ./python` needs
nothing else. Nothing is compiled here. The copy goes to the build directory,
never into the source tree, where it could shadow a newer bin/libkvtier.so."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

here = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        src = os.environ.get("KVTIER_LIB") or os.path.join(here, os.pardir, "bin", "libkvtier.so")
        if os.path.isfile(src):
            self.copy_file(src, os.path.join(self.build_lib, "kvtier", "libkvtier.so"))
        else:
            print("kvtier: %s not found: the package will look for the library at run time "
                  "(KVTIER_LIB, or the dynamic loader)" % src)


setup(cmdclass={"build_py": BuildPyWithLibrary})
