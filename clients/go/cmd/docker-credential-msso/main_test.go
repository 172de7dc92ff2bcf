package main

import "testing"

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
