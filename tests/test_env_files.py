"""pyproject.toml, constraints.txt, environment.yml and binder/environment.yml name the same packages.

Rules (a failing rule names the file to fix):
- Runtime dependencies ([project].dependencies) appear in all four files.
- The `test` extra appears in pyproject.toml, constraints.txt and environment.yml; binder/environment.yml
  may leave test tools out (Binder only runs the notebooks).
- Any other extra (e.g. `browser`) only needs its exact pin in constraints.txt: it is an optional add-on
  installed by its own make target, not part of the conda or Binder environments.
- Every pyproject dependency, extras included, is pinned with `==` in constraints.txt, and the pin satisfies
  pyproject's bound. constraints.txt may pin more (transitive packages whose behaviour the notebooks show).
- A version bound written in an environment file equals pyproject's bound (conda `=0.11` == pip `==0.11.*`).
- torch: pyproject says `torch>=2.6`, constraints.txt pins `torch==2.13.0`; Binder gets a CPU-only build.
- A runtime dependency may carry one marker, `; sys_platform == 'linux'` (triton: wheels for Linux only). Conda
  files cannot say "Linux only", so environment.yml leaves it to its `pip: -e .` (pip honours the marker), and
  binder/postBuild (Binder is Linux) installs it with `-c constraints.txt`, at the pinned version. torch's CUDA
  builds pin their own triton: where the installed torch requires one, constraints.txt pins the same.
- Conda names map to pip names through CONDA_TO_PIP; `python` and `pip` are conda-only entries.
"""
from __future__ import annotations

import ast
import os
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CONDA_TO_PIP = {"pytorch": "torch", "pytorch-cpu": "torch"}
CONDA_ONLY = {"python", "pip"}
EXTRAS_IN_ENVIRONMENT_YML = {"test"}

LINUX_ONLY = re.compile(r"""\s*;\s*sys_platform\s*==\s*(['"])linux\1\s*$""")
_REQ_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([<>=!~].*)?$")
_CONDA_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*([<>=!~]\S*)?(?:\s+(\S+))?$")


def norm(name: str) -> str:
    """PEP 503 normalised package name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def linux_only(text: str) -> bool:
    """Does the requirement end with the one marker this project uses, ``; sys_platform == 'linux'``?"""
    return bool(LINUX_ONLY.search(text))


def parse_requirement(text: str) -> tuple[str, str]:
    """'torch>=2.6' -> ('torch', '>=2.6'); ValueError for anything richer (other markers, URLs).
    The Linux-only marker is allowed and dropped here (:func:`linux_only` reads it)."""
    text = LINUX_ONLY.sub("", text)
    m = _REQ_RE.match(text.strip())
    if not m or ";" in text or "@" in text:
        raise ValueError(f"unsupported requirement {text!r}: expected 'name', 'name>=X' or 'name==X.*'")
    return norm(m.group(1)), (m.group(2) or "").replace(" ", "")


def parse_conda_spec(text: str) -> tuple[str, str, str]:
    """'pytorch >=2.6 cpu*' -> ('torch', '>=2.6', 'cpu*') with the conda name mapped to its pip name."""
    m = _CONDA_RE.match(text.strip())
    if not m:
        raise ValueError(f"unsupported conda spec {text!r}: expected 'name', 'name>=X' or 'name >=X build'")
    name = norm(m.group(1))
    return CONDA_TO_PIP.get(name, name), m.group(2) or "", m.group(3) or ""


def parse_env_file(text: str) -> dict:
    """A tiny reader for our environment.yml shape: name, channels, dependencies (with one pip: list).

    Anything else raises ValueError, so an edit this reader cannot follow fails loudly instead of
    being skipped.
    """
    env: dict = {"name": None, "channels": [], "dependencies": [], "pip": []}
    section = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not line:
            continue
        indent = len(line) - len(line.lstrip())
        item = line.strip()
        if indent == 0:
            key, _, value = item.partition(":")
            if key == "name" and value.strip():
                env["name"], section = value.strip(), None
            elif key in ("channels", "dependencies") and not value.strip():
                section = key
            else:
                raise ValueError(f"line {number}: unsupported top-level entry {raw!r}")
        elif item == "- pip:" and section == "dependencies":
            section = "pip"
        elif item.startswith("- ") and section == "pip" and indent > 2:
            env["pip"].append(item[2:].strip())
        elif item.startswith("- ") and section in ("channels", "dependencies", "pip"):
            section = "dependencies" if section == "pip" else section
            env[section].append(item[2:].strip())
        else:
            raise ValueError(f"line {number}: unsupported entry {raw!r}")
    return env


def conda_vs_pip_bound(bound: str) -> str:
    """Write a conda version bound the way pip would: '=0.11' -> '==0.11.*'."""
    if re.fullmatch(r"=[0-9][0-9.]*", bound):
        return f"={bound}.*"
    return bound


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.13.0' -> (2, 13, 0); ValueError for versions this test does not understand."""
    if not re.fullmatch(r"\d+(\.\d+)*", version):
        raise ValueError(f"unsupported version {version!r}: expected dotted integers like 2.13.0")
    return tuple(int(p) for p in version.split("."))


