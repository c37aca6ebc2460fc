# Everything a fresh machine needs is set up here: `make demo` and `make test` work from a
# clean clone with nothing but python3 (>= 3.10) and make. Each target sets up what it uses:
#   .venv/            a virtual environment with the package installed editable, with [test]
#   dot (graphviz)    installed with apt-get (as root, or with sudo) or brew when missing
#   clang             the C compiler tinygrad's CPU backend runs (the [tinygrad] extra's tests),
#                     installed the same way; without it those tests are skipped, saying why
#   chromium          Debian's, for the HTML viewer's browser tests (make test), the same way;
#                     playwright drives it, and never downloads a browser of its own
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UOPGRAD := $(VENV)/bin/uopgrad
STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench
LINT_STAMP := $(VENV)/.installed-lint
ONNX_STAMP := $(VENV)/.installed-onnx
TORCH_STAMP := $(VENV)/.installed-torch-exporters
DASK_STAMP := $(VENV)/.installed-dask
OUT := out
BENCH_ARGS ?=  # e.g. make bench BENCH_ARGS=--quick
PYTEST_ARGS ?=  # e.g. make test PYTEST_ARGS=--runslow (the long fuzz run too)
# the suite runs on every core (pytest-xdist), a test file's tests on one worker (--dist
# loadfile), so that a module's costly fixture (the tinygrad zoo compiled by clang, a Dask
# cluster, Chromium) is set up once; --dist loadgroup's xdist_group marks are ignored with
# pytest 9. make test TEST_WORKERS=0 runs it in one process (pdb, -x)
TEST_WORKERS ?= auto
# what the tours of README.md and samples/README.md write in the root, by name: make clean
# removes exactly these, never other files of yours that happen to sit there
TOUR_FILES := mlp-grad-small.uop both.uop broken.uop d1.uop d2.uop d3.uop d4.uop d5.uop grad.uop grad_b2.dot \
	mlp-grad.svg mlp-grad.uop mlp-train.uop poly.json poly.uop rnn.png vjp.uop x.npy attention-grad.svg \
	model.uop grad.svg model-grad.uop gradient-check.json mlp-grad.html mlp-train.html values.npz \
	grad.onnx gpt.onnx cnn-grad.onnx back.uop bert-grad.uop bert-grad.npz mlp-dynamic.onnx \
	fwd-jvp.uop fwd-hvp.uop fwd-hess.uop mlp-hvp.onnx fwd-hvp-poly.uop fwd-d3.uop
# pip: no prompts, no version nagging; the venv's own bin first so tests find `uopgrad`
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PIP_NO_INPUT := 1
RUN := PATH="$(CURDIR)/$(VENV)/bin:$$PATH"
comma := ,
# pip into the venv; its chatter (setuptools' notices on every editable install) goes to a
# log that is shown only when the install fails
pip_install = $(PY) -m pip install $(1) >>$(VENV)/install.log 2>&1 || { cat $(VENV)/install.log >&2; \
	echo "make: pip install $(1) failed (log above, also in $(VENV)/install.log)" >&2; exit 1; }
# The package with extras $(1), editable, as a plain path in a .pth file (setuptools' "compat"
# mode): the default mode installs an import hook that imports pathlib and more at every
# start of Python in the venv, 20-35 ms of each uopgrad command on this machine, more than
# half of `uopgrad info`. A setuptools that no longer has the mode gets the default one.
editable_install = $(PY) -m pip install -e '.[$(1)]' --config-settings editable_mode=compat >>$(VENV)/install.log 2>&1 \
	|| $(call pip_install,-e '.[$(1)]')

.PHONY: help setup venv dot clang chromium demo test bench bench-html bench-map samples samples-check lint clean distclean \
	mutation plants

help:
	@echo "make demo      set up, then diff -> eval -> check -> render samples/mlp.uop (picture in $(OUT)/)"
	@echo "make test      set up, then run the whole test suite"
	@echo "make bench     run the benchmarks (installs the [bench] extra; BENCH_ARGS=--quick for a smoke run)"
	@echo "make bench-html  time the HTML viewer: writing pages, and drawing them in headless Chromium"
	@echo "make bench-map   time eval --map over 16 shards: sequential against --dask local:2"
	@echo "make bench-check  time uopgrad check of a 900-node transformer against eval of its gradient"
	@echo "make samples   rebuild samples/*.uop from samples/build.py (make samples-check: compare only)"
	@echo "make lint      ruff over the package, tests, samples, tools and bench"
	@echo "make mutation TARGET=uopcli/core/simplify  mutation testing of one module or folder with its mapped tests"
	@echo "make plants    plant issue 30's 13 bugs again one at a time (tools/plants.py): each must fail a test"
	@echo "make clean     remove $(OUT)/ and caches; make distclean also removes $(VENV)/"

