// Command consul is Consul v1.14.8's own CLI, built from the module proxy for
// relaymesh's tests (`make bin/consul`): no Consul package is served to the
// machines the tests run on. It does what consul's main.go does.
package main

import (
	"fmt"
	"io"
	"log"
	"os"

	"github.com/hashicorp/consul/command"
	"github.com/hashicorp/consul/command/cli"
	"github.com/hashicorp/consul/command/version"
	mcli "github.com/mitchellh/cli"
)

func main() {
	// Consul logs through its own hclog; stray stdlib log output is noise.
	log.SetOutput(io.Discard)
	ui := &cli.BasicUI{BasicUi: mcli.BasicUi{Writer: os.Stdout, ErrorWriter: os.Stderr}}
	c := &mcli.CLI{
		Args:        os.Args[1:],
		Commands:    command.RegisteredCommands(ui),
		Name:        "consul",
		HelpFunc:    mcli.BasicHelpFunc("consul"),
		HelpWriter:  os.Stdout,
		ErrorWriter: os.Stderr,
	}
	if c.IsVersion() {
		os.Exit(version.New(ui).Run(nil))
	}
	code, err := c.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "consul:", err)
		os.Exit(1)
	}
	os.Exit(code)
}
