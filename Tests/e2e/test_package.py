"""The Debian package (`make deb`): built, lintian-clean, installed with dpkg, working, removed
without a trace.

Everything dpkg runs here (install, the maintainer scripts' pam-auth-update, removal and purge)
runs in a mount namespace of the test's own where /etc/pam.d, /var/lib/pam and debconf's database
are scratch copies (`Scratch`), so the machine's PAM configuration is never touched. The package's
files do land in /usr and /etc/systemd/user for real, and are checked to be gone after the purge;
a fixture purges it whatever happens. Other tests run the build's binaries (harness.BIN) and
pam/pam_msso.so by path, so the installed package changes nothing they run.

The package is built once (`make deb` builds the release binaries: slow the first time) and reused
while it is newer than everything it is made of. Under `make test` the release binaries, and then
the package (scripts/deb, lintian included), are built behind the other tests (scripts/behind), on
the CPU they leave idle; this module runs after them (conftest.py), waits for that build at normal
priority, and finds the package made.
"""
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from harness import GROUP, PASSWORDS, ROOT, Broker, as_uid

MAN_VERBS = ["login", "extend", "logout", "status", "check", "sign", "token", "exec", "keys", "apps", "audit"]
# What the package is made of: a newer file here means the .deb is out of date.
INPUTS = ["Package.swift", "Makefile", "Sources", "pam", "clients/c", "dist", "man", "scripts/deb", "scripts/docs", "README.md",
          "docs"]
# Directories dpkg's maintainer scripts write to outside the package's own files.
SYSTEMD_STATE = [Path("/etc/systemd/user"), Path("/var/lib/systemd/deb-systemd-user-helper-enabled")]
# Left while this module has the package installed; found at the start, it marks our own leftover.
MARKER = Path("/run/msso-package-test")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="installing a package needs root"),
    pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="not a Debian system: no dpkg-deb"),
]


def changelog_version() -> str:
    first = (ROOT / "dist" / "debian" / "changelog").read_text().splitlines()[0]
    return re.match(r"^msso \(([^)]+)\)", first).group(1)


def newest_input() -> float:
    newest = 0.0
    for name in INPUTS:
        path = ROOT / name
        for each in [path, *(path.rglob("*") if path.is_dir() else [])]:
            # pam/tests/ is the tests' driver, built by `make -C pam`, and clients/c/build/ the tests'
            # build of libmsso (by the clone's own path, not the absolute one: a clone under a directory
            # named tests would count nothing, so never rebuild)
            parts = each.relative_to(ROOT).parts
            if each.is_file() and "tests" not in parts and "build" not in parts and each.suffix not in (".o", ".so", ".stamp"):
                newest = max(newest, each.stat().st_mtime)
    return newest


@pytest.fixture(scope="module")
def deb() -> Path:
    # The release build scripts/behind runs behind the tests, raised to normal priority and waited
    # for (what it compiled stays compiled); nothing to wait for outside `make test`.
    done = subprocess.run([ROOT / "scripts" / "behind", "--wait"], capture_output=True, text=True, timeout=3 * 3600)
    assert done.returncode == 0, done.stderr
    arch = subprocess.run(["dpkg", "--print-architecture"], check=True, capture_output=True, text=True).stdout.strip()
    path = ROOT / ".build-deb" / f"msso_{changelog_version()}_{arch}.deb"
    if not path.exists() or path.stat().st_mtime < newest_input():
        done = subprocess.run(["make", "-C", ROOT, "deb"], capture_output=True, text=True, timeout=3 * 3600)
        assert done.returncode == 0, f"make deb failed:\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
        assert path.exists(), done.stdout[-2000:]
    return path


