#!/usr/bin/env bash
# Wheels for the GPU machine (Python 3.12, x86-64), split the way benchmarks/device_run.sh installs them:
#   .whl/*.whl   cudaforge's core dependencies only: what `pip install -e .` gives a GPU box
#   .whl/dev/    the test tools ([dev] minus ruff), installed only by the tests and timing sections
#   .whl/deb/    bubblewrap's Debian package (the device image has none), unpacked by device_run.sh
# torch, triton, numpy, transformers and the NVIDIA libraries are the device's own and never shipped.
# Usage, from the repository root: bash benchmarks/device_wheels.sh   (then carry ".whl")
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
requirements() {  # $1: "core" or "dev"
  python3 - "$1" <<'PY'
import re, sys
try:
    import tomllib
except ImportError:
    import tomli as tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
names = project["dependencies"] if sys.argv[1] == "core" else project["optional-dependencies"]["dev"]
for name in names:
    name = name.split(";")[0].strip()
    if not re.match(r"^(torch|triton|numpy|tomli|ruff|transformers)\b", name, re.I):
        print(name)
PY
}
download() {  # $1: folder, $2: requirements file
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any -d "$1" -r "$2"
  rm -f "$1"/torch-*.whl "$1"/nvidia_*.whl "$1"/triton-*.whl "$1"/numpy-*.whl
}
rm -rf .whl && mkdir -p .whl/dev .whl/deb /tmp/cf-wheels-dev
requirements core > .whl/requirements.txt
requirements dev > .whl/dev/requirements.txt
download .whl .whl/requirements.txt
rm -rf /tmp/cf-wheels-dev/* && download /tmp/cf-wheels-dev .whl/dev/requirements.txt
for wheel in /tmp/cf-wheels-dev/*.whl; do  # only what the core set lacks
  [ -f ".whl/$(basename "$wheel")" ] || mv "$wheel" .whl/dev/
done
(cd .whl/deb && apt-get download bubblewrap >/dev/null 2>&1) || echo "no bubblewrap .deb (apt-get download failed)" >&2
du -sh .whl | cut -f1 | sed 's/^/wheels: /'
