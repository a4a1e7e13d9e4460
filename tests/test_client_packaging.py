"""The Python client installs outside a checkout: a wheel and an sdist built by
`python -m build`, and the documented `pip install "relay-client @ git+…#subdirectory=client"`,
each into a fresh virtualenv that imports it and finds its pytest plugin."""
import json
import re
import subprocess
import sys
import tomllib
import tarfile
import zipfile

import pytest

from tests.helpers import ROOT

CHECK = ("import importlib.metadata as m, relay_client; "
         "assert callable(relay_client.Relay) and callable(relay_client.verify_webhook); "
         "print(m.version('relay-client'), [e.value for e in m.entry_points(group='pytest11') if e.name == 'relay'])")


def run(*command: str, cwd=ROOT) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def fresh_venv(path) -> str:
    run(sys.executable, "-m", "venv", str(path))
    return str(path / "bin" / "python")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT / "client"))
    return out


def test_the_wheel_installs_into_a_fresh_venv(built, tmp_path):
    [wheel] = built.glob("relay_client-*.whl")
    assert "relay_client/py.typed" in zipfile.ZipFile(wheel).namelist()
    python = fresh_venv(tmp_path / "venv")
    run(python, "-m", "pip", "install", "--quiet", str(wheel))
    assert run(python, "-c", CHECK, cwd=tmp_path).strip() == "0.1.0 ['relay_client.pytest_plugin']"


def test_the_sdist_holds_the_package_and_its_type_marker(built):
    [sdist] = built.glob("relay_client-*.tar.gz")
    names = tarfile.open(sdist).getnames()
    assert any(name.endswith("relay_client/py.typed") for name in names)
    assert any(name.endswith("/pyproject.toml") for name in names)


def test_the_documented_git_recipe_installs_it(tmp_path):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    python = fresh_venv(tmp_path / "venv")
    # pip before 23.3 refuses a name @ git+file: reference; docs/client.md asks for a current pip.
    run(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    run(python, "-m", "pip", "install", "--quiet", f"relay-client @ git+file://{ROOT}#subdirectory=client")
    assert run(python, "-c", CHECK, cwd=tmp_path).strip() == "0.1.0 ['relay_client.pytest_plugin']"


def test_the_docs_name_only_the_versions_the_packages_have():
    python = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]["version"]
    typescript = json.loads((ROOT / "clients" / "typescript" / "package.json").read_text())["version"]
    for doc, version in (("client.md", python), ("client-typescript.md", typescript)):
        named = set(re.findall(r"(?<![\d.])v?\d+\.\d+\.\d+(?![\d.])", (ROOT / "docs" / doc).read_text()))
        assert named <= {version}, f"docs/{doc} names {named - {version}}; the package is {version}"