class Scratch:
    """Runs commands with scratch copies of /etc/pam.d, /var/lib/pam and debconf's database
    bind-mounted over the real ones, in a private mount namespace (unshare), made anew for each
    command over the same copies."""

    DIRECTORIES = ["/etc/pam.d", "/var/lib/pam", "/var/cache/debconf"]

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="msso-scratch-"))
        for directory in self.DIRECTORIES:
            copy = self.dir / directory.lstrip("/")
            copy.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["cp", "-a", directory, copy], check=True)
        self.script = "".join(f'mount --bind "$0{d}" {d} && ' for d in self.DIRECTORIES) + 'exec "$@"'

    def path(self, real: str) -> Path:
        """The scratch copy of a file under one of the directories."""
        return self.dir / real.lstrip("/")

    def run(self, *argv, check=True, timeout=600):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", self.script, self.dir,
                               *map(str, argv)], capture_output=True, text=True, timeout=timeout, env=env)
        assert not check or done.returncode == 0, (argv, done.returncode, done.stdout, done.stderr)
        return done

    def dpkg(self, *argv, check=True):
        """dpkg, waiting while another dpkg or apt holds its lock."""
        deadline = time.monotonic() + 600
        while True:
            done = self.run("dpkg", *argv, check=False)
            if "lock" not in done.stderr or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert not check or done.returncode == 0, (argv, done.returncode, done.stdout, done.stderr)
        return done

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def installed_version():
    done = subprocess.run(["dpkg-query", "-W", "-f", "${Status} ${Version}", "msso"], capture_output=True, text=True)
    return done.stdout.split()[-1] if "install ok installed" in done.stdout else None


def package_state() -> bool:
    """Whether dpkg knows the package at all (installed, or removed with its configuration)."""
    done = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", "msso"], capture_output=True, text=True)
    return done.returncode == 0 and "not-installed" not in done.stdout


def tree(paths) -> set[str]:
    return {str(each) for path in paths if path.exists() for each in [path, *path.rglob("*")]}


def listed_paths(deb) -> list[str]:
    """Every path the package holds, as `dpkg-deb -c` lists it (./usr/bin/ -> /usr/bin)."""
    out = subprocess.run(["dpkg-deb", "-c", deb], check=True, capture_output=True, text=True).stdout
    return [os.path.normpath(line.split(maxsplit=5)[5].split(" -> ")[0].lstrip(".")) for line in out.splitlines()]


@pytest.fixture(scope="module")
def scratch():
    system = Scratch()
    yield system
    system.cleanup()


@pytest.fixture(scope="module")
def installed(deb, scratch):
    """The package, installed in the scratch namespace; purged afterwards, whatever happens, with
    any file it replaced put back. Yields what was there before: paths and systemd state."""
    if package_state():
        if not MARKER.exists():
            pytest.skip("a package named msso is installed on this machine; the test leaves it alone")
        scratch.dpkg("--purge", "msso")  # this module's own, left by a run that was killed
    paths = listed_paths(deb)
    owners = subprocess.run(["dpkg", "-S", *[p for p in paths if Path(p).is_file()]], capture_output=True, text=True)
    if owners.stdout.strip():
        pytest.skip(f"files of the package belong to other packages here:\n{owners.stdout}")
    backup = Path(tempfile.mkdtemp(prefix="msso-replaced-"))
    replaced = [p for p in paths if Path(p).is_file() or Path(p).is_symlink()]  # e.g. from `make install`
    for path in replaced:
        (backup / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, backup / path.lstrip("/"), follow_symlinks=False)
    before = {"paths": {p for p in paths if os.path.lexists(p)}, "systemd": tree(SYSTEMD_STATE),
              "common-session": Path("/etc/pam.d/common-session").read_text(), "replaced": replaced}
    MARKER.touch()
    try:
        scratch.dpkg("-i", deb)
        yield before
    finally:
        try:
            if package_state():
                scratch.dpkg("--purge", "msso", check=False)
        finally:
            for path in replaced:
                shutil.copy2(backup / path.lstrip("/"), path, follow_symlinks=False)
            shutil.rmtree(backup, ignore_errors=True)
            MARKER.unlink(missing_ok=True)


def test_lintian_reports_no_errors(deb):
    # scripts/deb ran lintian on this very package (it fails on an error) and kept what it said.
    said = deb.parent / "lintian.txt"
    assert said.exists() and said.stat().st_mtime >= deb.stat().st_mtime, "scripts/deb keeps lintian's words beside the package"
    text = said.read_text()
    print(text)  # the warnings, for pytest -s
    errors = [line for line in text.splitlines() if line.startswith("E:")]
    assert not errors, text


