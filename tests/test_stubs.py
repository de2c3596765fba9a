"""The type stubs of the compiled core hold to the modules, and mypy passes on the package.

Each ``mocker/_core/<mod>.pyi`` is compared with the compiled module it describes:

* names: every public module-level function, class and variable of the module is in the stub,
  and every name the stub declares exists at run time; the same for each class's members
  (public names and dunder methods; private names only stub → module);
* kinds: a stub method is callable at run time, a stub attribute or property is a data
  descriptor (a Cython ``@property`` and a ``cdef public`` field are both getset descriptors,
  so the two are not told apart), and class bases agree;
* signatures: parameter names, kinds and which have defaults, wherever the module exposes a
  signature (``def`` functions and methods are cyfunctions under ``binding=True``).  Cython
  exposes none for ``__cinit__`` or a cdef class's ``__init__``: the constructor is read from
  the ``.pyx`` the module was built from (in the source tree; the wheel does not ship it),
  ``__init__`` first, else
  ``__cinit__`` without a trailing ``*args, **kwargs`` (which only lets subclasses add
  parameters).  Dunder methods keep their protocol's signature and are checked by name only.

Types are not compared here: mypy (the last tests) checks the code that uses them.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pathlib
import re
import subprocess
import sys
import types

import pytest

import mocker._core as core

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORE_DIR = pathlib.Path(core.__file__).parent

# attributes Cython or Python put on every class; not part of an API
_CLASS_IGNORED = {"__new__", "__init__", "__doc__", "__module__", "__dict__", "__weakref__",
                  "__qualname__", "__annotations__", "__pyx_vtable__", "__reduce__", "__setstate__",
                  "__reduce_cython__", "__setstate_cython__", "__firstlineno__",
                  "__static_attributes__"}

_POK = inspect.Parameter.POSITIONAL_OR_KEYWORD.name
Params = list[tuple[str, str, bool]]           # (name, kind, has a default)


# -- the stub side -----------------------------------------------------------------------------
def _stub_params(args: ast.arguments) -> Params:
    out: Params = []
    positional = [(a, "POSITIONAL_ONLY") for a in args.posonlyargs] + [(a, _POK) for a in args.args]
    first_default = len(positional) - len(args.defaults)
    for i, (a, kind) in enumerate(positional):
        out.append((a.arg, kind, i >= first_default))
    if args.vararg is not None:
        out.append((args.vararg.arg, "VAR_POSITIONAL", False))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append((a.arg, "KEYWORD_ONLY", d is not None))
    if args.kwarg is not None:
        out.append((args.kwarg.arg, "VAR_KEYWORD", False))
    return out


def _stub_kind(node: ast.stmt) -> str:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for d in node.decorator_list:
            name = d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "")
            if name in ("property", "setter", "getter", "deleter", "cached_property"):
                return "data"
        return "method"
    return "data"


def _stub_members(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    out: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name in out and _stub_kind(node) == "data":
                continue                      # a property's setter: the getter stands for both
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node
    return out


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", ast.unparse(node))


class StubSet:
    """Parsed stubs, so that a class's stub bases can be found in another stub."""

    def __init__(self, sources: dict[str, str]):
        self.modules = {m: ast.parse(src) for m, src in sources.items()}
        self.classes: dict[str, ast.ClassDef] = {}
        for tree in self.modules.values():
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, node)

    def stub_init(self, cls: ast.ClassDef) -> Params | None:
        """The stub's constructor parameters (own or from a stub base), None if not declared."""
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                return _stub_params(node.args)
        for b in cls.bases:
            base = self.classes.get(_base_name(b))
            if base is not None:
                return self.stub_init(base)
        return None


# -- the run-time side -------------------------------------------------------------------------
def _runtime_kind(obj: object) -> str:
    if isinstance(obj, (classmethod, staticmethod)) or (callable(obj) and not inspect.isdatadescriptor(obj)):
        return "method"
    return "data"


def _runtime_params(obj: object) -> Params | None:
    try:
        sig = inspect.signature(obj)          # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return [(p.name, p.kind.name, p.default is not inspect.Parameter.empty)
            for p in sig.parameters.values()]


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _cython_params(text: str) -> Params:
    """Parameters of a Cython ``def`` parameter list (C types allowed: ``int64_t n=0``)."""
    out: Params = []
    kw_only = False
    for p in _split_top_level(text):
        if p == "*":
            kw_only = True
            continue
        if p == "/":
            out = [(n, "POSITIONAL_ONLY", d) for n, _, d in out]
            continue
        if p.startswith("**"):
            out.append((p[2:].strip(), "VAR_KEYWORD", False))
            continue
        if p.startswith("*"):
            out.append((p[1:].strip(), "VAR_POSITIONAL", False))
            kw_only = True
            continue
        head, eq, _ = p.partition("=")
        head = re.sub(r"\s+(not|or)\s+None\s*$", "", head.strip())
        m = re.search(r"(\w+)\s*$", head)
        assert m, f"cannot read Cython parameter {p!r}"
        out.append((m.group(1), "KEYWORD_ONLY" if kw_only else _POK, bool(eq)))
    return out


