# Both targets work on a fresh clone with only python3: they create .venv/ here.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p out
	$(BIN)/gspo zoo inception_v3 --size tiny -o out/inception_v3_tiny.onnx --force
	$(BIN)/gspo info out/inception_v3_tiny.onnx
	$(BIN)/gspo verify out/inception_v3_tiny.onnx out/inception_v3_tiny.onnx

test: $(STAMP)
	$(BIN)/ruff check gspo tests
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) out
