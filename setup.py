"""Builds torch_tpu._C with CMake against the torch installed in this environment.

Install with `pip install --no-build-isolation -e .`, or make a wheel with
`pip wheel --no-build-isolation --no-deps .`, so that the build sees that torch (build
isolation would download another one). The extension links torch's C++ libraries, whose ABI
changes between releases: the version names the torch release built against
(0.1.0+torch2.13) and the wheel requires that release.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BASE_VERSION = "0.1.0"


# Building imports torch, whose autoload would load an installed torch_tpu: an earlier build,
# perhaps for another torch. The build needs none.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"


def torch_release() -> str:
    """major.minor of the torch this build compiles against."""
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return f"{major}.{minor}"


# One build tree per torch the extension is built against (TORCH_TPU_BUILD_DIR).
BUILD_DIR = Path(os.environ.get("TORCH_TPU_BUILD_DIR", ROOT / "build"))


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        BUILD_DIR.mkdir(parents=True, exist_ok=True)
        if not (BUILD_DIR / "build.ninja").exists():
            subprocess.check_call(
                [
                    "cmake",
                    "-S",
                    str(ROOT),
                    "-B",
                    str(BUILD_DIR),
                    "-G",
                    "Ninja",
                    f"-DPython3_EXECUTABLE={sys.executable}",
                ]
            )
        jobs = os.environ.get("TORCH_TPU_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", str(BUILD_DIR), "-j", jobs])
        built = next(BUILD_DIR.glob("_C*.so"))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        # Copy then rename: overwriting a loaded .so in place crashes processes using it.
        staging = target.with_suffix(".so.tmp")
        shutil.copy2(built, staging)
        staging.replace(target)


class BuildPyWithDocs(build_py):
    """Ships the documentation's pages (docs/**/*.md) inside the package, as
    torch_tpu/docs/pages/, where `python -m torch_tpu docs` searches them; an editable install
    reads the checkout's docs/ folder instead."""

    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "torch_tpu" / "docs" / "pages"
        shutil.rmtree(target, ignore_errors=True)
        for page in (ROOT / "docs").rglob("*.md"):
            copy = target / page.relative_to(ROOT / "docs")
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(page, copy)


TORCH_RELEASE = torch_release()
setup(
    version=f"{BASE_VERSION}+torch{TORCH_RELEASE}",
    install_requires=[f"torch=={TORCH_RELEASE}.*"],
    ext_modules=[Extension("torch_tpu._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithDocs},
    # setuptools' staging and metadata stay in the build tree too: in the checkout's top folder
    # the metadata would be on sys.path of every process started there, naming whichever build
    # came last, and builds against two torches would share the staging.
    options={
        "egg_info": {"egg_base": str(BUILD_DIR)},
        "build": {"build_base": str(BUILD_DIR / "setuptools")},
    },
)
