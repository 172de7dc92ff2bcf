// Command docker-credential-msso is a Docker credential helper that answers with the access token
// of an msso group, for the registries the group's `resources` name. Docker, skopeo, podman and
// buildah run it when their config.json (or containers-auth.json) names it:
//
//	{"credHelpers": {"registry.example.com": "msso"}}
//
// `get` reads a registry (as the tool names it: a host, or a URL) on standard input and prints
// {"ServerURL", "Username", "Secret"}: Secret is the group's access token, Username is "oauth2"
// ($MSSO_DOCKER_USERNAME to change it). The group is --group GROUP, else $MSSO_GROUP, else the
// daemon's default (the only group this helper is registered for, or the only one configured);
// the group's account is --account NAME, else $MSSO_ACCOUNT, else the daemon's choice (the
// group's default account). Docker runs a helper without arguments: for registries that take
// another account's token, name a script that runs this one with them (docker-credential-msso-admin:
// `exec docker-credential-msso --account admin "$@"`; "credHelpers": {"HOST": "msso-admin"}).
// The helper names the
// registry to the broker as the token's resource, https://HOST/v2/ for a host, so a group with
// `resources` answers only for its registries; for any other the answer is Docker's "credentials
// not found", and the tool goes on without credentials. Not logged in (or expired), it prints
// the daemon's sentence (run `msso login`) and exits as msso would.
//
// `store` and `erase` do nothing (the token is the broker's: `msso login` and `msso logout`);
// `list` prints {}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"msso"
)

// notFound is the message Docker's credential helper protocol reserves for "no credentials here".
const notFound = "credentials not found in native keychain"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout))
}

// options are the helper's arguments: [--group GROUP] [--account NAME] ACTION.
type options struct {
	group, account, action string
}

// parse reads the arguments; the group defaults to $MSSO_GROUP (the account to $MSSO_ACCOUNT,
// which the client reads).
func parse(args []string, getenv func(string) string) (options, bool) {
	var o options
	flags := flag.NewFlagSet("docker-credential-msso", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	flags.StringVar(&o.group, "group", "", "")
	flags.StringVar(&o.account, "account", "", "")
	if err := flags.Parse(args); err != nil || flags.NArg() != 1 {
		return options{}, false
	}
	o.action = flags.Arg(0)
	if o.group == "" {
		o.group = getenv("MSSO_GROUP")
	}
	return o, true
}

func run(args []string, stdin io.Reader, stdout io.Writer) int {
	o, ok := parse(args, os.Getenv)
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: docker-credential-msso [--group GROUP] [--account NAME] get|store|erase|list (a Docker credential helper)")
		return 64
	}
	switch o.action {
	case "get":
		return get(o, stdin, stdout)
	case "store", "erase":
		_, _ = io.Copy(io.Discard, stdin)
		return 0
	case "list":
		fmt.Fprintln(stdout, "{}")
		return 0
	case "version":
		fmt.Fprintln(stdout, "docker-credential-msso (msso)")
		return 0
	}
	fmt.Fprintf(os.Stderr, "docker-credential-msso: unknown action %q; get, store, erase or list\n", o.action)
	return 64
}

func get(o options, stdin io.Reader, stdout io.Writer) int {
	input, err := io.ReadAll(io.LimitReader(stdin, 4096))
	registry := strings.TrimSpace(string(input))
	if err != nil || registry == "" {
		fmt.Fprintln(stdout, "docker-credential-msso: no registry on standard input")
		return 64
	}
	resource, ok := resourceOf(registry)
	if !ok {
		fmt.Fprintln(stdout, notFound)
		return 1
	}
	client := &msso.Client{Name: "docker-credential-msso", Account: o.account}
	defer client.Close()
	token, err := client.Token(context.Background(), msso.TokenRequest{Group: o.group, Resource: resource})
	var refused *msso.Error
	switch {
	case errors.Is(err, msso.ErrResourceForbidden):
		fmt.Fprintln(stdout, notFound) // not one of the group's registries
		return 1
	case errors.As(err, &refused):
		fmt.Fprintln(stdout, refused.Message) // what to do: run `msso login`, …
		return refused.ExitStatus()
	case err != nil:
		fmt.Fprintln(stdout, err)
		return 70
	}
	username := os.Getenv("MSSO_DOCKER_USERNAME")
	if username == "" {
		username = "oauth2"
	}
	answer, _ := json.Marshal(map[string]string{"ServerURL": registry, "Username": username, "Secret": token.AccessToken})
	_, _ = stdout.Write(append(answer, '\n'))
	return 0
}

// resourceOf is the URL the token will be sent to: a registry named by its host (as Docker names
// those of credHelpers) is https://HOST/v2/, the registry API's root; one named by a URL is that
// URL. Anything else is not a registry this helper answers for.
func resourceOf(registry string) (string, bool) {
	if !strings.Contains(registry, "://") {
		registry = "https://" + registry + "/v2/"
	}
	u, err := url.Parse(registry)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return "", false
	}
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String(), true
}
