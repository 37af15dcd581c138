package main

import (
	"flag"
	"regexp"
	"strconv"
	"time"
)

// The errors of the flag package, which name flags with one dash.
var (
	flagUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	flagNoValue   = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
	flagBadValue  = regexp.MustCompile(`^invalid (?:boolean )?value (".*") for (?:flag )?-+([^:]*): `)
	flagBadSyntax = regexp.MustCompile(`^bad flag syntax: (.*)$`)
)

// flagError rewords err, from the flag package, with the flag spelled
// as in the help (--name) and, for a bad value, the form it takes.
func (f *cmdFlags) flagError(err error) string {
	msg := err.Error()
	if m := flagUndefined.FindStringSubmatch(msg); m != nil {
		return "unknown flag --" + m[1]
	}
	if m := flagNoValue.FindStringSubmatch(msg); m != nil {
		if form := valueForm(f.Lookup(m[1])); form != "" {
			return "--" + m[1] + " needs a value: " + form
		}
		return "--" + m[1] + " needs a value"
	}
	if m := flagBadValue.FindStringSubmatch(msg); m != nil {
		form := valueForm(f.Lookup(m[2]))
		if form == "" { // a Value of our own: its error says what it wants
			return "invalid value " + m[1] + " for --" + m[2] + ": " + msg[len(m[0]):]
		}
		return "invalid value " + m[1] + " for --" + m[2] + ": want " + form
	}
	if m := flagBadSyntax.FindStringSubmatch(msg); m != nil {
		return "bad flag syntax " + strconv.Quote(m[1]) + ": flags are --name value or --name=value"
	}
	return msg
}

// valueForm says what a flag's value looks like, by its type; "" for a
// string or a type it does not know.
func valueForm(fl *flag.Flag) string {
	if fl == nil {
		return ""
	}
	g, _ := fl.Value.(flag.Getter)
	if g == nil {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "a duration with its unit, such as " + durationExample(fl)
	case bool:
		return "true or false (or the flag alone for true)"
	case int, int64:
		return "an integer, such as " + numberExample(fl)
	case uint, uint64:
		return "a non-negative integer, such as " + numberExample(fl)
	case float64:
		return "a number, such as " + numberExample(fl)
	}
	return ""
}

func durationExample(fl *flag.Flag) string {
	if fl.DefValue != "" && fl.DefValue != "0s" {
		return fl.DefValue
	}
	return "10s"
}

func numberExample(fl *flag.Flag) string {
	if fl.DefValue != "" && fl.DefValue != "0" {
		return fl.DefValue
	}
	return "1"
}
