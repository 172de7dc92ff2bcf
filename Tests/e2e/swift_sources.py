"""What the client libraries retype from the Swift sources, read from those sources: each
library's table of errors is held to them (test_python_library.py, test_c_library.py)."""
import re

from harness import ROOT


def swift_error_names():
    """ErrorName.swift: Swift identifier -> the name on the wire."""
    text = (ROOT / "Sources" / "MSSOProtocol" / "ErrorName.swift").read_text()
    return dict(re.findall(r'static let `?(\w+)`? = ErrorName\(rawValue: "(\w+)"\)', text))


def swift_exit_statuses():
    """ExitStatus.swift: the name on the wire -> the msso command's exit status."""
    text = (ROOT / "Sources" / "MSSOClient" / "ExitStatus.swift").read_text()
    statuses = {case: int(value) for case, value in re.findall(r"case (\w+) = (\d+)", text)}
    names = swift_error_names()
    mapping = {}
    for cases, status in re.findall(r"case ((?:\.`?\w+`?,?\s*)+): self = \.(\w+)", text):
        for case in re.findall(r"\.`?(\w+)`?", cases):
            mapping[names[case]] = statuses[status]
    default = statuses[re.search(r"default: self = \.(\w+)", text).group(1)]
    return {name: mapping.get(name, default) for name in names.values()}
