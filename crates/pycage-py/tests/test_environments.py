"""Bring your environment through the Python package: ``python=`` of a venv
means that venv, ``venv=``, ``preload=``, ``with_packages=`` and
``allow_packages=``; a PEP 723 program's packages, installed by the host.

The data-science venv comes from ``.ci/datasci-deps.sh``
(``$PYCAGE_DATASCI_VENV``, default ``target/datasci-venv``); without it
those tests skip, and fail under PYCAGE_REQUIRE_ALL_TESTS=1.
"""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

import pycage
from conftest import unavailable

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


@pytest.fixture(scope="module")
def datasci():
    venv = os.environ.get("PYCAGE_DATASCI_VENV") or os.path.join(ROOT, "target", "datasci-venv")
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        unavailable(f"no data-science venv at {venv} (run .ci/datasci-deps.sh)")
    return venv


def runtime(isolation, **kwargs):
    try:
        return pycage.Runtime(isolation=isolation, **kwargs)
    except pycage.SandboxUnavailableError as e:
        unavailable(f"sandbox isolation is unavailable here: {e}")


@pytest.mark.parametrize("isolation", ["process", "sandbox"])
def test_python_sys_executable_of_a_venv_means_that_venv(isolation):
    # This test runs in the package's venv (a normal, symlinked one), which
    # has pytest: a run with python=sys.executable imports it from there.
    assert sys.prefix != sys.base_prefix, "the package tests run in a venv"
    with runtime(isolation, python=sys.executable) as rt:
        assert str(rt.config["venv"]) == sys.prefix
        r = rt.run("import sys, pytest\nreturn [sys.prefix, pytest.__version__]")
        assert r.value == [sys.prefix, pytest.__version__], r


@pytest.mark.parametrize("isolation", ["process", "sandbox"])
def test_venv_preload_numpy_pandas(datasci, isolation):
    with runtime(isolation, venv=datasci, preload=["numpy", "pandas"], pool_size=1) as rt:
        assert rt.config["preload"] == ["numpy", "pandas"]
        assert str(rt.config["venv"]) == datasci
        program = (
            "import sys\npre = 'numpy' in sys.modules\n"
            "import numpy, pandas\n"
            "return [pre, int(numpy.arange(10).sum()), int(pandas.Series([1, 2]).sum()), float(numpy.random.rand())]"
        )
        first, second = rt.run(program), rt.run(program)
        assert first.value[:3] == [True, 45, 3], first
        assert second.value[:3] == [True, 45, 3], second
        assert first.value[3] != second.value[3], "two children drew the same numbers"


def test_a_failing_preload_names_the_module(datasci):
    with pytest.raises(pycage.ConfigError) as e:
        pycage.Runtime(isolation="process", venv=datasci, preload=["numpy", "no_such_module_xyz"])
    assert str(e.value).startswith("preload no_such_module_xyz: ModuleNotFoundError"), e.value
    assert "venv=" in str(e.value)


def test_keywords_are_checked():
    with pytest.raises(TypeError, match="preload must be a list of module names"):
        pycage.Runtime(isolation="process", preload="numpy")
    with pytest.raises(TypeError, match="with_packages items must be requirement strings"):
        pycage.Runtime(isolation="process", with_packages=[1])
    with pytest.raises(pycage.ConfigError, match="venv cannot be given together with python"):
        pycage.Runtime(isolation="process", python=sys.executable, venv=sys.prefix)
    with pytest.raises(pycage.ConfigError, match="preload .* is not a module name"):
        pycage.Runtime(isolation="process", preload=["os;x"])
    with pytest.raises(pycage.ConfigError, match="direct references"):
        pycage.Runtime(isolation="process", with_packages=["x @ https://example.com/x.whl"])
    with tempfile.TemporaryDirectory() as d, pytest.raises(pycage.ConfigError, match="not a virtual environment"):
        pycage.Runtime(isolation="process", venv=d)


TABULATE = """# /// script
# dependencies = ["tabulate==0.9.0"]
# ///
import tabulate
return tabulate.tabulate([[1, 2]], headers=["a", "b"])
"""


@pytest.mark.parametrize("isolation", ["process", "sandbox"])
def test_pep_723_dependencies(datasci, isolation, tmp_path):
    os.chmod(tmp_path, 0o755)
    with runtime(isolation, venv=datasci, cache_dir=tmp_path, allow_packages=["tabulate"], pool_size=1) as rt:
        r = rt.run(TABULATE)
        assert r.value == "  a    b\n---  ---\n  1    2", r
        refused = rt.run('# /// script\n# dependencies = ["requests"]\n# ///\nprint("started")')
        assert refused.error.kind == "dependencies", refused
        assert 'the package "requests"' in refused.error.message
        assert "allowed here: tabulate" in refused.error.message
        assert refused.logs == []


def test_declarations_are_refused_unless_allowed():
    with pycage.Runtime(isolation="process") as rt:
        refused = rt.run('# /// script\n# dependencies = ["docopt"]\n# ///\nprint("started")')
        assert refused.error.kind == "dependencies", refused
        assert "allow_packages=[...]" in refused.error.message and "allow_any_package=True" in refused.error.message
        assert refused.logs == []
    with pytest.raises(pycage.ConfigError, match="allow_any_package"):
        pycage.Runtime(isolation="process", allow_packages=["x"], allow_any_package=True)


def test_a_package_without_a_wheel_is_built_in_a_sandbox_only_when_allowed(datasci, tmp_path):
    program = '# /// script\n# dependencies = ["docopt==0.6.2"]\n# ///\nimport docopt\nreturn docopt.__version__'
    with runtime("process", venv=datasci, cache_dir=tmp_path, allow_packages=["docopt"]) as rt:
        refused = rt.run(program)
        assert refused.error.kind == "dependencies", refused
        assert "allow_builds=True" in refused.error.message, refused.error.message
    with runtime("process", venv=datasci, cache_dir=tmp_path, allow_packages=["docopt"], allow_builds=True) as rt:
        assert rt.run(program).value == "0.6.2"
    with pytest.raises(TypeError, match="allow_builds must be a bool"):
        pycage.Runtime(isolation="process", allow_builds="yes")


def test_with_packages(datasci, tmp_path):
    with runtime("process", venv=datasci, cache_dir=tmp_path, with_packages=["tabulate==0.9.0"]) as rt:
        assert rt.run("import tabulate\nreturn tabulate.__version__").value == "0.9.0"
