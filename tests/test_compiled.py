"""The compiled core is what runs: extension modules, installed, no pure-Python fallback."""
import importlib
import importlib.machinery
import pathlib

import pytest

import mocker
import mocker._core as core

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", core.EXTENSION_MODULES)
def test_core_modules_are_extension_modules(name):
    mod = importlib.import_module(f"mocker._core.{name}")
    assert isinstance(mod.__loader__, importlib.machinery.ExtensionFileLoader), mod.__loader__
    assert mod.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def test_package_is_not_imported_from_source_tree():
    pkg = pathlib.Path(mocker.__file__).resolve()
    assert ROOT / "src" not in pkg.parents, f"tests must run against the installed package, got {pkg}"


def test_no_python_fallback_modules_shipped():
    core_dir = pathlib.Path(core.__file__).parent
    for name in core.EXTENSION_MODULES:
        assert not (core_dir / f"{name}.py").exists()


def test_every_built_module_is_listed_once():
    """EXTENSION_MODULES is the single list: CMake builds exactly these, nothing unlisted."""
    core_dir = pathlib.Path(core.__file__).parent
    built = {p.name.split(".")[0] for p in core_dir.iterdir()
             if p.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))}
    assert built == set(core.EXTENSION_MODULES)
    assert len(set(core.EXTENSION_MODULES)) == len(core.EXTENSION_MODULES)


def test_version_is_the_distribution_version():
    from importlib.metadata import version
    assert version("llm-mocker") == mocker.__version__
