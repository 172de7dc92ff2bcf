package msso

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// definedExitStatuses reads the one definition of the protocol's names, protocol/names.json (which
// names.go is generated from): each error name and the msso command's exit status for it.
func definedExitStatuses(t *testing.T) map[string]int {
	data, err := os.ReadFile(filepath.Join("..", "..", "protocol", "names.json"))
	if err != nil {
		t.Fatalf("the definition is not beside this module: %v", err)
	}
	var names struct {
		ExitStatuses []struct {
			Swift  string
			Status int
		}
		Errors []struct {
			Name string
			Exit string
		}
	}
	if err := json.Unmarshal(data, &names); err != nil {
		t.Fatal(err)
	}
	statuses := map[string]int{}
	for _, entry := range names.ExitStatuses {
		statuses[entry.Swift] = entry.Status
	}
	expected := map[string]int{}
	for _, entry := range names.Errors {
		status, ok := statuses[entry.Exit]
		if !ok {
			t.Fatalf("%s: exit %q is not an exit status of the definition", entry.Name, entry.Exit)
		}
		expected[entry.Name] = status
	}
	return expected
}

func TestErrorNamesAndExitStatusesAreTheDefinition(t *testing.T) {
	expected := definedExitStatuses(t)
	if len(expected) < 21 || expected["NotLoggedIn"] != 2 || expected["Internal"] != 70 {
		t.Fatalf("the definition did not read as expected: %v", expected)
	}
	// Every Err variable of names.go, by name: ErrX must be the error named X.
	file, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, 0)
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
		ErrUnsupportedVersion, ErrConfigInvalid, ErrBrokerUnreachable, ErrInternal, ErrResourceRefused}
	if len(declared) != len(sentinels) || len(sentinels) != len(expected) {
		t.Fatalf("%d Err variables, %d listed here, %d names in the definition", len(declared), len(sentinels), len(expected))
	}
	for _, sentinel := range sentinels {
		status, ok := expected[sentinel.Name]
		if !ok || !declared[sentinel.Name] {
			t.Errorf("%s: not a name of the definition, or not declared as Err%s", sentinel.Name, sentinel.Name)
		}
		if sentinel.ExitStatus() != status {
			t.Errorf("%s: exit status %d, the definition says %d", sentinel.Name, sentinel.ExitStatus(), status)
		}
	}
	if len(exitStatuses) != len(expected) {
		t.Errorf("exitStatuses has %d names, the definition %d", len(exitStatuses), len(expected))
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
