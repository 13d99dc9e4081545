"""Build step for the mcphost wheel: bundle libmcphost inside the package.

``MCPHOST_WHEEL_LIBRARY`` names the built library (``target/…/libmcphost.so``
or ``.dylib``); scripts/test-python.sh sets it. The wheel is then tagged for
this platform (it carries native code, though no extension of ours).
Without the variable the build fails: a wheel without its library would
only work with ``$MCPHOST_LIBRARY`` set.
"""

import os
import shutil
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]

LIB_NAME = "libmcphost.dylib" if sys.platform == "darwin" else "libmcphost.so"


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        src = os.environ.get("MCPHOST_WHEEL_LIBRARY")
        if not src:
            raise SystemExit(
                "MCPHOST_WHEEL_LIBRARY is not set: point it at the built "
                f"{LIB_NAME} (cargo build -p mcphost-c), as scripts/test-python.sh does"
            )
        src_path = Path(src)
        if not src_path.is_file():
            raise SystemExit(f"MCPHOST_WHEEL_LIBRARY={src} is not a file")
        dest = Path(self.build_lib) / "mcphost" / LIB_NAME
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src_path, dest)
        os.chmod(dest, 0o755)


class BinaryDistribution(Distribution):
    # Native code inside: a platform wheel, installed into platlib.
    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self):
        # Any Python 3 (ctypes, no extension), this platform only.
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel})