def satisfies(pin: str, bound: str) -> bool:
    """Does the exact version ``pin`` meet pyproject's ``bound`` ('' | '>=X' | '==X.*' | '==X')?"""
    if not bound:
        return True
    if bound.startswith(">="):
        return version_tuple(pin) >= version_tuple(bound[2:])
    if bound.startswith("==") and bound.endswith(".*"):
        return version_tuple(pin)[: len(version_tuple(bound[2:-2]))] == version_tuple(bound[2:-2])
    if bound.startswith("=="):
        return version_tuple(pin) == version_tuple(bound[2:])
    raise ValueError(f"unsupported bound {bound!r}: use '>=X', '==X' or '==X.*' (or extend this test)")


# ---- the four files ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def runtime(pyproject) -> dict[str, str]:
    return dict(parse_requirement(r) for r in pyproject["project"]["dependencies"])


@pytest.fixture(scope="module")
def linux_runtime(pyproject) -> set[str]:
    """Runtime dependencies marked Linux-only (triton)."""
    return {parse_requirement(r)[0] for r in pyproject["project"]["dependencies"] if linux_only(r)}


@pytest.fixture(scope="module")
def extras(pyproject) -> dict[str, dict[str, str]]:
    opt = pyproject["project"].get("optional-dependencies", {})
    return {extra: dict(parse_requirement(r) for r in reqs) for extra, reqs in opt.items()}


@pytest.fixture(scope="module")
def constraints() -> dict[str, str]:
    pins = {}
    for raw in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
            assert m, f"constraints.txt: {raw!r} is not an exact pin 'name==version'"
            assert norm(m.group(1)) not in pins, f"constraints.txt pins {m.group(1)} twice"
            pins[norm(m.group(1))] = m.group(2)
    return pins


def _env(path: str) -> dict:
    env = parse_env_file((ROOT / path).read_text(encoding="utf-8"))
    env["specs"] = [parse_conda_spec(d) for d in env["dependencies"]]
    env["names"] = {name for name, _, _ in env["specs"]} - CONDA_ONLY
    return env


@pytest.fixture(scope="module")
def conda_env() -> dict:
    return _env("environment.yml")


@pytest.fixture(scope="module")
def binder_env() -> dict:
    return _env("binder/environment.yml")


# ---- rules --------------------------------------------------------------------------------------


def test_torch_bound_and_pin(runtime, constraints):
    assert runtime.get("torch") == ">=2.6", "pyproject.toml must say torch>=2.6"
    assert constraints.get("torch") == "2.13.0", "constraints.txt must pin torch==2.13.0"


