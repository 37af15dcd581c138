package main

import (
	"fmt"
	"io"
)

// runLoadgen is a placeholder until the subcommand lands.
func runLoadgen(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "joiner loadgen: not implemented yet")
	return 1
}
