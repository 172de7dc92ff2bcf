# The two commands of the README: `make demo` and `make test`. Each installs what it needs first.
SHELL := /bin/bash
export PATH := $(PATH):/opt/swift/usr/bin

.PHONY: demo test setup build unit e2e bench clean

demo: setup build
	./examples/demo.sh

test: setup build unit e2e

setup:
	./scripts/setup

build:
	swift build

unit:
	swift test

e2e:
	python3 -m pytest -q Tests/e2e

bench: setup
	./scripts/bench

clean:
	rm -rf .build
