# The two commands of the README: `make demo` and `make test`. Each installs what it needs first.
SHELL := /bin/bash
export PATH := $(PATH):/opt/swift/usr/bin

PREFIX ?= /usr/local
# The tests' virtual environment (made by scripts/setup): it runs pytest and the Python parts the
# tests start.
export MSSO_TEST_VENV ?= $(CURDIR)/.venv-test
# Release builds, apart from the tests' debug build: the daemon with the Swift runtime linked in,
# the commands fully static (a command then starts in about the time of `true`: no dynamic
# loader, no shared Swift libraries to map and relocate).
RELEASE = .build-release
CLIENTS = msso msso-logout git-credential-msso
# Release builds carry symbols but no DWARF: the package strips them anyway, a crash's backtrace
# still names its functions, and the compilers do about 15 % less work (mssod, when SwiftNIO was
# part of it: 1,360 CPU seconds instead of about 1,600 on the 2-core machine; about 640 from
# scratch now), which `make test`'s release build behind the tests needs most. The debug build
# keeps line tables (DEBUG_FLAGS, below).
NO_DWARF = -Xswiftc -gnone -Xcc -g0
# The daemon, linked for a small resident size (docs/ARCHITECTURE.md, "Where mssod's memory goes"): by lld, each
# function in a section of its own, the functions a broker's life runs laid out together
# (bench/mssod.order, made by `make order`) and the compiler's unnamed ones gathered (bench/mssod.ld),
# relative relocations packed (DT_RELR), its symbols not exported, and all of its relocations done
# before it starts (-z now: the GOT read-only).
DAEMON_LINK = -Xswiftc -use-ld=lld -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections \
	-Xlinker --symbol-ordering-file=$(abspath bench/mssod.order) -Xlinker --no-warn-symbol-ordering \
	-Xlinker -T -Xlinker $(abspath bench/mssod.ld) \
	-Xlinker -z -Xlinker pack-relative-relocs -Xlinker --no-export-dynamic -Xlinker -z -Xlinker now
# And libstdc++, which the Swift runtime uses, linked in from its archive (through a linker script
# named libstdc++.so in a directory searched first): the shared library's relocated data and
# scattered pages cost about 1.1 MB. Left shared when the archive is not installed.
CXX_ARCHIVE := $(shell clang -print-file-name=libstdc++.a 2>/dev/null)
STATIC_CXX = $(RELEASE)/static-c++
DAEMON_CXX = $(if $(filter /%,$(CXX_ARCHIVE)),-Xswiftc -L$(abspath $(STATIC_CXX)))

.PHONY: demo test setup build unit e2e bench order faults fuzz release release-daemon release-clients docs install deb clean names

demo: setup build
	./examples/demo.sh

# The release build, and the package made from it, that test_package.py needs run behind the rest
# (scripts/behind), from the start, once the dependencies are resolved (so that the two builds do
# not resolve them at once), on the CPU the debug build, the unit tests and the end-to-end tests
# leave idle; test_package.py waits for them, at normal priority, and finds the package made.
test: setup
	swift package resolve
	./scripts/behind $(MAKE) build unit -- $(MAKE) e2e

setup:
	./scripts/setup

# The wire's names in every language, written from their one definition, protocol/names.json
# (docs/ARCHITECTURE.md, "One definition of the protocol"); Tests/e2e/test_wire_names.py checks them.
names:
	./scripts/generate-names

# The tests' debug build, without DWARF beyond line tables, which only an interactive debugger
# reads (a crash's or gdb's backtrace still names each file and line). `swift test` is given the
# same, or it would build everything again; so would a plain `swift build` after it. (The index
# that debug builds also write stays: `swift test` finds the XCTest cases through it on Linux.)
DEBUG_FLAGS = -Xswiftc -gline-tables-only

# The tests' modules too, in the same build (their compiles fill the gaps of the others'), so that
# `swift test` finds nothing left to build.
build:
	swift build --build-tests $(DEBUG_FLAGS)
	$(MAKE) -C pam
	$(MAKE) -C clients/c tests

unit:
	swift test $(DEBUG_FLAGS)

# In three processes (pytest-xdist), each taking a whole module at a time: the tests wait far more
# than they compute (alone, one process keeps 18 % of the 2-core machine busy), so three end in
# about 210 s what one did in 565. Then, alone and last (conftest's LAST), the package's tests, which
# wait for the release build behind (scripts/behind), and the log check, which reads the logs and
# secrets each process recorded in E2E_RECORDS. The 20 slowest tests are listed: where the time goes.
E2E_RECORDS = $(CURDIR)/.build/e2e-records
E2E_LAST = Tests/e2e/test_package.py Tests/e2e/test_no_secrets_in_logs.py
e2e:
	rm -rf $(E2E_RECORDS) && mkdir -p -m 700 $(E2E_RECORDS)
	export MSSO_E2E_RECORDS=$(E2E_RECORDS); \
	$(MSSO_TEST_VENV)/bin/python -m pytest -q -n 3 --dist loadfile --durations=20 Tests/e2e $(E2E_LAST:%=--ignore=%); first=$$?; \
	$(MSSO_TEST_VENV)/bin/python -m pytest -q $(E2E_LAST); last=$$?; \
	rm -rf $(E2E_RECORDS); [ $$first = 0 ] && [ $$last = 0 ]

