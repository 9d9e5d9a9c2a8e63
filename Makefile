# Both targets work on a fresh clone with only python3: they create .venv/ here.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[cpu,dev,plot,openvino,ray,torch]'
	touch $(STAMP)

demo: $(STAMP)
	mkdir -p out
	$(BIN)/gspo zoo nasrnn --size full -o out/nasrnn.onnx --force
	$(BIN)/gspo info out/nasrnn.onnx
	$(BIN)/gspo optimize out/nasrnn.onnx -o out/nasrnn_gspo.onnx --report out/nasrnn_report.json --force
	$(BIN)/gspo verify out/nasrnn.onnx out/nasrnn_gspo.onnx

test: $(STAMP)
	$(BIN)/ruff check gspo tests
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) out
