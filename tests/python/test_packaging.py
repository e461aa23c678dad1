"""pyproject.toml: `pip install --no-build-isolation .` into a venv with
--system-site-packages (Debian's torch) installs a working package `ferry`. The build
reuses the test build's CMake directory (FERRY_BUILD_DIR), so it only relinks."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pip_install_into_a_venv(tmp_path, sample_data):
    build = os.path.dirname(os.environ["FERRY_PYTHON_DIR"])
    venv = tmp_path / "venv"
    subprocess.check_call([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    env = dict(os.environ, FERRY_BUILD_DIR=build)
    env.pop("PYTHONPATH", None)
    # --no-build-isolation (no network) builds with the interpreter's own setuptools,
    # which needs the wheel package or a setuptools >= 70.1 (Debian's python3 has both
    # python3-setuptools and python3-wheel; a bare pyenv Python may have neither).
    probe = "import importlib.util as u; import sys; sys.exit(not (u.find_spec('wheel') or " \
            "u.find_spec('setuptools.command.bdist_wheel')))"
    if subprocess.call([str(venv / "bin" / "python"), "-c", probe], env=env) != 0:
        pytest.skip("%s's site-packages have no wheel package (nor a setuptools with bdist_wheel) to build "
                    "offline with" % sys.executable)
    subprocess.check_call([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation", "--no-deps", REPO],
                          env=env, cwd=str(tmp_path))
    code = ("import ferry; l = ferry.Loader(data=%r, pipeline='imagenet-eval', batch_size=4, threads=1); "
            "x, y = next(iter(l)); print(ferry.__file__, tuple(x.shape))" % sample_data)
    out = subprocess.check_output([str(venv / "bin" / "python"), "-c", code], env=env, cwd=str(tmp_path), text=True)
    assert out.startswith(str(venv)) and out.strip().endswith("(4, 3, 224, 224)"), out
