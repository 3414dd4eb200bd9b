"""``distgcn --version``: the package's one version, which pyproject.toml reads too."""

from __future__ import annotations

import pytest
import tomllib
from conftest import ROOT
from packaging.version import Version

import distgcn
from distgcn.cli.main import main


def test_version_prints_the_packages_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"distgcn {distgcn.__version__}\n"
    assert str(Version(distgcn.__version__)) == distgcn.__version__  # a version pip accepts, as written


def test_pip_reads_the_same_version():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" in project["project"]["dynamic"] and "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "distgcn.__version__"}
