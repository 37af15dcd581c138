package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/joiner-dev/joiner/murmur2"
)

func runPartitionArgs(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = runPartition(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestPartitionOutput(t *testing.T) {
	// "21" → -973932308, "foobar" → -790332482 (Kafka's UtilsTest vectors).
	p21 := (-973932308 & 0x7fffffff) % 6
	pfoo := (-790332482 & 0x7fffffff) % 6
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"flags first", []string{"--partitions", "6", "21", "foobar"},
			"21\t" + itoa(p21) + "\nfoobar\t" + itoa(pfoo) + "\n"},
		{"hash column", []string{"--partitions=6", "--hash", "21", "foobar"},
			"21\t" + itoa(p21) + "\t-973932308\nfoobar\t" + itoa(pfoo) + "\t-790332482\n"},
		{"flags after keys", []string{"21", "--partitions", "6", "foobar", "-hash"},
			"21\t" + itoa(p21) + "\t-973932308\nfoobar\t" + itoa(pfoo) + "\t-790332482\n"},
		{"input order and duplicates kept", []string{"-partitions", "6", "foobar", "21", "foobar"},
			"foobar\t" + itoa(pfoo) + "\n21\t" + itoa(p21) + "\nfoobar\t" + itoa(pfoo) + "\n"},
		{"dash-dash ends flags", []string{"--partitions", "1", "--", "--hash", "-x"},
			"--hash\t0\n-x\t0\n"},
		{"empty key hashes zero bytes", []string{"--partitions", "1", "--hash", ""},
			"\t0\t275646681\n"},
		{"single dash is a key", []string{"--partitions", "1", "-"}, "-\t0\n"},
		{"utf-8 bytes as given", []string{"--partitions", "1000", "--hash", "€"},
			"€\t" + itoa(int(hashOf("€")&0x7fffffff)%1000) + "\t" + itoa(int(hashOf("€"))) + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runPartitionArgs(tt.args...)
			if code != 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, errOut)
			}
			if out != tt.want {
				t.Errorf("stdout = %q, want %q", out, tt.want)
			}
			if errOut != "" {
				t.Errorf("stderr = %q, want empty", errOut)
			}
		})
	}
}

func TestPartitionUsageErrors(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no args", nil, "--partitions is required"},
		{"no keys", []string{"--partitions", "6"}, "no keys given"},
		{"missing partitions", []string{"AAPL"}, "--partitions is required"},
		{"zero partitions", []string{"--partitions", "0", "AAPL"}, "at least 1"},
		{"negative partitions", []string{"--partitions=-3", "AAPL"}, "at least 1"},
		{"unparsable partitions", []string{"--partitions", "six", "AAPL"}, `invalid value "six" for --partitions: want an integer`},
		{"flag without value", []string{"AAPL", "--partitions"}, "--partitions needs a value"},
		{"unknown flag", []string{"--partitions", "6", "--bogus", "AAPL"}, "unknown flag --bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runPartitionArgs(tt.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing", out)
			}
			if !strings.Contains(errOut, tt.wantErr) || !strings.HasSuffix(errOut, "(see joiner partition -h)\n") || strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr = %q, want one line with %q and where the help is", errOut, tt.wantErr)
			}
		})
	}
}

func TestPartitionHelp(t *testing.T) {
	code, out, errOut := runPartitionArgs("-h")
	if code != 0 || errOut != "" || !strings.Contains(out, "usage: joiner partition") {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func hashOf(s string) int32 { return murmur2.Hash([]byte(s)) }