def test_the_package_holds_what_an_administrator_expects(deb, tmp_path):
    multiarch = subprocess.run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], check=True, capture_output=True,
                               text=True).stdout.strip()
    paths = set(listed_paths(deb))
    expected = [
        "/usr/bin/mssod", "/usr/libexec/msso/mssod-idp", "/usr/bin/msso", "/usr/bin/msso-logout", "/usr/bin/git-credential-msso",
        f"/usr/lib/{multiarch}/security/pam_msso.so", "/usr/share/pam-configs/msso",
        "/usr/lib/systemd/user/msso.socket", "/usr/lib/systemd/user/msso.service",
        "/usr/lib/systemd/user-preset/90-msso.preset", "/usr/share/applications/msso-logout.desktop",
        "/usr/share/man/man1/msso.1.gz", "/usr/share/man/man1/msso-logout.1.gz",
        "/usr/share/man/man1/git-credential-msso.1.gz", "/usr/share/man/man5/msso.toml.5.gz",
        "/usr/share/man/man8/mssod.8.gz", "/usr/share/man/man8/pam_msso.8.gz",
        "/usr/share/bash-completion/completions/msso", "/usr/share/zsh/vendor-completions/_msso",
        "/usr/share/fish/vendor_completions.d/msso.fish",
        "/usr/share/doc/msso/copyright", "/usr/share/doc/msso/changelog.Debian.gz",
        f"/usr/lib/{multiarch}/libmsso.so.0", f"/usr/lib/{multiarch}/libmsso.so", f"/usr/lib/{multiarch}/pkgconfig/msso.pc",
        "/usr/include/msso.h", "/usr/include/msso_protocol.h", "/usr/share/man/man3/libmsso.3.gz",
    ]
    assert not [path for path in expected if path not in paths]
    version = subprocess.run(["dpkg-deb", "-f", deb, "Version"], check=True, capture_output=True, text=True).stdout
    assert version.strip() == changelog_version()

    subprocess.run(["dpkg-deb", "-x", deb, tmp_path], check=True)
    module = (tmp_path / f"usr/lib/{multiarch}/security/pam_msso.so").read_bytes()
    assert b"/usr/bin/mssod\0" in module and b"/usr/local/bin/mssod\0" not in module, "the module names the package's mssod"
    service = (tmp_path / "usr/lib/systemd/user/msso.service").read_text()
    assert "ExecStart=/usr/bin/mssod\n" in service and "/usr/local" not in service
    assert "enable msso.socket" in (tmp_path / "usr/lib/systemd/user-preset/90-msso.preset").read_text()
    desktop = (tmp_path / "usr/share/applications/msso-logout.desktop").read_text()
    assert "Name=Log out of single sign-on\n" in desktop and "Exec=msso-logout\n" in desktop
    profile = (tmp_path / "usr/share/pam-configs/msso").read_text()
    assert "Default: no\n" in profile and re.search(r"^Session:\n\toptional\tpam_msso\.so$", profile, re.M)
    pc = (tmp_path / f"usr/lib/{multiarch}/pkgconfig/msso.pc").read_text()
    assert f"libdir=/usr/lib/{multiarch}\n" in pc and "includedir=/usr/include\n" in pc
    for name, text in [("shlibs", f"libmsso 0 msso (>= {changelog_version().rsplit('-', 1)[0]})"),
                       ("triggers", "activate-noawait ldconfig")]:
        control = subprocess.run(["dpkg-deb", "--info", deb, name], check=True, capture_output=True, text=True).stdout
        assert control.strip() == text, (name, control)
    copyright = (tmp_path / "usr/share/doc/msso/copyright").read_text()
    assert copyright.startswith("Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/")


