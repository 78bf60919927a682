"""Builds torch_tiny with CMake (engine, torch extension, GoogleTest binary).

Install for development with:  pip install --no-build-isolation -e .
The extension must be built against the torch that is installed, hence no
build isolation.
"""
import os
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.join(ROOT, "build")
        os.makedirs(build_dir, exist_ok=True)
        cfg = ["cmake", ROOT, f"-DPython3_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"]
        # TINY_CPU_JIT=OFF (no LLVM: kernels run only on CUDA devices), TINY_BUILD_TESTS=OFF
        options = [f"-D{name}={os.environ[name]}" for name in ("TINY_CPU_JIT", "TINY_BUILD_TESTS") if name in os.environ]
        fresh = not os.path.exists(os.path.join(build_dir, "CMakeCache.txt"))
        if fresh and subprocess.call(["which", "ninja"], stdout=subprocess.DEVNULL) == 0:
            cfg += ["-G", "Ninja"]
        if fresh or options:
            subprocess.check_call(cfg + options, cwd=build_dir)
        jobs = os.environ.get("TINY_BUILD_JOBS", "2")
        subprocess.check_call(["cmake", "--build", ".", "-j", jobs], cwd=build_dir)
        # CMake writes torch_tiny/_C*.so in the source tree; copy it where
        # setuptools expects it for non-editable installs.
        target = os.path.abspath(self.get_ext_fullpath(ext.name))
        built = os.path.join(ROOT, "torch_tiny", os.path.basename(target))
        if target != built:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            self.copy_file(built, target)


setup(
    name="torch_tiny",
    version="0.1.0",
    description="A lazy, fusing PyTorch device backend: torch.device('tiny')",
    packages=find_packages(include=["torch_tiny", "torch_tiny.*"]),
    ext_modules=[CMakeExtension("torch_tiny._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.10",
    install_requires=["torch>=2.11", "tqdm", "graphviz"],
    entry_points={
        "torch.backends": ["torch_tiny = torch_tiny:_autoload"],
        "torch_dynamo_backends": ["tiny = torch_tiny.compile:tiny_backend"],
    },
)
