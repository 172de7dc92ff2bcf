package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestARegistryIsNamedAsTheURLItsTokenGoesTo(t *testing.T) {
	for registry, want := range map[string]string{
		"registry.example.com":         "https://registry.example.com/v2/",
		"127.0.0.1:5000":               "https://127.0.0.1:5000/v2/",
		"https://index.docker.io/v1/":  "https://index.docker.io/v1/",
		"https://registry.example.com": "https://registry.example.com/",
		"ftp://registry.example.com/":  "",
		"user@registry.example.com":    "",
	} {
		got, ok := resourceOf(registry)
		if got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", registry, got, ok, want)
		}
	}
}

func TestTheGroupAndAccountComeBeforeTheAction(t *testing.T) {
	env := func(name string) string { return map[string]string{"MSSO_GROUP": "from.env"}[name] }
	for args, want := range map[string]string{
		"get":                 "{from.env  get} true",
		"--account admin get": "{from.env admin get} true",
		"--group g --account admin@example.com list": "{g admin@example.com list} true",
		"-account=admin store":                       "{from.env admin store} true",
		"--account admin":                            "{  } false",
		"get erase":                                  "{  } false",
		"--frobnicate get":                           "{  } false",
	} {
		o, ok := parse(strings.Fields(args), env)
		if got := fmt.Sprint(o, " ", ok); got != want {
			t.Errorf("%q: %s, want %s", args, got, want)
		}
	}
}
