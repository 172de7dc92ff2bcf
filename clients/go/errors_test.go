package msso

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// swiftExitStatuses reads the protocol's error names (Sources/MSSOProtocol/ErrorName.swift) and
// the msso command's exit status for each (Sources/MSSOClient/ExitStatus.swift), as
// Tests/e2e/test_python_library.py does for the Python library.
func swiftExitStatuses(t *testing.T) map[string]int {
	read := func(path string) string {
		data, err := os.ReadFile(filepath.Join("..", "..", "Sources", path))
		if err != nil {
			t.Fatalf("the Swift sources are not beside this module: %v", err)
		}
		return string(data)
	}
	names := map[string]string{} // Swift identifier → the name on the wire
	for _, m := range regexp.MustCompile("static let `?(\\w+)`? = ErrorName\\(rawValue: \"(\\w+)\"\\)").
		FindAllStringSubmatch(read("MSSOProtocol/ErrorName.swift"), -1) {
		names[m[1]] = m[2]
	}
	text := read("MSSOClient/ExitStatus.swift")
	statuses := map[string]int{}
	for _, m := range regexp.MustCompile(`case (\w+) = (\d+)`).FindAllStringSubmatch(text, -1) {
		statuses[m[1]], _ = strconv.Atoi(m[2])
	}
	mapping := map[string]int{}
	for _, m := range regexp.MustCompile("case ((?:\\.`?\\w+`?,?\\s*)+): self = \\.(\\w+)").FindAllStringSubmatch(text, -1) {
		for _, c := range regexp.MustCompile("\\.`?(\\w+)`?").FindAllStringSubmatch(m[1], -1) {
			mapping[names[c[1]]] = statuses[m[2]]
		}
	}
	fallback := statuses[regexp.MustCompile(`default: self = \.(\w+)`).FindStringSubmatch(text)[1]]
	expected := map[string]int{}
	for _, name := range names {
		if status, ok := mapping[name]; ok {
			expected[name] = status
		} else {
			expected[name] = fallback
		}
	}
	return expected
}

func TestErrorNamesAndExitStatusesAreTheSwiftSources(t *testing.T) {
	expected := swiftExitStatuses(t)
	if len(expected) < 21 || expected["NotLoggedIn"] != 2 || expected["Internal"] != 70 {
		t.Fatalf("the Swift sources did not read as expected: %v", expected)
	}
	// Every Err variable of errors.go, by name: ErrX must be the error named X.
	file, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, decl := range file.Decls {
		if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.VAR {
			for _, spec := range gen.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(name.Name, "Err") {
						declared[strings.TrimPrefix(name.Name, "Err")] = true
					}
				}
			}
		}
	}
	sentinels := []*Error{ErrNotLoggedIn, ErrExpired, ErrCorrupt, ErrBusy, ErrTimedOut, ErrKeyringLocked,
		ErrKeyringUnavailable, ErrLocked, ErrIdPUnavailable, ErrInvalidCredentials, ErrLoginDenied, ErrForbidden,
		ErrResourceForbidden, ErrNotEntitled, ErrUnknownGroup, ErrUnknownMethod, ErrBadRequest,
		ErrUnsupportedVersion, ErrConfigInvalid, ErrBrokerUnreachable, ErrInternal}
	if len(declared) != len(sentinels) || len(sentinels) != len(expected) {
		t.Fatalf("%d Err variables, %d listed here, %d names in the Swift sources", len(declared), len(sentinels), len(expected))
	}
	for _, sentinel := range sentinels {
		status, ok := expected[sentinel.Name]
		if !ok || !declared[sentinel.Name] {
			t.Errorf("%s: not a name of the Swift sources, or not declared as Err%s", sentinel.Name, sentinel.Name)
		}
		if sentinel.ExitStatus() != status {
			t.Errorf("%s: exit status %d, the Swift sources say %d", sentinel.Name, sentinel.ExitStatus(), status)
		}
	}
	if len(exitStatuses) != len(expected) {
		t.Errorf("exitStatuses has %d names, the Swift sources %d", len(exitStatuses), len(expected))
	}
}

func TestAnUnknownNameIsInternal(t *testing.T) {
	var err error = &Error{Name: "SomethingNew", Message: "a newer daemon's error"}
	if !errors.Is(err, ErrInternal) || errors.Is(err, ErrNotLoggedIn) {
		t.Fatal("an unknown name should be ErrInternal, and nothing else")
	}
	if e := err.(*Error); e.ExitStatus() != 70 || e.Name != "SomethingNew" || err.Error() != "a newer daemon's error" {
		t.Fatalf("%q %d", e.Name, e.ExitStatus())
	}
	known := &Error{Name: "Expired", Message: "run `msso login`"}
	if !errors.Is(known, ErrExpired) || errors.Is(known, ErrInternal) || known.ExitStatus() != 1 {
		t.Fatal("Expired should be ErrExpired only, with exit status 1")
	}
}