def test_the_installed_commands_answer(installed):
    for command, words in [("msso", MAN_VERBS), ("msso-logout", ["--group"]), ("mssod", ["--socket"]),
                           ("git-credential-msso", ["get|store|erase"])]:
        done = subprocess.run([f"/usr/bin/{command}", "--help"], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, (command, done.stderr)
        assert all(word in done.stdout + done.stderr for word in words), (command, done.stdout)


DUMPABLE_AT_START = r"""#include <stdio.h>
#include <sys/prctl.h>
/* Runs before the program's own code: whether the kernel made the process dumpable at exec. */
__attribute__((constructor)) static void report(void) {
    fprintf(stderr, "dumpable at start: %d\n", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
}
"""


def test_the_installed_programs_that_hold_secrets_cannot_be_read_by_the_user_from_their_first_instruction(installed):
    """mssod holds every group's tokens and, at session start, the login password; mssod-idp holds
    a request's (a password, a client secret, a refresh token). Each makes itself non-dumpable as
    it starts, but a program of the user could open its /proc/PID/mem before that and read it
    later: the kernel checks only at the open (shown on this machine: a descriptor opened before
    PR_SET_DUMPABLE 0 still reads the secret written after it). Installed execute-only (0711,
    root's), the kernel makes them non-dumpable at exec. Attack: the user runs each with a
    preloaded library that reports, before the program's first instruction, whether it is
    dumpable; a readable copy of the same file is, so the mode is what protects them."""
    tmp_path = Path(tempfile.mkdtemp(prefix="msso-dumpable-"))  # pytest's is root's alone
    tmp_path.chmod(0o755)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", tmp_path / "report.so", "-x", "c", "-"], input=DUMPABLE_AT_START,
                   text=True, check=True)

    def dumpable(path, *argv):
        done = subprocess.run([*as_uid(1001), "env", f"LD_PRELOAD={tmp_path / 'report.so'}", path, *argv],
                              input=b"", capture_output=True, timeout=30)
        found = re.search(rb"dumpable at start: (\d)", done.stderr)
        assert found, done.stderr
        return int(found.group(1))

    for program, argv in [(Path("/usr/bin/mssod"), ["--help"]), (Path("/usr/libexec/msso/mssod-idp"), [])]:
        assert program.stat().st_mode & 0o777 == 0o711 and program.stat().st_uid == 0, program
        readable = tmp_path / program.name
        shutil.copy(program, readable)
        readable.chmod(0o755)
        assert dumpable(program, *argv) == 0, f"the installed {program.name} is non-dumpable from exec"
        assert dumpable(readable, *argv) == 1, f"a readable copy of {program.name} is not: the mode is what protects it"
    shutil.rmtree(tmp_path)


def test_man_pages_render(installed):
    out = subprocess.run(["man", "-P", "cat", "msso"], check=True, capture_output=True, text=True,
                         env=dict(os.environ, MANWIDTH="100")).stdout
    assert all(re.search(rf"^\s+{verb}\b", out, re.M) for verb in MAN_VERBS), out
    assert "SEE ALSO" in out and "mssod(8)" in out
    for section, page, phrase in [("8", "mssod", "--idle-timeout"), ("1", "msso-logout", "--group"),
                                  ("1", "git-credential-msso", "password_expiry_utc"),
                                  ("8", "pam_msso", "logout_on_close"), ("5", "msso.toml", "session_timeout"),
                                  ("3", "libmsso", "msso_next_event")]:
        done = subprocess.run(["man", "-P", "cat", section, page], capture_output=True, text=True)
        assert done.returncode == 0 and phrase in done.stdout, (page, done.stderr)
    # The module's page names the mssod the package's module was built for.
    assert "/usr/bin/mssod" in subprocess.run(["man", "-P", "cat", "8", "pam_msso"], capture_output=True, text=True).stdout


def test_bash_completes_the_verbs(installed):
    script = ("source /usr/share/bash-completion/completions/msso && complete -p msso >/dev/null && "
              'COMP_WORDS=(msso lo) COMP_CWORD=1 COMP_LINE="msso lo" COMP_POINT=7; _msso msso lo msso; '
              'printf "%s\\n" "${COMPREPLY[@]}"')
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert {"login", "logout"} <= set(done.stdout.split()), (done.stdout, done.stderr)
    assert Path("/usr/share/zsh/vendor-completions/_msso").read_text().startswith("#compdef msso")
    assert "complete -c 'msso'" in Path("/usr/share/fish/vendor_completions.d/msso.fish").read_text()


def test_the_installed_mssod_serves_the_installed_msso(installed, desktop, idp):
    """/usr/bin/msso is the installed mssod's own tool (it sits beside it): it logs in and reads
    the session on the harness's private keyring and IdP. A release mssod reads the administrator's
    files from /etc/msso alone, so the group is the user's own."""
    broker = Broker(desktop, idp, executable="/usr/bin/mssod", admin_files=False)
    try:
        def msso(*argv, input=None):
            return subprocess.run(["/usr/bin/msso", *argv], env=broker.env, input=input, capture_output=True,
                                  text=True, timeout=60)
        assert msso("login", "--username", "alice", "--password-stdin", input=PASSWORDS["alice"] + "\n").returncode == 0
        status = msso("status")
        assert status.returncode == 0 and GROUP in status.stdout and "valid" in status.stdout, status.stdout + status.stderr
        assert msso("check").returncode == 0
        assert subprocess.run(["/usr/bin/msso-logout"], env=broker.env, capture_output=True, timeout=60).returncode == 0
        assert msso("check").returncode == 2
    finally:
        broker.stop()


