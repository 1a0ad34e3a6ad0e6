from setuptools import find_packages, setup

setup(
    name="aitgen",
    version="0.1.0",
    description="A deep-learning inference compiler in the AITemplate family",
    long_description=open("README.md").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    # backends/ (templates, C API header, static C++) ships inside the wheel as the package
    # aitgen_backends; aitgen/_paths.py is the one place that finds it.
    packages=find_packages(include=["aitgen", "aitgen.*"]) + ["aitgen_backends"],
    package_dir={"aitgen_backends": "backends"},
    package_data={"aitgen_backends": ["*.md", "*/*.yaml", "*/*.md", "*/templates/*.j2", "*/include/aitgen/*",
                                      "*/src/*", "*/mock/*"]},
    install_requires=[
        "numpy>=1.24",
        "scipy>=1.10",        # erf / expit in the oracle
        "ml_dtypes>=0.3",     # bfloat16 storage
        "jinja2>=3.1",        # kernel templates (backends)
        "ninja>=1.11",        # parallel compiles; error parsing expects its FAILED: lines
        "tqdm>=4.60",         # build progress
        "pyyaml>=6",          # backends/<b>/backend.yaml
        "safetensors>=0.4",   # weights file
        "msgpack>=1.0",       # AMDGPU code object metadata, read by the mock device (runtime/hsaco.py)
        "onednn-devel-cpu-gomp==2023.2.0",  # CPU GEMM/conv; pin also in 3rdparty/onednn.txt
    ],
    extras_require={
        "dev": ["pytest>=7", "hypothesis>=6.80", "pytest-xdist>=3", "matplotlib>=3.7"],  # + viz: its tests
        "viz": ["matplotlib>=3.7"],  # `aitgen inspect DIR` draws memory.png
        "torch": ["torch==2.13.0"],  # our machines hold this CPU build on disk; a looser range pulls a multi-GB CUDA build
        "onnx": ["onnx>=1.15"],
        # benchmarks/cpu_vs_peers.py (with the torch extra); transformers and onnxscript (torch's dynamo
        # exporter): benchmarks/cpu_hf_exports.py, models written outside this project, exported as users do
        "bench": ["onnxruntime>=1.17", "onnx>=1.15", "transformers>=4.45", "onnxscript>=0.5"],
        # CUTLASS: headers only, pin also in 3rdparty/cutlass.txt. cuda-bindings: the runtime's
        # device memory and checks (13.x wants a CUDA 13 driver, as the nvcc 13 builds do).
        "cuda": ["nvidia-cutlass==4.2.0.0", "cuda-bindings>=12.6"],
        # hip-python: the ROCm runtime's device memory and checks. Its versions follow ROCm's (6.2.x for
        # ROCm 6.2; PyPI has none for HIP 5.2, whose builds still compile without it): install the one
        # matching the machine's ROCm, e.g. pip install 'hip-python~=6.2.0'. CK is headers found by
        # aitgen/codegen/locate.py (no PyPI package builds with HIP 5.2).
        "rocm": ["hip-python>=5.6"],
        # `aitgen serve --engine ray` (aitgen/serving/ray.py): about 380 MB in a venv, under a minute of pip.
        "serve": ["ray[serve]==2.60.0"],
        # `aitgen serve --engine triton` (aitgen/serving/triton.py), apart from "serve" because it needs
        # numpy<2: nvidia-pytriton 0.7.0 pins it, and its prebuilt Triton stub reads numpy 1's array
        # layout (under numpy 2 every answer fails). Install it in a virtualenv of its own; ~210 MB.
        "triton": ["nvidia-pytriton==0.7.0", "numpy>=1.24,<2"],
    },
    entry_points={"console_scripts": ["aitgen=aitgen.cli:main"]},
    include_package_data=True,
)
