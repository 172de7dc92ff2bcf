"""The one definition of the wire's names, protocol/names.json (scripts/generate-names writes every
language's copy from it): what each library's compiled table of errors is held to
(test_python_library.py, test_c_library.py; the Go module's errors_test.go reads it too)."""
import json

from harness import ROOT

DEFINITION = ROOT / "protocol" / "names.json"


def definition():
    return json.loads(DEFINITION.read_text())


def exit_statuses():
    """The name on the wire -> the msso command's exit status for it."""
    names = definition()
    statuses = {entry["swift"]: entry["status"] for entry in names["exitStatuses"]}
    return {error["name"]: statuses[error["exit"]] for error in names["errors"]}