setup: venv dot clang

venv: $(STAMP)

# The venv is rebuilt when pyproject.toml changes. A Debian/Ubuntu python3 without the
# venv module (python3-venv) gets it installed first, the same way as dot below.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || \
		{ echo "uopgrad needs Python >= 3.10; $(PYTHON) is $$($(PYTHON) --version 2>&1). Run: make PYTHON=python3.11 ..." >&2; exit 1; }
	@$(PYTHON) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); \
		pyver=$$($(PYTHON) -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'); \
		sh tools/install-system-package.sh "python$$pyver-venv" python3 && $(PYTHON) -m venv $(VENV); }
	@echo "make: installing uopgrad and its test tools into $(VENV)/ (pip's log: $(VENV)/install.log)"
	@$(call pip_install,--upgrade pip)
	@$(call editable_install,test)
	@touch $@

# graphviz's `dot` program draws the pictures (`uopgrad render`); the Python package
# `graphviz` alone cannot.
dot:
	@command -v dot >/dev/null 2>&1 || sh tools/install-system-package.sh graphviz graphviz

# tinygrad's CPU backend compiles its kernels with clang. Not fatal when it cannot be
# installed: the tinygrad tests then skip, with the reason in pytest's summary.
clang:
	@command -v clang >/dev/null 2>&1 || sh tools/install-system-package.sh clang llvm || \
		echo "make: clang is missing: the tinygrad bridge's tests will be skipped" >&2

# The HTML viewer's tests open pages in a real headless Chromium: Debian's package (brew's
# chromium on macOS). Where it cannot be installed, those tests skip and say why.
chromium:
	@command -v chromium >/dev/null 2>&1 || sh tools/install-system-package.sh chromium chromium \
		|| echo "make: no chromium: the HTML viewer's browser tests will be skipped" >&2

demo: setup
	@mkdir -p $(OUT)
	@echo "== uopgrad diff: the gradient graph of samples/mlp.uop with respect to w1 and w2"
	$(UOPGRAD) diff samples/mlp.uop --wrt w1,w2 -o $(OUT)/mlp-grad.uop
	@echo "== uopgrad eval: evaluate it on seeded random inputs"
	$(UOPGRAD) eval $(OUT)/mlp-grad.uop --random --seed 0
	@echo "== uopgrad check: compare the gradients with central finite differences"
	$(UOPGRAD) check samples/mlp.uop --wrt w1,w2
	@echo "== uopgrad render: draw the gradient graph"
	$(UOPGRAD) render $(OUT)/mlp-grad.uop -o $(OUT)/mlp-grad.svg
	@echo
	@echo "Done. The gradient graph is in $(OUT)/mlp-grad.uop; its picture is $(CURDIR)/$(OUT)/mlp-grad.svg"

# pytest exit status 5 means it collected no test: that is a failure here, and says so.
test: setup chromium $(ONNX_STAMP) $(TORCH_STAMP) $(DASK_STAMP)
	@$(RUN) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS); status=$$?; \
		if [ $$status -eq 5 ]; then echo "make test: FAILED: pytest collected no tests" >&2; fi; \
		exit $$status

bench: setup $(BENCH_STAMP) $(ONNX_STAMP)
	@if [ -f bench/run.py ]; then $(RUN) $(PY) bench/run.py $(BENCH_ARGS); \
		else echo "make bench: bench/run.py is not there yet" >&2; exit 1; fi

# the HTML viewer's timings (bench/bench_html.py): writes bench/RESULTS-html.md
bench-html: setup chromium
	$(RUN) $(PY) bench/bench_html.py $(BENCH_ARGS)

# eval --map over a data set, sequential and on a local Dask cluster: writes bench/RESULTS-map.md
bench-map: setup $(DASK_STAMP)
	$(RUN) $(PY) bench/bench_map.py $(BENCH_ARGS)

# `uopgrad check` of every weight of a 900-node transformer against `eval` of its gradient
# (bench/bench_check.py): writes bench/RESULTS-check.md
.PHONY: bench-check
bench-check: setup
	$(RUN) $(PY) bench/bench_check.py

