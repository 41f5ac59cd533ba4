# frugal's front door: `make` builds, `make test` tests, `make bench` runs the quick lab.
BUILD   ?= build
PREFIX  ?= /usr/local
VENV    ?= .venv
JOBS    ?= $(shell nproc)
PY      := $(VENV)/bin/python
STRESS_SECONDS ?= 30
SECONDS ?= 300
MINUTES ?= 10

.PHONY: all build venv test bench bench-full install clean format fuzz sanitize soak check-real

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

# The libFuzzer harness for SECONDS (`make test` runs it for 60 s as the ctest test "fuzz").
# New inputs go to build/tests/fuzz/work/corpus; a crash is saved there as crash-<sha1>.
fuzz: build
	tests/fuzz/run.sh $(BUILD)/tests/fuzz/fuzz_ops $(SECONDS) $(BUILD)/tests/fuzz/work

# The suite under UBSan (build-ubsan/) and the threaded stress test under TSan (build-tsan/).
sanitize:
	JOBS=$(JOBS) tests/sanitize/run.sh

# Stress, fork and churn in a loop for MINUTES, with RSS bounds (stated in tests/soak.sh).
soak: build
	tests/soak.sh $(BUILD) $(MINUTES)

# Real programs' own test suites (CPython's regression tests; GLib's, gdk-pixbuf's, D-Bus's,
# glib-networking's, libsoup's and Pango's installed tests; NumPy's tests) under glibc and
# under frugal in each mode; fails when a test that passes under glibc fails under frugal.
# REAL_SIZE=quick (~7 min, CI) or full (every slice, all modes: ~1-1.5 h); REAL_LIB: the
# library to preload. Needs the suites' Debian packages (.ci/run lists them). Results in
# out/check-real/; tests/real/README.md tells the rest.
REAL_SIZE ?= quick
REAL_LIB  ?= $(BUILD)/libfrugal.so
check-real: build
	/usr/bin/python3 -B tests/real/check_real.py --lib $(REAL_LIB) --size $(REAL_SIZE) --out out/check-real

bench: all
	$(VENV)/bin/frugal bench --build $(BUILD) --out out/lab

bench-full: all
	$(VENV)/bin/frugal bench --full --build $(BUILD) --out out/lab-full

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

format:
	clang-format -i $(wildcard src/*.c src/*.h include/*.h)

clean:
	rm -rf $(BUILD) out build-ubsan build-tsan
