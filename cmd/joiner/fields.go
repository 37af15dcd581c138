package main

import (
	"log/slog"
	"strings"

	"github.com/joiner-dev/joiner/internal/fielderr"
	"github.com/joiner-dev/joiner/kafkasec"
)

// fieldFlags names the flags that set each Config field of node, loadgen
// and demo, statestore.Options.Dirs and the Brokers argument of kafkasec,
// for the library errors that name fields (internal/fielderr). kafkasec.FlagName names the flags of
// kafkasec.Config. A field set by several flags lists them all.
var fieldFlags = map[string][]string{
	"Brokers":        {"brokers"},
	"InstanceID":     {"instance-id"},
	"HTTPAddr":       {"http-addr"},
	"StartupTimeout": {"startup-timeout"},
	"Partitions":     {"partitions"},
	"CreateTopics":   {"create-topics"},
	"PeerTokenFile":  {"peer-token-file"},
	"HTTPCertFile":   {"http-tls-cert-file"},
	"HTTPKeyFile":    {"http-tls-key-file"},
	"PeerCAFile":     {"http-tls-ca-file", "tls-ca-file"},
	"RetryTimeout":   {"retry-timeout"},
	"Dirs":           {"state-dir"},
	"MinFreeBytes":   {"state-min-free-bytes"},
	"OpenTimeout":    {"state-open-timeout"},

	"Workers":                {"workers"},
	"Symbols":                {"symbols"},
	"TicksPerSymbol":         {"ticks-per-symbol"},
	"NotificationsPerSymbol": {"notifications-per-symbol"},
	"Timeout":                {"timeout"},
	"Assignor":               {"assignor"},
	"Grace":                  {"grace"},
}

// flagsOf names field by the flags of this command that set it ("" when
// none does, and the error keeps the field's name).
func (f *cmdFlags) flagsOf(field string) string {
	names := fieldFlags[field]
	if n := kafkasec.FlagName(field); n != "" {
		names = append(names[:len(names):len(names)], n)
	}
	var out []string
	for _, n := range names {
		if f.Lookup(n) != nil {
			out = append(out, "--"+n)
		}
	}
	return strings.Join(out, " or ")
}

// message is err's message with the fields of library errors named by
// this command's flags.
func (f *cmdFlags) message(err error) string { return fielderr.Rename(err, f.flagsOf) }

// logger returns a logger on h that names the fields of the library errors
// it logs by this command's flags, as message does for the final error:
// the WARN of a retry says --brokers, not Brokers.
func (f *cmdFlags) logger(h slog.Handler) *slog.Logger {
	return slog.New(fielderr.Handler(h, f.flagsOf))
}
