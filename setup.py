"""Builds torch_tpu._C with CMake against the torch installed in this environment.

Install with `pip install --no-build-isolation -e .` so that the build sees that torch
(build isolation would download another one).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = Path(os.environ.get("TORCH_TPU_BUILD_DIR", ROOT / "build"))
        build_dir.mkdir(parents=True, exist_ok=True)
        if not (build_dir / "build.ninja").exists():
            subprocess.check_call(
                [
                    "cmake",
                    "-S",
                    str(ROOT),
                    "-B",
                    str(build_dir),
                    "-G",
                    "Ninja",
                    f"-DPython3_EXECUTABLE={sys.executable}",
                ]
            )
        jobs = os.environ.get("TORCH_TPU_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs])
        built = next(build_dir.glob("_C*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        # Copy then rename: overwriting a loaded .so in place crashes processes using it.
        staging = target.with_suffix(".so.tmp")
        shutil.copy2(built, staging)
        staging.replace(target)


setup(
    ext_modules=[Extension("torch_tpu._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