def test_every_pyproject_dependency_pinned_exactly(runtime, extras, constraints):
    wanted = dict(runtime)
    for reqs in extras.values():
        wanted.update(reqs)
    missing = sorted(set(wanted) - set(constraints))
    assert not missing, f"constraints.txt has no '==' pin for {missing}"
    bad = {n: (constraints[n], b) for n, b in wanted.items() if not satisfies(constraints[n], b)}
    assert not bad, f"constraints.txt pins outside pyproject's bounds (pin, bound): {bad}"


def test_environment_yml_names_runtime_and_test_packages(runtime, linux_runtime, extras, conda_env):
    wanted = (set(runtime) - linux_runtime).union(*(set(extras.get(e, {})) for e in EXTRAS_IN_ENVIRONMENT_YML))
    assert conda_env["names"] == wanted, (
        f"environment.yml lacks {sorted(wanted - conda_env['names'])}, "
        f"has extra {sorted(conda_env['names'] - wanted)}"
    )


def test_binder_names_runtime_packages(runtime, linux_runtime, extras, binder_env):
    allowed = set(runtime).union(*(set(reqs) for reqs in extras.values()))
    wanted = set(runtime) - linux_runtime
    assert wanted <= binder_env["names"], f"binder/environment.yml lacks {sorted(wanted - binder_env['names'])}"
    assert binder_env["names"] <= allowed, f"binder/environment.yml names unknown {sorted(binder_env['names'] - allowed)}"


@pytest.mark.parametrize("path", ["environment.yml", "binder/environment.yml"])
def test_env_bounds_match_pyproject(path, pyproject, runtime, extras):
    env = _env(path)
    bounds = dict(runtime)
    for reqs in extras.values():
        bounds.update(reqs)
    bounds["python"] = pyproject["project"]["requires-python"].replace(" ", "")
    assert env["channels"] == ["conda-forge"], f"{path}: channels must be exactly [conda-forge]"
    assert "python" in {n for n, _, _ in env["specs"]}, f"{path}: must name python"
    for name, bound, _build in env["specs"]:
        if bound and name != "pip":
            assert conda_vs_pip_bound(bound) == bounds[name], (
                f"{path}: {name} bound {bound!r} differs from pyproject.toml's {bounds[name]!r}"
            )


def test_binder_torch_is_cpu_only(binder_env):
    torch_specs = [d for d in binder_env["dependencies"] if parse_conda_spec(d)[0] == "torch"]
    assert len(torch_specs) == 1, "binder/environment.yml must name PyTorch once"
    conda_name, build = torch_specs[0].split()[0], parse_conda_spec(torch_specs[0])[2]
    assert conda_name.startswith("pytorch-cpu") or build.startswith("cpu"), (
        f"binder/environment.yml: {torch_specs[0]!r} is not a CPU-only build (use 'pytorch >=X cpu*')"
    )


def test_gpulab_itself_is_installed(conda_env, binder_env):
    assert conda_env["pip"] == ["-e ."], "environment.yml must end with `- pip: [-e .]` to install gpulab"
    assert binder_env["pip"] == [], "binder/environment.yml: gpulab is installed by binder/postBuild"
    post = ROOT / "binder" / "postBuild"
    assert os.access(post, os.X_OK), "binder/postBuild must be executable"
    assert re.search(r"^\s*(python -m )?pip install --no-deps -e \.\s*$", post.read_text(), re.M), (
        "binder/postBuild must run `pip install --no-deps -e .`"
    )


def imported_top_level_modules(package: Path) -> set[str]:
    """Every top-level module the package's code imports (also inside functions), itself and stdlib excluded."""
    found: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {package.name, "__future__"}


def test_every_package_gpulab_imports_is_a_runtime_dependency(runtime):
    """gpulab imports psutil, torch, ...: each must be declared, or a clean install breaks at run time."""
    modules = imported_top_level_modules(ROOT / "gpulab")
    assert "psutil" in modules  # the process handling of the launcher (no /proc, no POSIX signals)
    owners = packages_distributions()
    undeclared = {m: owners.get(m, [m]) for m in modules if not {norm(d) for d in owners.get(m, [m])} & set(runtime)}
    assert not undeclared, f"gpulab imports modules whose package pyproject.toml does not list: {undeclared}"


