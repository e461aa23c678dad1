"""pyproject.toml: `pip install --no-build-isolation .` into a venv with
--system-site-packages (Debian's torch) installs a working package `ferry`. The build
reuses the test build's CMake directory (FERRY_BUILD_DIR), so it only relinks."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_pip_install_into_a_venv(tmp_path, sample_data):
    build = os.path.dirname(os.environ["FERRY_PYTHON_DIR"])
    venv = tmp_path / "venv"
    subprocess.check_call([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    env = dict(os.environ, FERRY_BUILD_DIR=build)
    env.pop("PYTHONPATH", None)
    subprocess.check_call([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation", "--no-deps", REPO],
                          env=env, cwd=str(tmp_path))
    code = ("import ferry; l = ferry.Loader(data=%r, pipeline='imagenet-eval', batch_size=4, threads=1); "
            "x, y = next(iter(l)); print(ferry.__file__, tuple(x.shape))" % sample_data)
    out = subprocess.check_output([str(venv / "bin" / "python"), "-c", code], env=env, cwd=str(tmp_path), text=True)
    assert out.startswith(str(venv)) and out.strip().endswith("(4, 3, 224, 224)"), out
