package main

import (
	"fmt"
	"io"
)

// runPartition is a placeholder until the subcommand lands.
func runPartition(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "joiner partition: not implemented yet")
	return 1
}