bench: setup
	./scripts/bench

# Not part of `make test`: traces a release mssod through a broker's life and rewrites
# bench/mssod.order (bench/order.py says why and how); `make release` then links by it.
order: setup
	./scripts/bench --order

# Not part of `make test`: mssod killed (-9, TERM, with its requests or without), logged out, its
# keyring and bus killed and started again, at random moments of refreshes under one-use rotation,
# many times; counts sessions lost and resurrected (scripts/faults).
faults: setup build
	$(MSSO_TEST_VENV)/bin/python scripts/faults

# Not part of `make test`: a million malformed frames at a real mssod (a few minutes), then checks
# that it is alive, answers, logs in and signs, and stayed within its memory bound.
fuzz: setup build
	$(MSSO_TEST_VENV)/bin/python scripts/fuzz

# mssod-idp, the process that makes mssod's requests to identity providers: plain C over the
# system's libcurl, with Debian's hardening flags, beside mssod (the debug build's is SwiftPM's).
IDP_FLAGS = -std=c11 -Wall -Wextra -Werror -O2 -g0 -D_FORTIFY_SOURCE=2 -fstack-protector-strong \
	-fstack-clash-protection -fcf-protection -fPIE -pie -Wl,-z,relro,-z,now

# The daemon and the commands are built in scratch paths of their own, so `make -j2 release` (as
# `make test` runs it behind the tests) builds both at once: one's single-threaded steps (a module's
# whole-module compile, a static link) leave the other CPU to the other.
release: release-daemon release-clients

release-daemon:
	$(if $(DAEMON_CXX),mkdir -p $(STATIC_CXX) && echo 'INPUT($(CXX_ARCHIVE))' > $(STATIC_CXX)/libstdc++.so)
	@# SwiftPM does not see the link-order files change: relink when they are newer than mssod.
	@for input in bench/mssod.order bench/mssod.ld; do \
		[ ! $$input -nt $(RELEASE)/daemon/release/mssod ] || rm -f $(RELEASE)/daemon/release/mssod; \
	done
	swift build -c release --scratch-path $(RELEASE)/daemon --static-swift-stdlib $(NO_DWARF) $(DAEMON_LINK) $(DAEMON_CXX) --product mssod
	@# After SwiftPM, whose release directory is a link it makes (a directory made before is replaced).
	$(CC) $(IDP_FLAGS) -ISources/CMSSOSystem/include -o $(RELEASE)/daemon/release/mssod-idp Sources/mssod-idp/main.c \
		Sources/CMSSOSystem/kernel_keys.c -lcurl-gnutls

# The commands, and swift-argument-parser's generate-manual (their man pages and completions)
# built beside them with the same flags (so nothing is built twice).
GENERATOR = $(RELEASE)/clients/release/generate-manual
release-clients:
	for product in $(CLIENTS) generate-manual; do \
		swift build -c release --scratch-path $(RELEASE)/clients $(NO_DWARF) -Xswiftc -static-executable --product $$product || exit 1; \
	done

# Man pages and completions for PREFIX, in $(RELEASE)/docs/share (see scripts/docs).
docs: release
	rm -rf $(RELEASE)/docs
	./scripts/docs --out $(RELEASE)/docs --generator $(GENERATOR) --prefix $(PREFIX) \
		mssod=$(RELEASE)/daemon/release/mssod msso=$(RELEASE)/clients/release/msso \
		msso-logout=$(RELEASE)/clients/release/msso-logout

# mssod (and mssod-idp), msso, msso-logout and git-credential-msso, the PAM module, libmsso (the C library, its
# headers and pkg-config file, in $(PREFIX)/lib and $(PREFIX)/include), the systemd user units
# (`systemctl --user enable --now msso.socket` then makes the broker start at the first connection
# of a session), man pages and bash, zsh and fish completions.
install: setup release docs
	install -D -m 0755 -t $(DESTDIR)$(PREFIX)/bin $(addprefix $(RELEASE)/clients/release/,$(CLIENTS))
	@# The two that hold secrets, execute-only: the kernel makes them non-dumpable at exec (docs/SECURITY.md).
	install -D -m 0711 -t $(DESTDIR)$(PREFIX)/bin $(RELEASE)/daemon/release/mssod
	install -D -m 0711 -t $(DESTDIR)$(PREFIX)/libexec/msso $(RELEASE)/daemon/release/mssod-idp
	$(MAKE) -C pam install PREFIX=$(PREFIX)
	$(MAKE) -C clients/c install PREFIX=$(PREFIX)
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/user
	for unit in msso.socket msso.service; do \
		sed 's|/usr/local/|$(PREFIX)/|g' dist/systemd/$$unit > $(DESTDIR)$(PREFIX)/lib/systemd/user/$$unit || exit 1; \
	done
	cd $(RELEASE)/docs/share && find . -type f -exec install -D -m 0644 {} $(abspath $(DESTDIR)$(PREFIX))/share/{} \;
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/share/doc/msso README.md docs/*.md

# The Debian package, checked by lintian: .build-deb/msso_VERSION_ARCH.deb (see scripts/deb).
deb: setup release
	./scripts/deb

clean:
	rm -rf .build $(RELEASE) .build-deb
	$(MAKE) -C pam clean
	$(MAKE) -C clients/c clean
