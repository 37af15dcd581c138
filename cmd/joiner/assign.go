package main

import (
	"fmt"
	"io"
)

// runAssign is a placeholder until the subcommand lands.
func runAssign(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "joiner assign: not implemented yet")
	return 1
}