$(BENCH_STAMP): $(STAMP)
	@echo "make: installing the benchmarks' extra packages (pip's log: $(VENV)/install.log)"
	@$(call editable_install,test$(comma)bench)
	@touch $@

# onnx and onnxruntime (the [onnx-test] extra) for the ONNX tests (import and export), each
# on its own: a Python for which one has no wheel still runs every other test, and the ONNX
# tests say why they skip (pytest -ra prints the reasons)
$(ONNX_STAMP): $(STAMP)
	@echo "make: installing onnx and onnxruntime for the ONNX tests (pip's log: $(VENV)/install.log)"
	@for package in 'onnx>=1.16' 'onnxruntime>=1.20'; do \
		$(PY) -m pip install "$$package" >>$(VENV)/install.log 2>&1 || \
		echo "make: $$package cannot be installed for $$($(PY) --version 2>&1): its tests will skip (see $(VENV)/install.log)" >&2; \
	done
	@touch $@

# torch==2.13.0 (the [torch-test] extra, a CPU build) for the tests against PyTorch: forward
# mode against torch.func (tests/test_forward_torch.py), exported models against autograd;
# onnxscript for torch's default (dynamo) ONNX exporter; transformers for the HuggingFace
# models users export (tests/test_onnx_hf_models.py). Each where it can be installed, else its
# tests skip, saying why. Pinned: a bare `torch` would fetch a multi-GB CUDA build.
$(TORCH_STAMP): $(STAMP)
	@echo "make: installing torch==2.13.0, onnxscript and transformers for the tests against PyTorch (pip's log: $(VENV)/install.log)"
	@$(PY) -m pip install 'torch==2.13.0' >>$(VENV)/install.log 2>&1 || \
		echo "make: torch==2.13.0 cannot be installed for $$($(PY) --version 2>&1): tests/test_forward_torch.py will skip (see $(VENV)/install.log)" >&2
	@for package in 'onnxscript==0.7.2' 'transformers==5.23.0'; do \
		$(PY) -m pip install "$$package" >>$(VENV)/install.log 2>&1 || \
		echo "make: $$package cannot be installed for $$($(PY) --version 2>&1): its tests will skip (see $(VENV)/install.log)" >&2; \
	done
	@touch $@

# dask and distributed (the [dask] extra) for `eval --map --dask` and its tests, which start real
# Dask clusters; where they cannot be installed, those tests skip and say why
$(DASK_STAMP): $(STAMP)
	@echo "make: installing dask and distributed for the --dask tests (pip's log: $(VENV)/install.log)"
	@$(PY) -m pip install 'dask>=2024.1' 'distributed>=2024.1' >>$(VENV)/install.log 2>&1 || \
		echo "make: dask cannot be installed for $$($(PY) --version 2>&1): the --dask tests will skip (see $(VENV)/install.log)" >&2
	@touch $@

samples: venv
	$(PY) samples/build.py

samples-check: venv
	$(PY) samples/build.py --check

lint: $(LINT_STAMP)
	$(VENV)/bin/ruff check uopcli tests samples tools $(wildcard bench)

$(LINT_STAMP): $(STAMP)
	@$(call editable_install,test$(comma)lint)
	@touch $@

clean:
	rm -rf $(OUT) .pytest_cache .ruff_cache .hypothesis build *.egg-info
	rm -f $(TOUR_FILES)
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)

# Mutation testing (mutmut, the [mutation] extra): every mutant of TARGET (a module or a
# folder) runs against the tests tools/mutation.py maps to it, in a scratch copy under
# out/mutation/; prints the score and the survivors. Slow: minutes for a module, an hour or
# more for a folder on two cores. MUTATION_ARGS=--max-children 1 leaves a core free.
MUTATION_STAMP := $(VENV)/.installed-mutation
TARGET ?= uopcli/core/simplify
MUTATION_ARGS ?=
mutation: setup $(MUTATION_STAMP) $(ONNX_STAMP)
	@$(RUN) $(PY) tools/mutation.py $(TARGET) $(MUTATION_ARGS)

$(MUTATION_STAMP): $(STAMP)
	@$(call editable_install,test$(comma)mutation)
	@touch $@

# Issue 30's plants (tools/plants.py): each bug planted again in a scratch copy under
# out/plants/ must fail one of its tests; a few minutes on two cores
plants: setup $(ONNX_STAMP)
	@$(RUN) $(PY) tools/plants.py
