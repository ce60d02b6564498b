"""Copies the library `make build` produced (../bin/libkvtier.so) into the
package before setuptools builds it, so `pip install ./python` ships it.
Nothing is compiled here."""

import os
import shutil

from setuptools import setup

here = os.path.dirname(os.path.abspath(__file__))
built = os.path.join(here, os.pardir, "bin", "libkvtier.so")
shipped = os.path.join(here, "kvtier", "libkvtier.so")
if os.path.isfile(built) and os.environ.get("KVTIER_NO_BUNDLE") is None:
    shutil.copyfile(built, shipped)

setup()