def _pyx_constructor(pyx: str, cls_name: str) -> Params | None:
    """The constructor a class defines in its .pyx (see the module docstring), or None."""
    lines = pyx.splitlines()
    head = re.compile(rf"^(cdef\s+)?class\s+{re.escape(cls_name)}\b.*:\s*(#.*)?$")
    start = next((i for i, ln in enumerate(lines) if head.match(ln)), None)
    if start is None:
        return None
    body = []
    for ln in lines[start + 1:]:
        if ln.strip() and not ln[0].isspace() and not ln.lstrip().startswith("#"):
            break
        body.append(re.sub(r"#.*", "", ln))
    text = "\n".join(body)
    found = {}
    for name in ("__init__", "__cinit__"):
        m = re.search(rf"^    def {name}\(", text, re.M)
        if m is None:
            continue
        i, depth = m.end(), 1
        j = i
        while depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        found[name] = _cython_params(text[i:j - 1])
    if "__init__" in found:
        return found["__init__"]
    if "__cinit__" in found:
        params = found["__cinit__"]
        while params and params[-1][1] in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            params.pop()
        return params
    return None


def _runtime_constructor(cls: type, pyx_of) -> Params | None:
    for klass in cls.__mro__:
        mod = klass.__module__
        if not mod.startswith("mocker._core."):
            break
        params = _pyx_constructor(pyx_of(mod.rsplit(".", 1)[1]), klass.__name__)
        if params is not None:
            return params
    return None


def _same_ctor(a: Params | None, b: Params | None) -> bool:
    only_self = [("self", _POK, False)]
    return (None if a == only_self else a) == (None if b == only_self else b)


# -- the comparison ----------------------------------------------------------------------------
def _is_public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _defined_here(mod: types.ModuleType, name: str, obj: object) -> bool:
    if isinstance(obj, types.ModuleType):
        return False
    if isinstance(obj, type) or callable(obj):
        return getattr(obj, "__module__", None) == mod.__name__
    return not name.startswith("__")          # a module-level value (constant)


def check_module(mod: types.ModuleType, stubs: StubSet, stub_name: str, pyx_of) -> list[str]:
    """Every way ``mod`` and its stub disagree (empty: they agree)."""
    problems: list[str] = []
    where = mod.__name__
    stub = _stub_members(stubs.modules[stub_name].body)
    runtime = {n: o for n, o in vars(mod).items()
               if not n.startswith("_") and _defined_here(mod, n, o)}
    for name in sorted(set(runtime) - set(stub)):
        problems.append(f"{where}.{name}: in the module, missing from the stub")
    for name in sorted(set(stub) - set(vars(mod))):
        problems.append(f"{where}.{name}: in the stub, missing from the module")
    for name, node in sorted(stub.items()):
        if name not in vars(mod):
            continue
        obj = vars(mod)[name]
        if isinstance(node, ast.ClassDef):
            if not isinstance(obj, type):
                problems.append(f"{where}.{name}: a class in the stub, {type(obj).__name__} in the module")
                continue
            problems += _check_class(obj, node, stubs, pyx_of)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not callable(obj):
                problems.append(f"{where}.{name}: a function in the stub, not callable in the module")
                continue
            rt = _runtime_params(obj)
            st = _stub_params(node.args)
            if rt is not None and rt != st:
                problems.append(f"{where}.{name}: stub parameters {st} != module {rt}")
    return problems


def _check_class(cls: type, node: ast.ClassDef, stubs: StubSet, pyx_of) -> list[str]:
    problems: list[str] = []
    where = f"{cls.__module__}.{cls.__name__}"
    stub_bases = [_base_name(b) for b in node.bases] or ["object"]
    rt_bases = [b.__name__ for b in cls.__bases__]
    if stub_bases != rt_bases:
        problems.append(f"{where}: stub bases {stub_bases} != module bases {rt_bases}")
    stub = _stub_members(node.body)
    # the stub's members, with those of its stub bases (a member may be declared on a base)
    stub_all = dict(stub)
    for b in node.bases:
        base = stubs.classes.get(_base_name(b))
        if base is not None:
            stub_all = {**_stub_members(base.body), **stub_all}
    own = {n: o for n, o in vars(cls).items() if _is_public(n) and n not in _CLASS_IGNORED}
    for name in sorted(set(own) - set(stub_all)):
        problems.append(f"{where}.{name}: in the module, missing from the stub")
    for name, member in sorted(stub.items()):
        if name == "__init__":
            continue
        try:
            obj = inspect.getattr_static(cls, name)
        except AttributeError:
            problems.append(f"{where}.{name}: in the stub, missing from the module")
            continue
        kind, rt_kind = _stub_kind(member), _runtime_kind(obj)
        if kind != rt_kind:
            problems.append(f"{where}.{name}: a {kind} member in the stub, a {rt_kind} member in the module")
            continue
        if kind == "method" and isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and not (name.startswith("__") and name.endswith("__")):
            rt = _runtime_params(obj)
            st = _stub_params(member.args)
            if rt is not None and rt != st:
                problems.append(f"{where}.{name}: stub parameters {st} != module {rt}")
    rt_ctor = _runtime_constructor(cls, pyx_of)
    st_ctor = stubs.stub_init(node)
    if not _same_ctor(rt_ctor, st_ctor):
        problems.append(f"{where}.__init__: stub parameters {st_ctor} != .pyx constructor {rt_ctor}")
    return problems


