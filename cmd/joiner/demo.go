package main

import (
	"fmt"
	"io"
)

// runDemo is a placeholder until the subcommand lands.
func runDemo(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "joiner demo: not implemented yet")
	return 1
}
