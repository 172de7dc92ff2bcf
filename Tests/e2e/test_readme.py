"""What the README and the guide say, held to the code where that can be mechanical:

- every `msso` and `mssod` verb and `--flag` they show (in their shell blocks, after `$ ` in an
  output block, and in their inline code) exists in the built binaries: `msso VERB --help` (or
  `msso VERB SUBVERB --help`) lists the flag;
- the version is the same in every place it is written: the top entry of dist/debian/changelog,
  `brokerVersion` in Sources/MSSOServer/Connection.swift, the Python package's `__version__`, and
  any `mssod X.Y.Z` a document or header shows as what `hello` says.
"""
import re
import subprocess
from functools import cache

import pytest

from harness import BIN, ROOT

DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "GUIDE.md"]
# `msso` or `mssod` as a command: not inside a path or another name (git-credential-msso, pam_msso.so,
# /usr/bin/msso, msso.toml), and followed by something.
COMMAND = re.compile(r"(?<![\w./-])(msso|mssod)(?![\w.-])(?=[ \t]+([^\n]*))")


def shell_text(document: str) -> list[str]:
    """The places a document shows commands: its sh blocks' lines (comments dropped, continuation
    lines joined), `$ ` lines of its other blocks, and its inline code (a span's line breaks as
    spaces)."""
    found, prose, fence, language = [], [], None, ""
    for line in document.split("\n"):
        if line.startswith("```"):
            if fence is None:
                fence, language = [], line[3:].strip()
            else:
                text = "\n".join(fence).replace("\\\n", " ")
                for command in text.split("\n"):
                    if language == "sh":
                        found.append(re.sub(r"(^|\s)#.*", "", command))
                    elif command.startswith("$ "):
                        found.append(command[2:])
                fence = None
            continue
        if fence is not None:
            fence.append(line)
        else:
            prose.append(line)
    found += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", "\n".join(prose))]
    return found


def invocations(text: str):
    """(command, the words after it up to the end of that command) for each command in `text`."""
    for match in COMMAND.finditer(text):
        rest = re.sub(r"'[^']*'|\"[^\"]*\"", "VALUE", match.group(2))
        rest = re.split(r"\)|\||;|&&|`|<|>", rest)[0]
        yield match.group(1), [word.strip("[]") for word in rest.split()]


@cache
def help_text(*words: str) -> tuple[int, str]:
    done = subprocess.run([BIN / words[0], *words[1:], "--help"], capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout + done.stderr


def subcommands(*words: str) -> set[str]:
    code, text = help_text(*words)
    if "SUBCOMMANDS:" not in text:
        return set()
    section = text.split("SUBCOMMANDS:", 1)[1]
    return {m.group(1) for m in re.finditer(r"^  ([a-z][a-z-]*)", section, re.M)}


def shown() -> list[tuple[str, tuple[str, ...], str]]:
    """(document, the command and its verbs, flag or '') for every verb and flag shown."""
    out = []
    for path in DOCUMENTS:
        for text in shell_text(path.read_text()):
            for command, words in invocations(text):
                verbs = [command]
                if command == "msso":
                    if not words or not re.fullmatch(r"[a-z-]+", words[0]):
                        continue  # `msso --help`, a placeholder (`msso VERB`), or prose
                    verbs.append(words.pop(0))
                    if words and words[0] in subcommands(*verbs):
                        verbs.append(words.pop(0))
                for word in words:
                    if word == "--" or (command == "msso" and verbs[1] == "ssh" and not word.startswith("-")):
                        break  # the command msso exec runs; ssh's host, options and command
                    if word.startswith("--"):
                        out.append((path.name, tuple(verbs), word.split("=", 1)[0].strip("[]…")))
                out.append((path.name, tuple(verbs), ""))
    return sorted(set(out))


SHOWN = shown()


def test_the_documents_show_commands():
    verbs = {verbs for _, verbs, _ in SHOWN}
    assert ("msso", "sign") in verbs and ("mssod",) in verbs and ("msso", "apps", "allow") in verbs
    assert len(SHOWN) > 40, SHOWN


def test_every_verb_but_ssh_takes_json():
    """The guide: "every verb but `msso ssh` (which hands the terminal to ssh) takes `--json`"."""
    verbs = subcommands("msso")
    assert {"login", "sign", "ssh", "doctor"} <= verbs, verbs
    leaves = [(verb, sub) for verb in verbs - {"help"} for sub in subcommands("msso", verb)] + \
        [(verb,) for verb in verbs - {"help"} if not subcommands("msso", verb)]
    without = {" ".join(leaf) for leaf in leaves if "--json" not in help_text("msso", *leaf)[1]}
    assert without == {"ssh"}


@pytest.mark.parametrize("document, verbs, flag", SHOWN, ids=[f"{d}:{' '.join(v)} {f}".strip() for d, v, f in SHOWN])
def test_each_verb_and_flag_shown_exists(document, verbs, flag):
    code, text = help_text(*verbs)
    assert code == 0, f"{document} shows `{' '.join(verbs)}`, which the binary does not know:\n{text}"
    if flag:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), \
            f"{document} shows `{' '.join(verbs)} {flag}`, which `{' '.join(verbs)} --help` does not list:\n{text}"


def versions() -> dict[str, str]:
    changelog = (ROOT / "dist" / "debian" / "changelog").read_text().split("\n", 1)[0]
    found = {"dist/debian/changelog": re.match(r"msso \(([^-)]+)", changelog).group(1)}
    connection = (ROOT / "Sources" / "MSSOServer" / "Connection.swift").read_text()
    found["Sources/MSSOServer/Connection.swift"] = re.search(r'brokerVersion = "([^"]+)"', connection).group(1)
    python = (ROOT / "clients" / "python" / "src" / "msso" / "__init__.py").read_text()
    found["clients/python/src/msso/__init__.py"] = re.search(r'__version__ = "([^"]+)"', python).group(1)
    for path in [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("clients/*/README.md"), ROOT / "clients" / "c" / "msso.h",
                 *ROOT.glob("man/*.[0-9]")]:
        for number, version in enumerate(re.findall(r"mssod (\d+\.\d+\.\d+)", path.read_text())):
            found[f"{path.relative_to(ROOT)} ({number + 1})"] = version
    return found


def test_the_version_is_the_same_wherever_it_is_written():
    found = versions()
    assert len(found) >= 3
    assert len(set(found.values())) == 1, found