def _pyx_source(name: str) -> str:
    path = SOURCE_CORE_DIR / f"{name}.pyx"
    assert path.is_file(), f"{path} is missing: the constructor check reads it"
    return path.read_text()


def _installed_stubs() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted(CORE_DIR.glob("*.pyi"))}


# the sources the installed modules were built from (read as text, never imported)
SOURCE_CORE_DIR = pathlib.Path(__file__).resolve().parent.parent / "src" / "mocker" / "_core"


# -- tests -------------------------------------------------------------------------------------
def test_every_extension_module_has_a_stub_and_no_stub_is_stray():
    assert sorted(_installed_stubs()) == sorted(core.EXTENSION_MODULES)


@pytest.mark.parametrize("name", core.EXTENSION_MODULES)
def test_stub_matches_the_compiled_module(name):
    mod = importlib.import_module(f"mocker._core.{name}")
    stubs = StubSet(_installed_stubs())
    assert check_module(mod, stubs, name, _pyx_source) == []


def test_the_stub_check_catches_drift():
    """Each kind of drift, planted in a copy of rng.pyi and sglang.pyi, is reported."""
    from mocker._core import rng, sglang
    sources = _installed_stubs()
    good = sources["rng"]
    edits = {
        "    def range(self, n: int) -> int: ...\n": "",                           # method dropped
        "    def next_u32(self) -> int: ...\n":                                    # kind changed
            "    @property\n    def next_u32(self) -> int: ...\n",
        "    def next_f64(self) -> float: ...\n": "    def next_f64(self, x: int) -> float: ...\n",
        "    def __init__(self, seed: int) -> None: ...\n": "    def __init__(self, sed: int) -> None: ...\n",
        "def prefix_groups(n: int, num_groups: int)": "def prefix_groups(n: int, num_groups: int = ...)",
    }
    bad = good
    for old, new in edits.items():
        assert old in bad, old
        bad = bad.replace(old, new)
    bad += "def not_there() -> None: ...\n"
    problems = check_module(rng, StubSet({**sources, "rng": bad}), "rng", _pyx_source)
    text = "\n".join(problems)
    for expected in ("StdRng.range: in the module, missing from the stub",
                     "StdRng.next_u32: a data member in the stub, a method member in the module",
                     "StdRng.next_f64: stub parameters",
                     "StdRng.__init__: stub parameters",
                     "rng.prefix_groups: stub parameters",
                     "rng.not_there: in the stub, missing from the module"):
        assert expected in text, (expected, problems)
    assert len(problems) == 6, problems
    # a wrong base class, and a constructor parameter lost from a subclass
    bad = sources["sglang"].replace("class SglangRank(Rank):", "class SglangRank:").replace(
        ", dp_size: int = 1) -> None", ") -> None")
    problems = check_module(sglang, StubSet({**sources, "sglang": bad}), "sglang", _pyx_source)
    assert len(problems) == 2 and "bases" in problems[0] and "__init__" in problems[1], problems


def test_cython_parameter_lists_are_read():
    assert _cython_params("self, ReqTable table not None, int64_t n=0, *args, bint x=True, **kw") == [
        ("self", _POK, False), ("table", _POK, False), ("n", _POK, True),
        ("args", "VAR_POSITIONAL", False), ("x", "KEYWORD_ONLY", True), ("kw", "VAR_KEYWORD", False)]
    assert _cython_params("self, double[::1] a, dict d=None, int64_t m=1 << 62") == [
        ("self", _POK, False), ("a", _POK, False), ("d", _POK, True), ("m", _POK, True)]


# -- mypy --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory) -> list[str]:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (it is in the 'test' extra: pip install '.[test]')")
    # run outside the source tree, so that -p mocker is the installed package, with the
    # project's [tool.mypy] settings
    cwd = tmp_path_factory.mktemp("mypy")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(cwd / "cache"), "--no-error-summary", "--hide-error-context",
         "-p", "mocker"],
        cwd=cwd, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ": error:" in ln]
    assert proc.returncode in (0, 1) and (proc.returncode == 0) == (not lines), (
        f"mypy exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return lines


def test_mypy_is_clean(mypy_errors):
    assert mypy_errors == [], "\n".join(mypy_errors)
