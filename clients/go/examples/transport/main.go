// Command transport sends a request with every header the broker signs, through msso.Transport
// and net/http, and prints the answer. On a broker's error it exits as the msso command would
// (2: not logged in, 1: expired, 7: not registered, …).
//
//	go build -o report ./examples/transport
//	msso apps allow ./report --group com.example.suite   # mssod knows it by this executable
//	./report -group com.example.suite https://api.example.com/items
//	./report -method POST -data '{"name": "x"}' https://api.example.com/items
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"msso"
)

func main() {
	group := flag.String("group", "", "the access group (default: the only one this program may use)")
	method := flag.String("method", "GET", "the request's method")
	data := flag.String("data", "", "a JSON body to send")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: transport [-group G] [-method M] [-data JSON] URL")
		os.Exit(64)
	}

	client := &http.Client{Transport: &msso.Transport{Group: *group}}
	var body io.Reader
	if *data != "" {
		body = strings.NewReader(*data)
	}
	request, err := http.NewRequest(*method, flag.Arg(0), body)
	if err != nil {
		fmt.Fprintln(os.Stderr, "transport:", err)
		os.Exit(64)
	}
	if body != nil {
		request.Header.Set("Content-Type", "application/json")
	}
	response, err := client.Do(request)
	var refused *msso.Error
	if errors.As(err, &refused) {
		fmt.Fprintln(os.Stderr, "transport:", refused.Message)
		os.Exit(refused.ExitStatus())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "transport:", err)
		os.Exit(1)
	}
	defer response.Body.Close()
	if _, err := io.Copy(os.Stdout, response.Body); err != nil || response.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "transport:", response.Status)
		os.Exit(1)
	}
}
