# Both targets work on a fresh clone with only python3: they create .venv/ here.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,plot]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p out
	$(BIN)/gspo zoo nasnet_mobile --size full -o out/nasnet_mobile.onnx --force
	$(BIN)/gspo info out/nasnet_mobile.onnx
	$(BIN)/gspo convert out/nasnet_mobile.onnx -o out/nasnet_mobile_roundtrip.onnx --force
	$(BIN)/gspo verify out/nasnet_mobile.onnx out/nasnet_mobile_roundtrip.onnx

test: $(STAMP)
	$(BIN)/ruff check gspo tests
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) out