PROGRAM = r"""#include <msso.h>
#include <stdio.h>
int main(void) {
    msso_error err;
    char *echo;
    msso_client *broker = msso_connect(NULL, &err);
    if (!broker || msso_call(broker, "ping", "{\"data\": \"installed\"}", &echo, &err) != 0) {
        fprintf(stderr, "%s\n", err.message);
        return err.exit_status;
    }
    printf("%s %s\n", msso_daemon(broker), echo);
    msso_string_free(echo);
    msso_close(broker);
    return 0;
}
"""


def test_a_program_builds_against_the_installed_library_and_talks_to_the_installed_mssod(installed, desktop, idp,
                                                                                        tmp_path):
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "msso"], check=True, capture_output=True,
                           text=True).stdout.split()
    assert "-lmsso" in flags
    (tmp_path / "program.c").write_text(PROGRAM)
    subprocess.run(["cc", "-Wall", "-Werror", "-o", tmp_path / "program", tmp_path / "program.c", *flags], check=True)
    linked = subprocess.run(["ldd", tmp_path / "program"], check=True, capture_output=True, text=True).stdout
    assert re.search(r"libmsso\.so\.0 => /(usr/)?lib/[^/]+/libmsso\.so\.0", linked), "found through ld.so's cache"
    broker = Broker(desktop, idp, executable="/usr/bin/mssod", admin_files=False)
    try:
        done = subprocess.run([tmp_path / "program"], env=broker.env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f'mssod {changelog_version().rsplit("-", 1)[0]} {{"data":"installed"}}\n'
    finally:
        broker.stop()


def session_lines(text):
    return [line.split() for line in text.splitlines() if "pam_msso.so" in line and not line.lstrip().startswith("#")]


def test_pam_auth_update_enables_the_session_line(installed, scratch):
    common = scratch.path("/etc/pam.d/common-session")
    assert not session_lines(common.read_text()), "the profile is off until enabled"
    done = scratch.run("pam-auth-update", "--enable", "msso")
    assert "Local modifications" not in done.stderr, done.stderr
    assert session_lines(common.read_text()) == [["session", "optional", "pam_msso.so"]], common.read_text()
    noninteractive = scratch.path("/etc/pam.d/common-session-noninteractive").read_text()
    assert not session_lines(noninteractive), "cron and other non-interactive sessions print nothing"
    assert "msso" in scratch.path("/var/lib/pam/seen").read_text().split()
    assert Path("/etc/pam.d/common-session").read_text() == installed["common-session"], "the real one is untouched"


def test_removal_and_purge_leave_nothing_behind(installed, scratch):
    """Runs last: removes the package the other tests used."""
    files = subprocess.run(["dpkg", "-L", "msso"], check=True, capture_output=True, text=True).stdout.split("\n")
    files = [f for f in files if f and f != "/."]
    assert "/usr/share/pam-configs/msso" in files
    enabled = Path("/etc/systemd/user/sockets.target.wants/msso.socket")
    assert enabled.is_symlink() and os.readlink(enabled) == "/usr/lib/systemd/user/msso.socket", "postinst enabled it"
    scratch.run("pam-auth-update", "--enable", "msso")  # as an administrator would have
    assert session_lines(scratch.path("/etc/pam.d/common-session").read_text())

    scratch.dpkg("-r", "msso")
    assert not session_lines(scratch.path("/etc/pam.d/common-session").read_text()), "prerm took the line out"
    assert not Path("/usr/share/pam-configs/msso").exists() and not Path("/usr/bin/mssod").exists()
    scratch.dpkg("--purge", "msso")
    assert not package_state()

    left = [f for f in files if os.path.lexists(f) and f not in installed["paths"]]
    assert not left, f"left behind: {left}"
    assert tree(SYSTEMD_STATE) == installed["systemd"], "the user units' enablement is gone"
    assert "msso" not in scratch.path("/var/lib/pam/seen").read_text().split()
    assert not list(Path("/var/lib/dpkg/info").glob("msso.*"))
