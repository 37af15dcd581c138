package main

import (
	"fmt"
	"io"
)

// runWorker is a placeholder until the subcommand lands.
func runWorker(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "joiner run: not implemented yet")
	return 1
}
