# The two commands of the README: `make demo` and `make test`. Each installs what it needs first.
SHELL := /bin/bash
export PATH := $(PATH):/opt/swift/usr/bin

PREFIX ?= /usr/local
BIN = $(shell swift build -c release --show-bin-path 2>/dev/null)

.PHONY: demo test setup build unit e2e bench install clean

demo: setup build
	./examples/demo.sh

test: setup build unit e2e

setup:
	./scripts/setup

build:
	swift build
	$(MAKE) -C pam

unit:
	swift test

e2e:
	python3 -m pytest -q Tests/e2e

bench: setup
	./scripts/bench

# mssod, msso and msso-logout, the PAM module, and the systemd user units (`systemctl --user
# enable --now msso.socket` then makes the broker start at the first connection of a session).
install: setup
	swift build -c release --product mssod
	swift build -c release --product msso
	swift build -c release --product msso-logout
	install -D -m 0755 -t $(DESTDIR)$(PREFIX)/bin $(BIN)/mssod $(BIN)/msso $(BIN)/msso-logout
	$(MAKE) -C pam install
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/lib/systemd/user dist/systemd/msso.socket dist/systemd/msso.service
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/share/doc/msso README.md docs/*.md

clean:
	rm -rf .build
	$(MAKE) -C pam clean
