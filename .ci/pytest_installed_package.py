"""pytest plugin of .ci/wheel.sh: the run fails unless the suite imported the
installed voxconv and its bundled library (under $VOXCONV_CI_VENV), not the
source tree's python/ (tests/python/conftest.py falls back to it when the
import fails) or a build*/ library."""

import os
import sys

import pytest


def pytest_collection_finish(session):
    venv = os.path.realpath(os.environ["VOXCONV_CI_VENV"]) + os.sep
    mod = sys.modules.get("voxconv")
    if mod is None:
        pytest.exit("the suite did not import voxconv", returncode=3)
    for what, path in (("voxconv.__file__", mod.__file__),
                       ("voxconv.library_path", mod.library_path)):
        if not os.path.realpath(path).startswith(venv):
            pytest.exit(f"{what} = {path}: not the installed package in {venv}",
                        returncode=3)
    print(f"\ninstalled package under test: {mod.__file__} (library {mod.library_path})")
