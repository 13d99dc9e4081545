"""Loading the library: where it is found, the ABI check, and that this
package's constants match include/mcphost.h."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path


import mcphost
from conftest import ROOT

HEADER = ROOT / "include" / "mcphost.h"


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.pop("MCPHOST_LIBRARY", None)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60)


def test_abi_version_matches_the_package() -> None:
    assert mcphost.abi_version() == mcphost.ABI_VERSION == 1
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", mcphost.library_version())
    m = re.search(r"#define MCPHOST_ABI_VERSION (\d+)", HEADER.read_text())
    assert m and int(m.group(1)) == mcphost.ABI_VERSION


def test_installed_wheel_finds_the_bundled_library() -> None:
    """scripts/test-python.sh runs the suite from a venv with the wheel
    installed and MCPHOST_LIBRARY unset: what users install is what runs."""
    if os.environ.get("MCPHOST_PY_EXPECT_WHEEL") != "1":
        # Run from a source tree: the library must come from the variable.
        assert os.environ.get("MCPHOST_LIBRARY"), "set MCPHOST_LIBRARY, or run scripts/test-python.sh"
        assert mcphost.library_path() == Path(os.environ["MCPHOST_LIBRARY"])
        return
    assert "MCPHOST_LIBRARY" not in os.environ
    pkg = Path(mcphost.__file__).resolve().parent
    site = Path(sysconfig.get_paths()["platlib"]).resolve()
    assert pkg.parent == site, f"mcphost imported from {pkg}, not the venv's {site}"
    assert mcphost.library_path() == pkg / mcphost._lib.LIBRARY_NAME
    assert Path(sys.prefix).resolve() != Path(sys.base_prefix).resolve(), "not in a venv"


def test_environment_variable_wins_and_a_bad_path_is_reported() -> None:
    r = _python("import mcphost; mcphost.abi_version()", MCPHOST_LIBRARY="/nonexistent/libmcphost.so")
    assert r.returncode != 0
    assert "LibraryNotFoundError" in r.stderr and "/nonexistent/libmcphost.so" in r.stderr
    assert "MCPHOST_LIBRARY" in r.stderr
    # The variable wins over the bundled copy: the library in use, renamed.
    d = Path(tempfile.mkdtemp(prefix="mcph-lib-"))
    copy = d / "renamed-libmcphost.so"
    shutil.copyfile(mcphost.library_path(), copy)
    r = _python("import mcphost; print(mcphost.library_path())", MCPHOST_LIBRARY=str(copy))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(copy)
    shutil.rmtree(d)


def test_a_library_with_another_abi_is_refused() -> None:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to build the fake library (install gcc)"
    d = Path(tempfile.mkdtemp(prefix="mcph-abi-"))
    src = d / "fake.c"
    src.write_text("unsigned int mcphost_abi_version(void) { return 999; }\n")
    lib = d / "libfake.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    r = _python("import mcphost; mcphost.abi_version()", MCPHOST_LIBRARY=str(lib))
    assert r.returncode != 0
    assert "AbiMismatchError" in r.stderr
    assert "ABI version 999" in r.stderr and "ABI version 1" in r.stderr
    shutil.rmtree(d)


def test_every_status_of_the_header_has_its_exception() -> None:
    text = HEADER.read_text()
    enum = dict((name, int(n)) for name, n in re.findall(r"\b(MCPHOST_(?:OK|ERR_\w+)) = (\d+)", text))
    assert len(enum) == 20
    assert {n: name for name, n in enum.items()} == mcphost.errors.STATUS_NAMES
    lib = mcphost._lib.lib()
    for name, n in enum.items():
        assert lib.mcphost_status_name(n).decode() == name
        if n == 0:
            continue
        cls = mcphost.errors.STATUS_CLASSES[n]
        e = mcphost.errors.error_for_status(n, "msg")
        assert type(e) is cls and e.status == n and e.status_name == name
        assert isinstance(e, mcphost.McphostError)
    assert lib.mcphost_status_name(999).decode() == "MCPHOST_ERR_UNKNOWN"
    assert type(mcphost.errors.error_for_status(999, "x")) is mcphost.McphostError


def test_method_and_event_constants_match_the_header() -> None:
    defined = dict(re.findall(r'#define MCPHOST_((?:METHOD|EVENT)_\w+) "([^"]+)"', HEADER.read_text()))
    ours = {k: v for k, v in vars(mcphost.methods).items() if k.startswith(("METHOD_", "EVENT_"))}
    assert defined and ours == defined
