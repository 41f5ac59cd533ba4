# frugal's front door: `make` builds, `make test` tests, `make bench` runs the quick lab.
BUILD   ?= build
PREFIX  ?= /usr/local
VENV    ?= .venv
JOBS    ?= $(shell nproc)
PY      := $(VENV)/bin/python
STRESS_SECONDS ?= 30

.PHONY: all build venv test bench bench-full install clean format

all: build venv

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX)

build: $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

# The CLI lives in python/; it is installed (editable) into a venv of its own.
venv: $(VENV)/.installed
$(VENV)/.installed: python/pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e 'python[test]'
	touch $@

test: all
	cd $(BUILD) && FRUGAL_STRESS_SECONDS=$(STRESS_SECONDS) ctest --output-on-failure -j $(JOBS)
	FRUGAL_BUILD=$(abspath $(BUILD)) $(PY) -m pytest -q python/tests

bench: all
	$(VENV)/bin/frugal bench --build $(BUILD) --out out/lab

bench-full: all
	$(VENV)/bin/frugal bench --full --build $(BUILD) --out out/lab-full

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	clang-format -i src/*.c src/*.h src/*.cpp include/*.h tests/*.c tests/*.cpp bench/*.c bench/*.cpp

clean:
	rm -rf $(BUILD) out