def test_linux_only_dependencies_are_installed_where_conda_cannot_say_linux(linux_runtime, constraints, conda_env):
    """triton: pip installs it through environment.yml's `-e .` (the marker holds there); Binder's postBuild
    installs the pinned version (Binder is Linux, and its `pip install --no-deps -e .` would skip it)."""
    assert linux_runtime == {"triton"}, "the Linux-only runtime dependencies changed: check this rule still fits"
    assert not linux_runtime & conda_env["names"], "environment.yml must leave Linux-only packages to `pip: -e .`"
    post = (ROOT / "binder" / "postBuild").read_text()
    for name in sorted(linux_runtime):
        assert re.search(rf"^\s*(python -m )?pip install --no-deps -c constraints\.txt {name}\s*$", post, re.M), (
            f"binder/postBuild must install {name} at constraints.txt's pin: pip install --no-deps -c constraints.txt {name}")


def test_triton_pin_is_the_one_torchs_cuda_build_requires(constraints):
    """torch 2.13's CUDA wheels require triton==3.7.1 on Linux; a CPU build requires none (then nothing to compare)."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        needs = [r for r in requires("torch") or [] if r.replace(" ", "").startswith("triton==")]
    except PackageNotFoundError:
        needs = []
    for requirement in needs:
        assert requirement.split(";")[0].strip() == f"triton=={constraints['triton']}", (
            f"the installed torch requires {requirement!r}; constraints.txt pins triton=={constraints['triton']}")


# ---- the readers reject what they cannot read -----------------------------------------------------


@pytest.mark.parametrize("text", ["torch @ https://x/y.whl", "numpy; python_version<'3.12'", ">=1.0", ""])
def test_parse_requirement_rejects_unsupported(text):
    with pytest.raises(ValueError):
        parse_requirement(text)


def test_parse_requirement_and_conda_spec():
    assert parse_requirement("Scikit_Learn >= 1.3") == ("scikit-learn", ">=1.3")
    assert parse_requirement("triton>=3.2; sys_platform == 'linux'") == ("triton", ">=3.2")
    assert linux_only('triton>=3.2 ; sys_platform == "linux"') and not linux_only("triton>=3.2")
    assert parse_requirement("nbval==0.11.*") == ("nbval", "==0.11.*")
    assert parse_conda_spec("pytorch >=2.6 cpu*") == ("torch", ">=2.6", "cpu*")
    assert parse_conda_spec("pytorch-cpu") == ("torch", "", "")
    assert conda_vs_pip_bound("=0.11") == "==0.11.*"


@pytest.mark.parametrize(
    "text",
    [
        "dependencies:\n  - numpy\nvariables:\n  X: 1\n",  # unknown top-level key
        "dependencies:\n  numpy: 1\n",  # mapping instead of a list
        "name: a\nchannels:\n  - conda-forge\n  extra: x\n",
    ],
)
def test_parse_env_file_rejects_unsupported(text):
    with pytest.raises(ValueError):
        parse_env_file(text)


def test_parse_env_file_reads_pip_section():
    env = parse_env_file("name: x\nchannels:\n  - conda-forge\ndependencies:\n  - pip\n  - pip:\n      - -e .\n  - numpy  # trailing\n")
    assert env == {"name": "x", "channels": ["conda-forge"], "dependencies": ["pip", "numpy"], "pip": ["-e ."]}


@pytest.mark.parametrize(
    "pin,bound,ok",
    [("2.13.0", ">=2.6", True), ("2.5.1", ">=2.6", False), ("0.11.0", "==0.11.*", True), ("0.12.0", "==0.11.*", False)],
)
def test_satisfies(pin, bound, ok):
    assert satisfies(pin, bound) is ok


def test_satisfies_rejects_unknown_bounds():
    with pytest.raises(ValueError):
        satisfies("1.0", "~=1.0")
